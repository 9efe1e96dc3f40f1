//! What the docs say about behaviour, checked against the code: each test names the doc line it
//! checks (`says` finds the sentence, so a reworded statement fails until its test follows it).

use std::collections::BTreeSet;

use regex::Regex;
use serde_json::Value;
use tpu_operator_api::crds;

use super::{BIN, root};

/// The text of the docs this module reads: README.md, docs/*.md, the chart's README, the crates'
/// READMEs.
fn docs() -> Vec<(String, String)> {
    let root = root();
    crate::docs_kit::all_doc_files(&root)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// `file:line` of the statement `needle` (whitespace, line breaks included, matched loosely); panics
/// when the doc no longer says it.
fn says(file: &str, needle: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let (flat, lines) = flatten(&text);
    let needle = needle.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = flat
        .find(&needle)
        .unwrap_or_else(|| panic!("{file} no longer says {needle:?}: update the doc and this test"));
    format!("{file}:{}", lines[at])
}

/// The text with every run of whitespace one space, and the source line of each byte.
fn flatten(text: &str) -> (String, Vec<usize>) {
    let (mut flat, mut lines, mut line, mut space) = (String::new(), Vec::new(), 1, false);
    for c in text.chars() {
        if c.is_whitespace() {
            if !space {
                flat.push(' ');
                lines.push(line);
            }
            space = true;
        } else {
            flat.push(c);
            lines.extend(std::iter::repeat_n(line, c.len_utf8()));
            space = false;
        }
        if c == '\n' {
            line += 1;
        }
    }
    (flat, lines)
}

/// Every match of `re` in the docs (group 1), with where it is.
fn mentions(re: &Regex) -> Vec<(String, String)> {
    mentions_in(docs(), re)
}

/// README.md, docs/*.md and the chart's README: the docs about the operator's own API (the
/// emulators' READMEs describe Google's and Kubernetes' APIs, whose fields are not ours).
fn operator_docs() -> Vec<(String, String)> {
    docs()
        .into_iter()
        .filter(|(f, _)| !f.starts_with("crates/"))
        .collect()
}

fn mentions_in(docs: Vec<(String, String)>, re: &Regex) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (file, text) in docs {
        let (flat, lines) = flatten(&text);
        for cap in re.captures_iter(&flat) {
            let m = cap.get(1).unwrap();
            out.push((format!("{file}:{}", lines[m.start()]), m.as_str().to_string()));
        }
    }
    out
}

fn crd_json() -> Vec<Value> {
    crds::all()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect()
}

fn number(word: &str) -> usize {
    match word.to_ascii_lowercase().as_str() {
        "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        w => w.parse().unwrap_or_else(|_| panic!("not a number: {w}")),
    }
}

/// A dated record of measurements ("the three kinds' caches" of a run): left out of the counts.
const MEASUREMENTS: &str = "docs/benchmarks.md";

const NUMBER: &str = r"(one|two|three|four|five|six|seven|eight|[0-9]+)";

/// docs/crd-reference.md:4 names each kind's scope and which kinds are in the `tpu-operator`
/// category, as the CRDs declare them (it once said "all kinds are namespaced").
#[test]
fn crd_reference_intro_gives_each_kinds_scope_and_category() {
    let at = says("docs/crd-reference.md", "every kind has a status subresource");
    let text = std::fs::read_to_string(root().join("docs/crd-reference.md")).unwrap();
    let intro = text
        .lines()
        .find(|l| l.contains("every kind has a status subresource"))
        .unwrap();
    let kind = Regex::new(r"`([A-Z][A-Za-z]+)`").unwrap();
    let mut named = BTreeSet::new();
    for sentence in intro.split("; ") {
        for k in kind.captures_iter(sentence) {
            let crd = serde_json::to_value(
                crds::by_kind(&k[1]).unwrap_or_else(|| panic!("{at}: no kind {}", &k[1])),
            )
            .unwrap();
            named.insert(k[1].to_string());
            let scope = match crd["spec"]["scope"].as_str().unwrap() {
                "Namespaced" => "namespaced",
                _ => "cluster-scoped",
            };
            assert!(sentence.contains(scope), "{at}: {} is {scope}: {sentence}", &k[1]);
            let in_category = crd["spec"]["names"]["categories"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c == "tpu-operator"));
            assert_eq!(
                sentence.contains("`tpu-operator` category"),
                in_category,
                "{at}: category of {}: {sentence}",
                &k[1]
            );
        }
    }
    assert_eq!(named.len(), crds::all().len(), "{at}: every kind named");
}

