//! Files generated from the chart (and from deploy/argocd/health.lua), compared with the committed
//! copies by `tests/chart.rs`. `TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart`
//! rewrites them.

use std::path::PathBuf;

use serde_json::Value;

use super::{Helm, chart_dir, repo_root};

const GENERATED: &str = "# Generated from charts/tpu-operator by crates/operator/tests/chart.rs \
                         (TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart). Do not edit.\n";

/// (path relative to the repository root, expected content).
pub fn expected_files(helm: &Helm) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();

    // deploy/crds: the CRDs the api crate generates (`tpu-operator crds`, the same bytes as crds/),
    // and the kustomization listing exactly them: one source of truth for the CRD list.
    for (name, yaml) in tpu_operator_api::crds::render_all() {
        files.push((PathBuf::from("deploy/crds").join(name), yaml));
    }
    files.push(("deploy/crds/kustomization.yaml".into(), crds_kustomization()));

    // The operator with default values (cluster scope), and the staging variant with gcp-emulator.
    // The images are kustomize image names (`tpu-operator`, `gcp-emulator`), which the
    // kustomizations map to a reference the API server refuses until the user sets theirs.
    let plain = |extra: &[&str]| format!("{GENERATED}{}", strip_helm_labels(&helm.template(extra)));
    let images = "image.repository=tpu-operator,gcpEmulator.image.repository=gcp-emulator";
    // Untagged, so that only an image the user sets carries the `:` the kustomizations require.
    let untagged = |yaml: String| {
        let tag = format!(":{}\n", chart_app_version());
        yaml.replace(&format!("image: tpu-operator{tag}"), "image: tpu-operator\n")
            .replace(&format!("image: gcp-emulator{tag}"), "image: gcp-emulator\n")
    };
    let plain = |extra: &[&str]| untagged(plain(extra));
    files.push(("deploy/tpu-operator.yaml".into(), plain(&["--set", images])));
    files.push((
        "deploy/staging/tpu-operator.yaml".into(),
        plain(&[
            "--set",
            images,
            "--set",
            "gcpEmulator.enabled=true,config.clusterId=staging",
        ]),
    ));

    // Monitoring: each optional object on its own.
    for (file, template) in [
        ("prometheusrule.yaml", "templates/prometheusrule.yaml"),
        ("servicemonitor.yaml", "templates/servicemonitor.yaml"),
        ("grafana-dashboard.yaml", "templates/grafana-dashboard.yaml"),
        ("kube-state-metrics.yaml", "templates/kube-state-metrics.yaml"),
    ] {
        files.push((
            PathBuf::from("deploy/monitoring").join(file),
            plain(&[
                "--set",
                "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,\
                 metrics.grafanaDashboard.enabled=true,metrics.kubeStateMetrics.enabled=true",
                "--show-only",
                template,
            ]),
        ));
    }
    files.push((
        "deploy/monitoring/grafana-dashboard.json".into(),
        std::fs::read_to_string(chart_dir().join("files/grafana-dashboard.json")).unwrap(),
    ));

    files.push(("deploy/argocd/argocd-cm.yaml".into(), argocd_cm()));
    files.push(("charts/tpu-operator/README.md".into(), chart_readme()));
    files
}

fn chart_app_version() -> String {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap()).unwrap();
    chart["appVersion"].as_str().unwrap().to_string()
}

/// deploy/crds/kustomization.yaml: every CRD of `tpu_operator_api::crds::all()`, nothing else.
pub fn crds_kustomization() -> String {
    let mut out = String::from(
        "# Generated from crates/api (`tpu-operator crds`) by crates/operator/tests/chart.rs \
         (TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart). Do not edit.\n\
         # Every CRD the operator waits for at startup (copies of the repository's generated crds/).\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n",
    );
    for (name, _) in tpu_operator_api::crds::render_all() {
        out.push_str(&format!("  - {name}\n"));
    }
    out
}

