//! Schema tests: the committed generated files are current, and every fixture and example is
//! accepted or refused by the very validator kube-emulator runs at admission (structural schema
//! with `jsonschema`, pruning and defaulting, then CEL with `kube-cel`, transition rules included).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use kube_emulator::validation::{CrdValidator, Invalid};
use serde_json::Value;
use tpu_operator_api::{PreprocessBatch, TpuPolicy, TpuSlice, TrainingPipeline, crds, reference};

const REGENERATE: &str =
    "run `cargo run -p tpu-operator -- crds --out crds/ --reference docs/crd-reference.md`";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn committed_crds_are_current() {
    for (name, yaml) in crds::render_all() {
        let path = repo_root().join("crds").join(&name);
        let committed = fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == yaml,
            "crds/{name} is out of date with crates/api: {REGENERATE}"
        );
    }
}

#[test]
fn committed_crd_reference_is_current() {
    let path = repo_root().join("docs/crd-reference.md");
    let committed = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == reference::render(),
        "docs/crd-reference.md is out of date: {REGENERATE}"
    );
}

fn validators() -> BTreeMap<String, CrdValidator> {
    crds::all()
        .into_iter()
        .map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let json = serde_json::to_value(&crd).unwrap();
            let v = CrdValidator::new(&json, crds::VERSION).unwrap_or_else(|e| panic!("{kind}: {e}"));
            (kind, v)
        })
        .collect()
}

/// A manifest file: one document (a create) or two (old, then new: an update).
struct Manifest {
    path: PathBuf,
    expects: Vec<String>,
    message: Option<String>,
    /// `# stored: before-tightening`: the first document was stored before a rule tightened, so
    /// it is not admitted as a create (see [`admit`]).
    stored_before_tightening: bool,
    docs: Vec<Value>,
}

fn load(path: &Path) -> Manifest {
    let text = fs::read_to_string(path).unwrap();
    let header = |key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("# {key}:")))
            .map(|v| v.trim().to_string())
            .collect()
    };
    let docs = serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect();
    Manifest {
        path: path.to_path_buf(),
        expects: header("expect"),
        message: header("message").pop(),
        stored_before_tightening: header("stored").iter().any(|v| v == "before-tightening"),
        docs,
    }
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Validates every document as kube-emulator would: the first as a create; each later one as an
/// update of the one before. With `stored_before_tightening` the first is an object written
/// before a rule tightened: it is validated as an update of itself, so ratcheting drops every
/// error on it, as the API server does for a value no update has changed.
fn admit(
    validators: &BTreeMap<String, CrdValidator>,
    docs: &[Value],
    stored_before_tightening: bool,
) -> Result<Vec<Value>, (usize, Invalid)> {
    let mut out = Vec::new();
    let mut previous: Option<Value> = None;
    for (i, doc) in docs.iter().enumerate() {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let v = validators
            .get(kind)
            .unwrap_or_else(|| panic!("document {i}: unknown kind {kind:?}"));
        let old = if i == 0 && stored_before_tightening {
            Some(doc)
        } else {
            previous.as_ref()
        };
        let stored = v.validate(doc, old).map_err(|e| (i, e))?;
        previous = Some(stored.clone());
        out.push(stored);
    }
    Ok(out)
}

/// The stored object must deserialize into the Rust type the controllers use.
fn round_trip(stored: &Value) {
    let result = match stored["kind"].as_str() {
        Some("TpuSlice") => serde_json::from_value::<TpuSlice>(stored.clone()).map(drop),
        Some("PreprocessBatch") => serde_json::from_value::<PreprocessBatch>(stored.clone()).map(drop),
        Some("TrainingPipeline") => serde_json::from_value::<TrainingPipeline>(stored.clone()).map(drop),
        Some("TpuPolicy") => serde_json::from_value::<TpuPolicy>(stored.clone()).map(drop),
        other => panic!("unexpected kind {other:?}"),
    };
    result.unwrap_or_else(|e| panic!("stored object does not deserialize: {e}\n{stored:#}"));
}

