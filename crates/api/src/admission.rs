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

mod checks;

use checks::{preprocess_batch_checks, tpu_slice_checks, training_pipeline_checks};

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

/// Every validation, in a stable order.
pub fn validations() -> Vec<Validation> {
    let mut checks = preprocess_batch_checks();
    checks.extend(tpu_slice_checks());
    checks.extend(training_pipeline_checks());
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
        "paramKind": {"apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy"},
        "matchConstraints": {
            "resourceRules": [{
                "apiGroups": ["tpu-operator.dev"],
                "apiVersions": [crate::crds::VERSION, crate::crds::PREVIOUS_VERSION],
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
