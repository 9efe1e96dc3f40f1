//! The `ValidatingAdmissionPolicy` that refuses at `kubectl apply` what a `TpuPolicy` forbids and
//! the object alone decides, generated here so the chart, kube-emulator and the tests share one
//! text (`charts/tpu-operator/files/admission-policy-spec.yaml`).
//!
//! The binding (in the chart) uses every `TpuPolicy` as a parameter (`paramRef.selector: {}`):
//! the API server evaluates the validations once per policy, and each validation first asks
//! whether that policy selects the request's namespace (by name, `prefix*`, or label selector
//! against `namespaceObject`). Every validation passes when the policy leaves the field open or
//! the object does not set it: what depends on defaults (an object without `spec.project`), on
//! the cloud (an adopted node's identity) or on usage (chips held, spend) is the controllers'
//! (docs/policy.md has the table). A `matchCondition` skips updates that leave `spec` alone, so
//! finalizer and label changes (the operator's own, during deletion) are never refused by a
//! policy tightened after the object was created.
//!
//! CEL constraints: only what both kube-apiserver and `kube-cel` (kube-emulator) evaluate:
//! `has`, `exists`/`all`, `in`, `startsWith`/`endsWith`/`contains`, `split`, `int()`, ternaries.
//! No `variables` (kube-cel 0.8 has none), so the namespace test is inlined in each rule.

use serde_json::{Value, json};

use crate::{tpu_slice::CapacityMode, training_pipeline::SchedulingStrategy};

/// One validation of the policy.
#[derive(Clone, Debug)]
pub struct Validation {
    pub expression: String,
    pub message_expression: String,
    /// The TpuPolicy field the rule enforces (for docs and tests).
    pub field: &'static str,
    pub kind: &'static str,
}

/// Whether the parameter policy selects the request's namespace.
fn selects() -> String {
    let labels = "namespaceObject.metadata.labels";
    let has_key = |key: &str| format!("(has({labels}) && {key} in {labels})");
    let in_values = |key: &str| {
        format!(
            "({} && has(e.values) && {labels}[{key}] in e.values)",
            has_key(key)
        )
    };
    let by_name = "(has(params.spec.namespaces) && params.spec.namespaces.exists(n, n == request.namespace \
                   || (n.endsWith('*') && request.namespace.startsWith(n.split('*')[0]))))";
    let match_labels = format!(
        "(!has(params.spec.namespaceSelector.matchLabels) || params.spec.namespaceSelector.matchLabels.all(k, \
         {} && {labels}[k] == params.spec.namespaceSelector.matchLabels[k]))",
        has_key("k")
    );
    let match_expressions = format!(
        "(!has(params.spec.namespaceSelector.matchExpressions) || params.spec.namespaceSelector.matchExpressions.all(e, \
         e.operator == 'In' ? {in_v} : e.operator == 'NotIn' ? !{in_v} : e.operator == 'Exists' ? {has} : !{has}))",
        in_v = in_values("e.key"),
        has = has_key("e.key"),
    );
    format!("({by_name} || (has(params.spec.namespaceSelector) && {match_labels} && {match_expressions}))")
}

/// `list` allows `value`: an exact entry or a `prefix*` entry.
fn listed(list: &str, value: &str) -> String {
    format!("{list}.exists(a, a == {value} || (a.endsWith('*') && {value}.startsWith(a.split('*')[0])))")
}

/// A check of one TpuPolicy list field against one value of one kind.
struct Check {
    kind: &'static str,
    field: &'static str,
    /// When the object sets what the rule reads.
    present: String,
    /// True when allowed (evaluated only when the policy sets `field` and `present` holds).
    allowed: String,
    /// What the object asks for, as a CEL string expression for the message.
    asks: String,
    /// Where in the object (for the message).
    at: &'static str,
}

impl Check {
    fn validation(self) -> Validation {
        let field = self.field;
        // `allowAdoption` and `allowOrphan` are closed by default: absent means false.
        let closed = matches!(field, "allowAdoption" | "allowOrphan");
        let unset = if closed {
            "false".to_string()
        } else {
            format!("!has(params.spec.{field})")
        };
        let allowed = if closed {
            format!("(has(params.spec.{field}) && {})", self.allowed)
        } else {
            self.allowed
        };
        let expression = format!(
            "request.kind.kind != '{kind}' || !{selects} || {unset} || !({present}) || ({allowed})",
            kind = self.kind,
            selects = selects(),
            present = self.present,
        );
        let message_expression = format!(
            "'denied by TpuPolicy ' + params.metadata.name + ', spec.{field}: {kind} {at} ' + {asks} + ' is not allowed (kubectl get tpupolicy ' + params.metadata.name + ' -o yaml shows what is)'",
            kind = self.kind,
            at = self.at,
            asks = self.asks,
        );
        Validation {
            expression,
            message_expression,
            field,
            kind: self.kind,
        }
    }
}