fn assert_all_valid(dir: &Path) -> usize {
    let validators = validators();
    let files = yaml_files(dir);
    let mut failures = Vec::new();
    for file in &files {
        let m = load(file);
        assert!(!m.docs.is_empty(), "{}: no documents", file.display());
        match admit(&validators, &m.docs, m.stored_before_tightening) {
            Ok(stored) => stored.iter().for_each(round_trip),
            Err((i, e)) => failures.push(format!("{} (document {i}): {e}", m.path.display())),
        }
        // Pruning must not have silently dropped a misspelled field.
        for (i, doc) in m.docs.iter().enumerate() {
            let v = &validators[doc["kind"].as_str().unwrap()];
            if let Ok(d) = v.validate_detailed(doc, None)
                && !d.unknown_fields.is_empty()
            {
                failures.push(format!(
                    "{} (document {i}): unknown fields {:?}",
                    m.path.display(),
                    d.unknown_fields
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "manifests that should validate were refused:\n{}",
        failures.join("\n")
    );
    files.len()
}

#[test]
fn valid_fixtures_are_admitted() {
    let n = assert_all_valid(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid"));
    assert!(n >= 15, "expected at least 15 valid fixtures, found {n}");
}

#[test]
fn examples_are_admitted() {
    let n = assert_all_valid(&repo_root().join("examples"));
    assert!(n >= 4, "expected at least 4 examples, found {n}");
}

#[test]
fn invalid_fixtures_are_refused_naming_the_field() {
    let validators = validators();
    let files = yaml_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid"));
    assert!(
        files.len() >= 25,
        "expected at least 25 invalid fixtures, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for file in &files {
        let m = load(file);
        let name = m.path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            !m.expects.is_empty(),
            "{name}: add a `# expect: <field path>` header"
        );
        match admit(&validators, &m.docs, m.stored_before_tightening) {
            Ok(_) => failures.push(format!(
                "{name}: was admitted, expected an error on {:?}",
                m.expects
            )),
            Err((i, e)) => {
                if i + 1 != m.docs.len() {
                    failures.push(format!("{name}: document {i} (not the last) was refused: {e}"));
                    continue;
                }
                for expect in &m.expects {
                    if !e.causes.iter().any(|c| &c.field == expect) {
                        failures.push(format!("{name}: no error on {expect}; got: {e}"));
                    }
                }
                if let Some(msg) = &m.message
                    && !e.causes.iter().any(|c| c.message.contains(msg.as_str()))
                {
                    failures.push(format!("{name}: no message containing {msg:?}; got: {e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "invalid fixtures not refused as expected:\n{}",
        failures.join("\n")
    );
}

/// Node metadata over Google's 512 KiB (keys, values and the startup script together) is refused
/// at admission, on a TpuSlice and on a pipeline's training slice; just under it is admitted.
/// (Too large for a fixture file.)
#[test]
fn node_metadata_over_googles_limit_is_refused_naming_the_field() {
    let validators = validators();
    let quarter = 256 * 1024;
    let slice = |metadata: Value, script: usize| {
        serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"project": "demo-project", "zone": "us-east5-b", "acceleratorType": "v6e-8",
                     "runtimeVersion": "v2-alpha-tpuv6e", "metadata": metadata,
                     "startupScript": "s".repeat(script)},
        })
    };
    // 256 KiB + 200 KiB of values, 2 + 1 bytes of keys, 56 KiB - 4 of script: one byte under.
    let under = slice(
        serde_json::json!({"a": "v".repeat(quarter), "bb": "v".repeat(200 * 1024)}),
        56 * 1024 - 4,
    );
    admit(&validators, std::slice::from_ref(&under), false)
        .unwrap_or_else(|(_, e)| panic!("just under 512 KiB: {e}"));
    let mut over = under;
    over["spec"]["startupScript"] = Value::String("s".repeat(56 * 1024 - 3));
    let (_, e) = admit(&validators, &[over], false).expect_err("512 KiB of metadata admitted");
    assert!(
        e.causes
            .iter()
            .any(|c| c.field == "spec.metadata" && c.message.contains("512 KiB")),
        "{e}"
    );
}

/// kube-cel's static analysis: every rule is in scope and within the API server's cost budget.
#[test]
fn cel_rules_pass_static_analysis() {
    let mut warnings = Vec::new();
    for crd in crds::all() {
        let json = serde_json::to_value(&crd).unwrap();
        let schema = &json["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let compiled = kube_cel::compile_schema(schema);
        assert!(
            !compiled.has_errors(),
            "{}: {:?}",
            crd.spec.names.kind,
            compiled.compilation_errors()
        );
        collect_rules(schema, &mut |rule| {
            // kube-cel's scope check also reports comprehension variables (`k` in
            // `self.all(k, ...)`); only variables not bound by a macro in the rule are real.
            for w in kube_cel::check_rule_scope(rule, kube_cel::ScopeContext::CrdValidation) {
                let bound = ["all", "exists", "exists_one", "map", "filter"].iter().any(|m| {
                    w.message
                        .split('\'')
                        .nth(1)
                        .is_some_and(|var| rule.contains(&format!("{m}({var},")))
                });
                if !bound {
                    warnings.push(format!("{}: {}", crd.spec.names.kind, w.message));
                }
            }
            for w in kube_cel::estimate_rule_cost(rule, &compiled) {
                warnings.push(format!("{}: {} ({})", crd.spec.names.kind, w.message, rule));
            }
        });
    }
    assert!(
        warnings.is_empty(),
        "CEL analysis warnings:\n{}",
        warnings.join("\n")
    );
}

fn collect_rules(node: &Value, f: &mut dyn FnMut(&str)) {
    match node {
        Value::Object(m) => {
            for rule in m
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                f(rule["rule"].as_str().unwrap());
            }
            m.values().for_each(|v| collect_rules(v, f));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_rules(v, f)),
        _ => {}
    }
}

/// A validator for one schema node of a kind, wrapped as property `x` of an object root, so
/// thousands of small values can be checked quickly against exactly the rules on that node.
fn node_validator(kind: &str, path: &str) -> CrdValidator {
    let crd = serde_json::to_value(crds::by_kind(kind).unwrap()).unwrap();
    let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let node = crds::schema_node(&mut schema, path).unwrap().clone();
    let root = serde_json::json!({"type": "object", "properties": {"x": node}});
    CrdValidator::from_schema(root).unwrap()
}

fn topology_grid() -> Vec<String> {
    let two = [1, 2, 3, 4, 8, 16, 32];
    let three = [1, 2, 4, 8, 16];
    let mut out: Vec<String> = two
        .iter()
        .flat_map(|a| two.iter().map(move |b| format!("{a}x{b}")))
        .collect();
    for a in three {
        for b in three {
            for c in three {
                out.push(format!("{a}x{b}x{c}"));
            }
        }
    }
    out
}

/// Admission (CEL + patterns) and the Rust helpers the controllers use agree on every
/// accelerator type and topology, so nothing admitted fails at reconcile and nothing valid is
/// refused.
#[test]
fn admission_agrees_with_accelerator_helpers() {
    use tpu_operator_api::accelerator::{TpuGeneration, parse_accelerator_type, shape_from_config};
    let types = node_validator("TpuSlice", "spec.acceleratorType");
    let sizes = [
        1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096, 8192, 17920, 20000,
    ];
    let mut disagreements = Vec::new();
    for generation in TpuGeneration::ALL {
        for n in sizes {
            let t = format!("{}-{n}", generation.prefix());
            let admitted = types.validate(&serde_json::json!({"x": t}), None).is_ok();
            if admitted != parse_accelerator_type(&t).is_ok() {
                disagreements.push(format!("acceleratorType {t}: admitted={admitted}"));
            }
        }
    }
    let configs = node_validator("TpuSlice", "spec.acceleratorConfig");
    for generation in TpuGeneration::ALL {
        for topology in topology_grid() {
            let value = serde_json::json!({"x": {"type": generation.api_name(), "topology": topology}});
            let admitted = configs.validate(&value, None).is_ok();
            if admitted != shape_from_config(generation, &topology).is_ok() {
                disagreements.push(format!(
                    "acceleratorConfig {} {topology}: admitted={admitted}",
                    generation.api_name()
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "CEL and accelerator.rs disagree:\n{}",
        disagreements.join("\n")
    );
}

#[test]
fn admission_agrees_with_vertex_machine_type_table() {
    use tpu_operator_api::accelerator::VertexMachineType;
    let vertex = node_validator("TrainingPipeline", "spec.training.vertex");
    let mut disagreements = Vec::new();
    for machine in VertexMachineType::ALL {
        let mut topologies: Vec<Option<String>> = topology_grid().into_iter().map(Some).collect();
        topologies.push(None);
        for topology in topologies {
            let mut job =
                serde_json::json!({"machineType": machine.as_str(), "container": {"image": "trainer:1"}});
            if machine == VertexMachineType::CloudTpu {
                job["acceleratorType"] = "TPU_V2".into();
                job["acceleratorCount"] = 8.into();
            }
            if let Some(t) = &topology {
                job["tpuTopology"] = t.clone().into();
            }
            let admitted = vertex.validate(&serde_json::json!({"x": job}), None).is_ok();
            if admitted != machine.check_topology(topology.as_deref()).is_ok() {
                disagreements.push(format!(
                    "{} tpuTopology {topology:?}: admitted={admitted}",
                    machine.as_str()
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "CEL and the machine-type table disagree:\n{}",
        disagreements.join("\n")
    );
}