/// Every "N CRDs" / "N custom resources" in the docs is the number of CRDs the operator installs
/// (the chart's README said three; there are four).
#[test]
fn every_crd_count_in_the_docs_is_the_number_of_crds() {
    let n = crds::all().len();
    let re = Regex::new(&format!(
        r"(?i)\b{NUMBER} (?:CRDs|custom resources|custom resource definitions)\b"
    ))
    .unwrap();
    let found: Vec<_> = mentions(&re)
        .into_iter()
        .filter(|(at, _)| !at.starts_with(MEASUREMENTS))
        .collect();
    assert!(found.len() >= 5, "{found:?}");
    let wrong: Vec<_> = found.iter().filter(|(_, w)| number(w) != n).collect();
    assert!(wrong.is_empty(), "there are {n} CRDs: {wrong:?}");
}

/// Every "N kinds" in the docs: the four kinds, or the three namespaced workload kinds (TpuSlice,
/// PreprocessBatch, TrainingPipeline) when it says so ("workload kinds"), as the CRDs are.
#[test]
fn every_kind_count_in_the_docs_is_right() {
    let crds = crd_json();
    let all = crds.len();
    let workload = crds.iter().filter(|c| c["spec"]["scope"] == "Namespaced").count();
    let re = Regex::new(&format!(r"(?i)\b{NUMBER} ((?:workload )?kinds)\b")).unwrap();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (file, text) in docs().into_iter().filter(|(f, _)| f != MEASUREMENTS) {
        let (flat, lines) = flatten(&text);
        for cap in re.captures_iter(&flat) {
            let n = number(&cap[1]);
            let want = if cap[2].to_lowercase().starts_with("workload") {
                workload
            } else {
                all
            };
            checked += 1;
            if n != want {
                wrong.push(format!(
                    "{file}:{}: {:?} (want {want})",
                    lines[cap.get(0).unwrap().start()],
                    &cap[0]
                ));
            }
        }
    }
    assert!(checked >= 10, "{checked}");
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// README.md's table of kinds: each namespaced kind with exactly its CRD's short names.
#[test]
fn readme_kinds_table_has_each_kinds_short_names() {
    let at = says(
        "README.md",
        "| kind | short names | what it owns in Google Cloud |",
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for crd in crd_json().iter().filter(|c| c["spec"]["scope"] == "Namespaced") {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{kind}` |")))
            .unwrap_or_else(|| panic!("{at}: no row for {kind}"));
        let short: Vec<String> = crd["spec"]["names"]["shortNames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("`{}`", s.as_str().unwrap()))
            .collect();
        assert_eq!(row.split('|').nth(2).unwrap().trim(), short.join(", "), "{at}");
    }
}

/// docs/install.md §1: the number of Google APIs the operator calls is the number of Google
/// service clients in crates/gcp (the official crates plus Cloud Storage's REST calls), and the
/// `gcloud services enable` line enables exactly those APIs.
#[test]
fn install_md_names_every_google_api_the_operator_calls() {
    let toml = std::fs::read_to_string(root().join("crates/gcp/Cargo.toml")).unwrap();
    let client = Regex::new(r"(?m)^google-cloud-([a-z]+)-v[0-9]+ =").unwrap();
    let mut apis: BTreeSet<String> = client
        .captures_iter(&toml)
        .map(|c| match &c[1] {
            "aiplatform" => "aiplatform".to_string(),
            other => other.to_string(),
        })
        .collect();
    // Cloud Storage is called over REST (crates/gcp/src/storage.rs), with no Google crate.
    let storage = std::fs::read_to_string(root().join("crates/gcp/src/storage.rs")).unwrap();
    assert!(storage.contains("storage.googleapis.com"));
    apis.insert("storage".into());
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
    ];
    let at = says(
        "docs/install.md",
        &format!(
            "The operator calls {} Google APIs (see `crates/gcp`)",
            words[apis.len()]
        ),
    );
    let install = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let (flat, _) = flatten(&install.replace("\\\n", " "));
    let enable = Regex::new(r"gcloud services enable ([a-z. ]+) --project").unwrap();
    let enabled: BTreeSet<String> = enable.captures(&flat).unwrap()[1]
        .split_whitespace()
        .map(|s| s.trim_end_matches(".googleapis.com").to_string())
        .collect();
    assert_eq!(enabled, apis, "{at}: `gcloud services enable` list");
}

fn validator(kind: &str) -> kube_emulator::validation::CrdValidator {
    let crd = serde_json::to_value(crds::by_kind(kind).unwrap()).unwrap();
    kube_emulator::validation::CrdValidator::new(&crd, tpu_operator_api::crds::VERSION).unwrap()
}

/// docs/policy.md "Which policies apply": a policy that names no way to select is refused at
/// apply, one that selects no namespace (an empty list, a selector nothing matches) is accepted.
#[test]
fn policy_md_a_policy_selecting_no_namespace_is_accepted() {
    let at = says(
        "docs/policy.md",
        "A policy that sets neither `spec.namespaces` nor `spec.namespaceSelector` is refused at apply",
    );
    let v = validator("TpuPolicy");
    let policy = |spec: Value| {
        serde_json::json!({"apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
            "metadata": {"name": "p"}, "spec": spec})
    };
    let refused = v.validate(&policy(serde_json::json!({"maxChips": 8})), None);
    assert!(refused.is_err(), "{at}: a policy with no selector");
    for spec in [
        serde_json::json!({"namespaces": []}),
        serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "nobody"}}}),
    ] {
        assert!(
            v.validate(&policy(spec.clone()), None).is_ok(),
            "{at}: {spec} selects no namespace and is accepted"
        );
    }
}

/// Every property name anywhere in the CRDs' schemas and the operator's config schema.
fn field_names() -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(props)) = m.get("properties") {
                    out.extend(props.keys().cloned());
                }
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    crd_json().iter().for_each(|c| walk(c, &mut out));
    let config = std::process::Command::new(BIN)
        .arg("config-schema")
        .output()
        .unwrap();
    assert!(config.status.success());
    walk(&serde_json::from_slice(&config.stdout).unwrap(), &mut out);
    out
}

/// Every limit-like setting the docs name in code style (`max…`, `allow…`, `allowed…`) is a field
/// of a CRD or of the operator's config (docs/kueue.md named a `maxUsdPerHour` budget).
#[test]
fn every_limit_field_named_in_the_docs_exists() {
    let fields = field_names();
    let re = Regex::new(r"`((?:max|allow|allowed)[A-Z][A-Za-z]*)`").unwrap();
    let found = mentions_in(operator_docs(), &re);
    assert!(found.len() > 30, "{}", found.len());
    // OpenAPI's own bounds, which docs/api-review.md discusses, are schema keywords, not fields.
    const SCHEMA_KEYWORDS: &[&str] = &["maxItems", "maxLength", "maxProperties"];
    let missing: Vec<_> = found
        .iter()
        .filter(|(_, f)| !fields.contains(f) && !SCHEMA_KEYWORDS.contains(&f.as_str()))
        .collect();
    assert!(missing.is_empty(), "not a field: {missing:?}");
}

/// Paths the docs name that are other objects' fields, by doc and path: Flux's and Argo CD's
/// objects in docs/gitops.md, kstatus's Go function, a CRD's own field, Kueue's Workload.
fn foreign(at: &str, path: &str) -> bool {
    const FOREIGN: &[(&str, &str)] = &[
        ("docs/gitops.md", "spec.timeout"),
        ("docs/gitops.md", "spec.healthChecks"),
        ("docs/gitops.md", "spec.dependsOn"),
        ("docs/gitops.md", "spec.install.crds"),
        ("docs/gitops.md", "spec.upgrade.crds"),
        ("docs/gitops.md", "spec.values"),
        ("docs/gitops.md", "status.Compute"),
        ("docs/testing.md", "status.Compute"),
        ("docs/testing.md", "spec.names.listKind"),
        ("docs/kueue.md", "status.admission"),
        ("docs/api-versions.md", "status.storedVersions"),
    ];
    FOREIGN
        .iter()
        .any(|(file, p)| at.starts_with(&format!("{file}:")) && *p == path)
}

/// Every `spec.…` / `status.…` path the docs name in code style resolves in some kind's schema.
#[test]
fn every_spec_and_status_path_named_in_the_docs_exists() {
    let crds = crd_json();
    let re = Regex::new(r"`((?:spec|status)(?:\.[a-zA-Z][a-zA-Z0-9]*(?:\[\])?)+)`").unwrap();
    let resolves = |path: &str| {
        crds.iter().any(|crd| {
            let mut node = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            for part in path.split('.') {
                let name = part.trim_end_matches("[]");
                node = &node["properties"][name];
                if node.is_null() {
                    return false;
                }
                if part.ends_with("[]") {
                    node = &node["items"];
                }
                if node["type"] == "array" && !part.ends_with("[]") {
                    // `status.conditions.reason` style: step into the items.
                    let items = &node["items"];
                    if items["properties"].is_object() {
                        node = items;
                    }
                }
            }
            true
        })
    };
    let found = mentions_in(operator_docs(), &re);
    assert!(found.len() > 50, "{}", found.len());
    let missing: Vec<_> = found
        .iter()
        .filter(|(at, p)| !resolves(p) && !p.ends_with(".rs") && !foreign(at, p))
        .collect();
    assert!(missing.is_empty(), "no such field: {missing:?}");
}

/// String literals of the API and controller sources (not their tests): where every condition
/// reason, Event reason and phase is spelled.
fn code_literals() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>, lit: &Regex) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out, lit);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.extend(lit.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }
    let lit = Regex::new(r#""([A-Z][A-Za-z]+)""#).unwrap();
    let mut out = BTreeSet::new();
    for dir in ["crates/api/src", "crates/controller/src"] {
        walk(&root().join(dir), &mut out, &lit);
    }
    out
}

/// Every condition or Event reason the docs name ("reason `X`", "`Stalled/X`", "Warning `X`",
/// "Event `X`") is a reason the API or the controllers set.
#[test]
fn every_reason_named_in_the_docs_exists_in_the_code() {
    let code = code_literals();
    let re = Regex::new(
        r"(?:reason|Warning|Event|Events:|Normal) `([A-Z][A-Za-z]+)`|`(?:Ready|Reconciling|Stalled|Ready=False|Stalled=True|Reconciling=True)/([A-Z][A-Za-z]+)`",
    )
    .unwrap();
    let mut found = Vec::new();
    for (file, text) in docs() {
        let (flat, lines) = flatten(&text);
        for cap in re.captures_iter(&flat) {
            let m = cap.get(1).or(cap.get(2)).unwrap();
            found.push((format!("{file}:{}", lines[m.start()]), m.as_str().to_string()));
        }
    }
    assert!(found.len() > 20, "{}", found.len());
    let missing: Vec<_> = found.iter().filter(|(_, r)| !code.contains(r)).collect();
    assert!(
        missing.is_empty(),
        "no such reason in crates/api or crates/controller: {missing:?}"
    );
}

/// Every phase the docs name ("phase `X`") is a phase some kind's schema allows.
#[test]
fn every_phase_named_in_the_docs_exists() {
    let phases: BTreeSet<String> = crd_json()
        .iter()
        .filter_map(|c| {
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
                ["properties"]["phase"]["enum"]
                .as_array()
                .cloned()
        })
        .flatten()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let re = Regex::new(r"\bphases? `([A-Z][A-Za-z]+)`").unwrap();
    let found = mentions(&re);
    assert!(found.len() > 5, "{}", found.len());
    let missing: Vec<_> = found.iter().filter(|(_, p)| !phases.contains(p)).collect();
    assert!(missing.is_empty(), "no such phase: {missing:?}");
}

/// docs/policy.md "Threat model" and docs/install.md: the chart adds the three workload kinds (not
/// TpuPolicy, which is cluster-scoped) to the default `edit` and `view` roles.
#[test]
fn chart_adds_the_three_workload_kinds_to_edit_and_view() {
    let at = [
        says(
            "docs/policy.md",
            "the chart adds the three workload kinds to `edit` and `view`",
        ),
        says(
            "docs/install.md",
            "the chart adds the three workload kinds to Kubernetes' default user-facing roles",
        ),
    ];
    let helm = crate::support::Helm::new();
    let docs = crate::support::documents(&helm.template(&[]));
    let want: BTreeSet<String> = crd_json()
        .iter()
        .filter(|c| c["spec"]["scope"] == "Namespaced")
        .map(|c| c["spec"]["names"]["plural"].as_str().unwrap().to_string())
        .collect();
    for role in ["tpu-operator-edit", "tpu-operator-view"] {
        let r = crate::support::find(&docs, "ClusterRole", Some(role));
        let resources: BTreeSet<String> = r["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|rule| rule["resources"].as_array().unwrap().clone())
            .map(|v| v.as_str().unwrap().to_string())
            .filter(|r| !r.contains('/'))
            .collect();
        assert_eq!(resources, want, "{at:?}: {role}");
    }
}

/// docs/policy.md "What a tenant sees": the `kubectl get tpupolicies` header is NAME and the
/// TpuPolicy printer columns, as kubectl prints them (upper case).
#[test]
fn policy_md_tpupolicies_columns_are_the_printer_columns() {
    let at = says("docs/policy.md", "$ kubectl get tpupolicies");
    let text = std::fs::read_to_string(root().join("docs/policy.md")).unwrap();
    let header = text
        .lines()
        .skip_while(|l| *l != "$ kubectl get tpupolicies")
        .nth(1)
        .unwrap();
    let crd = serde_json::to_value(crds::by_kind("TpuPolicy").unwrap()).unwrap();
    let mut want = vec!["NAME".to_string()];
    want.extend(
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_uppercase()),
    );
    let got: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(got, want, "{at}");
}