/// A list check of `value` (a string at `path`, read when `has(path)`), by prefix match.
fn list_check(kind: &'static str, field: &'static str, at: &'static str, path: &str) -> Check {
    Check {
        kind,
        field,
        present: format!("has({path})"),
        allowed: listed(&format!("params.spec.{field}"), path),
        asks: path.to_string(),
        at,
    }
}

/// A TPU slice spec at `slice` (`object.spec` or a pipeline's `object.spec.training.tpuVm.slice`).
fn slice_checks(kind: &'static str, slice: &str) -> Vec<Check> {
    let family = format!("{slice}.acceleratorType.split('-')[0]");
    let chips =
        format!("(int({slice}.acceleratorType.split('-')[1]) / ({family} in ['v5litepod', 'v6e'] ? 1 : 2))");
    let same_family = format!(
        "(a.family == {family} || (a.family == 'v5e' && {family} == 'v5litepod') || (a.family == 'v5litepod' && {family} == 'v5e'))"
    );
    let capacity = slice_capacity(slice);
    let account = format!("(has({slice}.serviceAccount) ? {slice}.serviceAccount.email : 'default')");
    let network = format!(
        "(has({slice}.networkConfig) && has({slice}.networkConfig.network) ? {slice}.networkConfig.network : 'default')"
    );
    vec![
        list_check(kind, "allowedProjects", "project", &format!("{slice}.project")),
        list_check(kind, "allowedZones", "zone", &format!("{slice}.zone")),
        Check {
            kind,
            field: "allowedAccelerators",
            present: format!("has({slice}.acceleratorType)"),
            allowed: format!(
                "params.spec.allowedAccelerators.exists(a, {same_family} && (!has(a.maxChips) || {chips} <= a.maxChips))"
            ),
            asks: format!("{slice}.acceleratorType"),
            at: "accelerator type",
        },
        Check {
            kind,
            field: "allowedCapacity",
            present: "true".into(),
            allowed: format!("{capacity} in params.spec.allowedCapacity"),
            asks: capacity.clone(),
            at: "capacity",
        },
        Check {
            kind,
            field: "allowedServiceAccounts",
            present: "true".into(),
            allowed: accounts(&account),
            asks: account.clone(),
            at: "service account",
        },
        network_check(kind, "allowedNetworks", "network", &network, "true"),
        network_check(
            kind,
            "allowedSubnetworks",
            "subnetwork",
            &format!("{slice}.networkConfig.subnetwork"),
            &format!("has({slice}.networkConfig) && has({slice}.networkConfig.subnetwork)"),
        ),
        Check {
            kind,
            field: "allowAdoption",
            present: format!("has({slice}.adoptNodeId)"),
            allowed: "params.spec.allowAdoption".into(),
            asks: format!("'adopting node ' + {slice}.adoptNodeId"),
            at: "spec.adoptNodeId",
        },
        orphan_check(kind, slice),
    ]
}

/// `deletionPolicy: Orphan` on the spec at `spec` (closed by default, `allowOrphan`).
fn orphan_check(kind: &'static str, spec: &str) -> Check {
    Check {
        kind,
        field: "allowOrphan",
        present: format!("has({spec}.deletionPolicy) && {spec}.deletionPolicy == 'Orphan'"),
        allowed: "params.spec.allowOrphan".into(),
        asks: "'Orphan (its cloud resources would keep running after deletion)'".into(),
        at: "deletionPolicy",
    }
}

/// The capacity kind of the slice at `slice`, as a CEL string: generated from
/// [`CapacityMode::BY_FIELD`] and [`CapacityMode::kind`], the definition the controller uses.
fn slice_capacity(slice: &str) -> String {
    let mut cel = format!(
        "(!has({slice}.capacity) ? '{}' : ",
        CapacityMode::OnDemand.kind().as_str()
    );
    // `onDemand: {}` is what no member means too: the fallback covers it.
    for (field, mode) in CapacityMode::BY_FIELD
        .into_iter()
        .filter(|(_, m)| *m != CapacityMode::OnDemand)
    {
        cel.push_str(&format!(
            "has({slice}.capacity.{field}) ? '{}' : ",
            mode.kind().as_str()
        ));
    }
    cel.push_str(&format!("'{}')", CapacityMode::OnDemand.kind().as_str()));
    cel
}