/// Plain manifests are not managed by Helm: drop the labels that say so.
fn strip_helm_labels(yaml: &str) -> String {
    yaml.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with("helm.sh/chart:") && !t.starts_with("app.kubernetes.io/managed-by: Helm")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The argocd-cm patch: deploy/argocd/health.lua once per kind.
fn argocd_cm() -> String {
    let lua = std::fs::read_to_string(repo_root().join("deploy/argocd/health.lua")).unwrap();
    let indented: String = lua
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("    {l}\n")
            }
        })
        .collect();
    let mut out = String::from(
        "# Generated from deploy/argocd/health.lua by crates/operator/tests/chart.rs \
         (TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator --test chart). Do not edit.\n\
         # Merge into the argocd-cm ConfigMap (e.g. `kubectl -n argocd patch configmap argocd-cm \
         --patch-file deploy/argocd/argocd-cm.yaml`,\n\
         # or the Argo CD Helm chart's `configs.cm` values).\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n  labels:\n    \
         app.kubernetes.io/name: argocd-cm\n    app.kubernetes.io/part-of: argocd\ndata:\n",
    );
    for kind in ["TpuSlice", "PreprocessBatch", "TrainingPipeline"] {
        out.push_str(&format!(
            "  resource.customizations.health.tpu-operator.dev_{kind}: |\n{indented}"
        ));
    }
    out
}

const VALUES_START: &str = "<!-- values:start (generated from values.yaml and values.schema.json by crates/operator/tests/chart.rs) -->";
const VALUES_END: &str = "<!-- values:end -->";

/// The chart README with its values table regenerated between the markers.
fn chart_readme() -> String {
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap_or_default();
    let (head, tail) = match (readme.find(VALUES_START), readme.find(VALUES_END)) {
        (Some(s), Some(e)) => (&readme[..s], &readme[e + VALUES_END.len()..]),
        _ => panic!("charts/tpu-operator/README.md must contain the markers {VALUES_START} and {VALUES_END}"),
    };
    format!("{head}{VALUES_START}\n{}{VALUES_END}{tail}", values_table())
}

/// One documented value: its dotted path and its `# --` description.
pub struct Documented {
    pub path: Vec<String>,
    pub description: String,
}

/// Reads the `# -- description` comments of values.yaml (helm-docs convention): each documents the
/// key on the next line, at that key's nesting.
pub fn documented_values() -> Vec<Documented> {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(desc) = trimmed.strip_prefix("# -- ") {
            pending = Some(desc.to_string());
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let mut path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
        path.push(key.to_string());
        if let Some(description) = pending.take() {
            out.push(Documented { path, description });
        }
        stack.push((indent, key.to_string()));
    }
    out
}

pub fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
    for key in path {
        value = value.get(key)?;
    }
    Some(value)
}

pub fn schema_at<'a>(mut schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    for key in path {
        schema = schema.get("properties")?.get(key)?;
    }
    Some(schema)
}

/// The types a schema allows and its allowed string values, from `type` / `enum` and, as schemars
/// writes documented enums and optional values, from `anyOf` / `oneOf` alternatives with `const`.
fn types_and_values(schema: &Value) -> (Vec<String>, Vec<String>) {
    let mut types = Vec::new();
    let mut values = Vec::new();
    match schema.get("type") {
        Some(Value::String(t)) => types.push(t.clone()),
        Some(Value::Array(ts)) => types.extend(ts.iter().filter_map(|t| t.as_str().map(String::from))),
        _ => {}
    }
    for v in schema.get("enum").and_then(Value::as_array).into_iter().flatten() {
        values.extend(v.as_str().map(String::from));
    }
    values.extend(schema.get("const").and_then(Value::as_str).map(String::from));
    for key in ["anyOf", "oneOf"] {
        for alternative in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            let (t, v) = types_and_values(alternative);
            for t in t {
                if !types.contains(&t) {
                    types.push(t);
                }
            }
            values.extend(v);
        }
    }
    (types, values)
}

fn values_table() -> String {
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap()).unwrap();
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
            .unwrap();
    let mut out = String::from("| Key | Type | Default | Description |\n|---|---|---|---|\n");
    for d in documented_values() {
        let default = lookup(&values, &d.path)
            .map(|v| serde_json::to_string(v).unwrap())
            .unwrap_or_default();
        let (types, values) = schema_at(&schema, &d.path)
            .map(types_and_values)
            .unwrap_or_default();
        let ty = types.join(" \\| ");
        let enumeration = if values.is_empty() {
            String::new()
        } else {
            format!(
                " One of {}.",
                values
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        out.push_str(&format!(
            "| `{}` | {ty} | `{}` | {}{enumeration} |\n",
            d.path.join("."),
            default.replace('|', "\\|"),
            d.description.replace('|', "\\|"),
        ));
    }
    out
}