/// The capacity kind of the Vertex job at `vertex`, as a CEL string: generated from
/// [`SchedulingStrategy::kind`], the definition the controller uses.
fn vertex_capacity(vertex: &str) -> String {
    let mut cel = String::from("(");
    for (name, strategy) in SchedulingStrategy::ALL {
        cel.push_str(&format!(
            "has({vertex}.scheduling) && {vertex}.scheduling.strategy == '{name}' ? '{}' : ",
            strategy.kind().as_str()
        ));
    }
    cel.push_str(&format!("'{}')", SchedulingStrategy::default().kind().as_str()));
    cel
}

/// Exact e-mails, `*@domain` suffixes, `default` for none.
fn accounts(account: &str) -> String {
    format!(
        "params.spec.allowedServiceAccounts.exists(a, a == {account} || (a.startsWith('*') && {account} != 'default' && {account}.endsWith(a.split('*')[1])))"
    )
}

/// Networks: admission decides only plain names against plain-name entries; a path on either
/// side (`projects/p/global/networks/n`, relative to the object's project or not) is the
/// controller's, which normalises both.
fn network_check(
    kind: &'static str,
    field: &'static str,
    at: &'static str,
    value: &str,
    present: &str,
) -> Check {
    Check {
        kind,
        field,
        present: present.to_string(),
        allowed: format!(
            "{value}.contains('/') || params.spec.{field}.exists(a, a.contains('/')) || {}",
            listed(&format!("params.spec.{field}"), value)
        ),
        asks: value.to_string(),
        at,
    }
}

/// Dataproc execution settings at `batch` (a PreprocessBatch's `object.spec`, a pipeline's `object.spec.preprocess`).
fn batch_checks(kind: &'static str, batch: &str) -> Vec<Check> {
    let exec = format!("{batch}.execution");
    let account = format!("(has({exec}) && has({exec}.serviceAccount) ? {exec}.serviceAccount : 'default')");
    vec![
        Check {
            kind,
            field: "allowedServiceAccounts",
            present: format!("has({batch})"),
            allowed: accounts(&account),
            asks: account.clone(),
            at: "Dataproc service account",
        },
        network_check(
            kind,
            "allowedNetworks",
            "Dataproc network",
            &format!("{exec}.networkUri"),
            &format!("has({batch}) && has({exec}) && has({exec}.networkUri) && !has({exec}.subnetworkUri)"),
        ),
        network_check(
            kind,
            "allowedSubnetworks",
            "Dataproc subnetwork",
            &format!("{exec}.subnetworkUri"),
            &format!("has({batch}) && has({exec}) && has({exec}.subnetworkUri)"),
        ),
    ]
}

/// Every validation, in a stable order.
pub fn validations() -> Vec<Validation> {
    let mut checks = vec![
        list_check(
            "PreprocessBatch",
            "allowedProjects",
            "project",
            "object.spec.project",
        ),
        list_check(
            "PreprocessBatch",
            "allowedRegions",
            "region",
            "object.spec.region",
        ),
    ];
    checks.extend(batch_checks("PreprocessBatch", "object.spec"));
    checks.push(orphan_check("PreprocessBatch", "object.spec"));
    checks.extend(slice_checks("TpuSlice", "object.spec"));
    let pipeline = "TrainingPipeline";
    checks.push(list_check(
        pipeline,
        "allowedProjects",
        "project",
        "object.spec.project",
    ));
    checks.push(list_check(
        pipeline,
        "allowedRegions",
        "region",
        "object.spec.region",
    ));
    checks.extend(batch_checks(pipeline, "object.spec.preprocess"));
    checks.push(orphan_check(pipeline, "object.spec"));
    let vertex = "object.spec.training.vertex";
    let strategy = vertex_capacity(vertex);
    let vertex_account = format!("(has({vertex}.serviceAccount) ? {vertex}.serviceAccount : 'default')");
    checks.push(Check {
        kind: pipeline,
        field: "allowedCapacity",
        present: format!("has({vertex})"),
        allowed: format!("{strategy} in params.spec.allowedCapacity"),
        asks: strategy.clone(),
        at: "Vertex capacity",
    });
    checks.push(Check {
        kind: pipeline,
        field: "allowedServiceAccounts",
        present: format!("has({vertex})"),
        allowed: accounts(&vertex_account),
        asks: vertex_account.clone(),
        at: "Vertex service account",
    });
    checks.push(network_check(
        pipeline,
        "allowedNetworks",
        "Vertex network",
        &format!("{vertex}.network"),
        &format!("has({vertex}) && has({vertex}.network)"),
    ));
    let slice = "object.spec.training.tpuVm.slice";
    checks.extend(slice_checks(pipeline, slice).into_iter().map(|mut c| {
        c.present = format!("has(object.spec.training.tpuVm) && ({})", c.present);
        c
    }));
    checks.into_iter().map(Check::validation).collect()
}

/// Objects whose spec did not change are not judged again (finalizers, labels, deletion).
pub const MATCH_CONDITION: &str = "request.operation == 'CREATE' || object.spec != oldObject.spec";

/// The `spec` of the ValidatingAdmissionPolicy.
pub fn policy_spec() -> Value {
    let validations: Vec<Value> = validations()
        .into_iter()
        .map(|v| {
            json!({
                "expression": v.expression,
                "messageExpression": v.message_expression,
                "message": format!("denied by a TpuPolicy, spec.{} ({})", v.field, v.kind),
                "reason": "Forbidden",
            })
        })
        .collect();
    json!({
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "tpu-operator.dev/v1alpha1", "kind": "TpuPolicy"},
        "matchConstraints": {
            "resourceRules": [{
                "apiGroups": ["tpu-operator.dev"],
                "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["tpuslices", "preprocessbatches", "trainingpipelines"],
            }],
        },
        "matchConditions": [{"name": "spec-set-or-changed", "expression": MATCH_CONDITION}],
        "validations": validations,
    })
}

/// The file the chart includes under the policy's `spec:`.
pub fn policy_spec_yaml() -> String {
    format!(
        "# Generated from crates/api/src/admission.rs \
         (`TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator-api admission` rewrites it). Do not edit.\n{}",
        serde_yaml::to_string(&policy_spec()).expect("a JSON value serializes")
    )
}

/// The binding's `spec` for a policy named `policy` (the chart writes its own, same shape).
pub fn binding_spec(policy: &str) -> Value {
    json!({
        "policyName": policy,
        "validationActions": ["Deny"],
        "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flex-start is `queued` at admission as in the controller (it was `onDemand` here).
    #[test]
    fn capacity_kinds_come_from_the_api_definition() {
        let cel = slice_capacity("s");
        assert!(cel.contains("has(s.capacity.flexStart) ? 'queued'"), "{cel}");
        for (field, mode) in CapacityMode::BY_FIELD
            .into_iter()
            .filter(|(_, m)| *m != CapacityMode::OnDemand)
        {
            let want = format!("has(s.capacity.{field}) ? '{}'", mode.kind().as_str());
            assert!(cel.contains(&want), "{cel}");
        }
        let cel = vertex_capacity("v");
        assert!(
            cel.contains("v.scheduling.strategy == 'FlexStart' ? 'queued'"),
            "{cel}"
        );
        assert!(cel.ends_with("'onDemand')"), "{cel}");
        // The order the controller reads `spec.capacity` in is the order CEL tests it.
        let spec = |capacity: Value| -> crate::tpu_slice::TpuSliceSpec {
            serde_json::from_value(json!({"zone": "us-east5-b", "capacity": capacity})).unwrap()
        };
        for (field, mode) in CapacityMode::BY_FIELD {
            let body = if field == "flexStart" {
                json!({"runDuration": "1h"})
            } else if field == "reserved" {
                json!({"reservationName": "r"})
            } else {
                json!({})
            };
            assert_eq!(spec(json!({field: body})).capacity_mode(), mode, "{field}");
        }
    }

    #[test]
    fn the_chart_file_is_generated_from_this_module() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/tpu-operator/files/admission-policy-spec.yaml");
        let want = policy_spec_yaml();
        if std::env::var_os("TPU_OPERATOR_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} differs from crates/api/src/admission.rs; regenerate it with \
             `TPU_OPERATOR_BLESS=1 cargo test -p tpu-operator-api admission`",
            path.display()
        );
    }
}
