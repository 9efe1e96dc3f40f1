//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`), evaluated with `kube-cel` on
//! every create and update, as kube-apiserver's admission plugin does
//! (<https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/>).
//!
//! Modelled: `matchConstraints.resourceRules` (groups, versions, operations, resources, `*`),
//! `matchConditions`, `paramKind` with the binding's `paramRef` (`name` or `selector` by labels,
//! `parameterNotFoundAction`), the binding's `matchResources.namespaceSelector.matchLabels`,
//! `validationActions: [Deny]`, `failurePolicy`, `validations` with `message` /
//! `messageExpression` / `reason`, and the `namespaceObject`, `request` (its `userInfo` always the
//! cluster administrator's: nothing is authenticated), `object`, `oldObject` and `params`
//! variables. Not modelled: `variables`, `auditAnnotations`, `Warn`/`Audit`
//! actions, `excludeResourceRules`, `objectSelector`, `authorizer` (nothing here uses them).
//! The denial's wording and status follow the API server's: "ValidatingAdmissionPolicy '<p>'
//! with binding '<b>' denied request: <message>", HTTP 403 for reason Forbidden, 422 Invalid.

use kube_cel::{AdmissionRequest, GroupVersionKind, GroupVersionResource, VapEvaluator, VapExpression};
use serde_json::Value;

use super::State;
use crate::{errors::ApiError, resources::ResourceType};

const POLICIES: &str = "admissionregistration.k8s.io/validatingadmissionpolicies";
const BINDINGS: &str = "admissionregistration.k8s.io/validatingadmissionpolicybindings";

/// One admission request as the policies see it.
pub(super) struct Request<'a> {
    pub rt: &'a ResourceType,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: &'a Value,
    pub old: Option<&'a Value>,
}

impl Request<'_> {
    fn operation(&self) -> &'static str {
        if self.old.is_some() { "UPDATE" } else { "CREATE" }
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn listed(list: &Value, value: &str) -> bool {
    strings(list).iter().any(|s| *s == "*" || *s == value)
}

fn labels_match(selector: Option<&Value>, labels: &Value) -> bool {
    let Some(wanted) = selector
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
    else {
        return true;
    };
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether the policy's `matchConstraints.resourceRules` cover the request.
fn matches_resource_rules(spec: &Value, req: &Request<'_>) -> bool {
    spec["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| {
            listed(&r["apiGroups"], &req.rt.group)
                && listed(&r["apiVersions"], &req.rt.version)
                && listed(&r["operations"], req.operation())
                && listed(&r["resources"], &req.rt.plural)
        })
}

/// The `request` variable the policy's expressions see.
fn admission_request(req: &Request<'_>) -> AdmissionRequest {
    AdmissionRequest {
        operation: req.operation().into(),
        name: req.name.into(),
        namespace: req.namespace.into(),
        kind: GroupVersionKind {
            group: req.rt.group.clone(),
            version: req.rt.version.clone(),
            kind: req.rt.kind.clone(),
        },
        resource: GroupVersionResource {
            group: req.rt.group.clone(),
            version: req.rt.version.clone(),
            resource: req.rt.plural.clone(),
        },
        // kube-emulator authenticates no one: every request is the cluster administrator's, as
        // kube-apiserver reports a client certificate of group system:masters.
        username: ADMIN_USER.into(),
        groups: ADMIN_GROUPS.iter().map(|g| (*g).to_owned()).collect(),
        ..Default::default()
    }
}

/// Who every request is (`request.userInfo`): kube-emulator has no authentication.
pub const ADMIN_USER: &str = "kubernetes-admin";
const ADMIN_GROUPS: &[&str] = &["system:masters", "system:authenticated"];

/// An evaluator with the request's variables bound (`params` for one parameter object).
fn build_evaluator(
    req: &Request<'_>,
    request: &AdmissionRequest,
    namespace_object: Option<&Value>,
    params: Option<&Value>,
) -> VapEvaluator {
    let mut b = VapEvaluator::builder()
        .object(req.object.clone())
        .request(request.clone());
    if let Some(old) = req.old {
        b = b.old_object(old.clone());
    }
    if let Some(p) = params {
        b = b.params(p.clone());
    }
    if let Some(ns) = namespace_object {
        b = b.namespace_object(ns.clone());
    }
    b.build()
}

/// The policy's `matchConditions` as expressions (their messages are never shown).
fn match_conditions(spec: &Value) -> Vec<VapExpression> {
    spec["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| VapExpression {
            expression: c["expression"].as_str().unwrap_or("true").into(),
            message: None,
            message_expression: None,
        })
        .collect()
}

/// The policy's `validations`, each with its expression (the entry also gives the `reason`).
fn validation_expressions(spec: &Value) -> Vec<(&Value, VapExpression)> {
    spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v,
                VapExpression {
                    expression: v["expression"].as_str().unwrap_or("true").into(),
                    message: v["message"].as_str().map(str::to_owned),
                    message_expression: v["messageExpression"].as_str().map(str::to_owned),
                },
            )
        })
        .collect()
}

/// Which policy and binding deny a request, for the denial's wording.
struct Denial<'a> {
    policy: &'a str,
    binding: &'a str,
}

impl Denial<'_> {
    /// The API server's denial: 422 for reason Invalid, 403 otherwise.
    fn deny(&self, message: String, reason: &str) -> ApiError {
        let message = format!(
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
            self.policy, self.binding
        );
        match reason {
            "Invalid" => ApiError::unprocessable(message),
            _ => ApiError::admission_forbidden(message),
        }
    }
}

/// matchConditions: all must hold for the policy to apply. A condition that fails to evaluate
/// counts per failurePolicy: it denies the request when the policy fails closed.
fn conditions_hold(
    spec: &Value,
    evaluator: &VapEvaluator,
    fail_closed: bool,
    denial: &Denial<'_>,
) -> Result<bool, ApiError> {
    let conditions = match_conditions(spec);
    if conditions.is_empty() {
        return Ok(true);
    }
    for result in evaluator.evaluate(&conditions) {
        if !result.passed {
            let errored = result.message.as_deref().is_some_and(|m| m.contains("error"));
            if errored && fail_closed {
                return Err(denial.deny(
                    format!("matchCondition failed: {}", result.expression),
                    "Forbidden",
                ));
            }
            return Ok(false);
        }
    }
    Ok(true)
}

impl State {
    /// Runs every bound ValidatingAdmissionPolicy that matches the request.
    pub(super) fn admit(&self, req: &Request<'_>) -> Result<(), ApiError> {
        let bindings = self.store.list(BINDINGS, None);
        if bindings.is_empty() {
            return Ok(());
        }
        for binding in bindings {
            let spec = &binding["spec"];
            let Some(policy_name) = spec["policyName"].as_str() else {
                continue;
            };
            if !strings(&spec["validationActions"]).contains(&"Deny") {
                continue;
            }
            let Some(policy) = self.store.get(POLICIES, "", policy_name) else {
                continue;
            };
            self.admit_one(req, &policy, &binding)?;
        }
        Ok(())
    }

    fn admit_one(&self, req: &Request<'_>, policy: &Value, binding: &Value) -> Result<(), ApiError> {
        let spec = &policy["spec"];
        if !matches_resource_rules(spec, req) {
            return Ok(());
        }
        let namespace_object = (!req.namespace.is_empty())
            .then(|| self.store.get("/namespaces", "", req.namespace))
            .flatten()
            .map(|ns| ns.as_ref().clone());
        let ns_labels = namespace_object
            .as_ref()
            .map(|ns| ns["metadata"]["labels"].clone())
            .unwrap_or(Value::Null);
        if !labels_match(
            binding["spec"]["matchResources"].get("namespaceSelector"),
            &ns_labels,
        ) {
            return Ok(());
        }
        let request = admission_request(req);
        let evaluator =
            |params: Option<&Value>| build_evaluator(req, &request, namespace_object.as_ref(), params);
        let denial = Denial {
            policy: policy["metadata"]["name"].as_str().unwrap_or_default(),
            binding: binding["metadata"]["name"].as_str().unwrap_or_default(),
        };
        let fail_closed = spec["failurePolicy"].as_str() != Some("Ignore");
        if !conditions_hold(spec, &evaluator(None), fail_closed, &denial)? {
            return Ok(());
        }
        let Some(params) = self.param_objects(spec, binding, &denial)? else {
            return Ok(());
        };
        let validations = validation_expressions(spec);
        let expressions: Vec<VapExpression> = validations.iter().map(|(_, e)| e.clone()).collect();
        // Compiled once per request, evaluated once per parameter object.
        let compiled = evaluator(None).compile_expressions(&expressions);
        for p in &params {
            let results = evaluator(p.as_ref()).evaluate_compiled(&compiled);
            for ((v, _), result) in validations.iter().zip(results) {
                if result.passed {
                    continue;
                }
                let message = result
                    .message
                    .unwrap_or_else(|| format!("failed expression: {}", result.expression));
                return Err(denial.deny(message, v["reason"].as_str().unwrap_or("Invalid")));
            }
        }
        Ok(())
    }

    /// The parameter objects the policy is evaluated with: one evaluation without params when
    /// it has no `paramKind`. None when the binding finds none and allows that
    /// (`parameterNotFoundAction: Allow`); denied when it finds none and denies.
    fn param_objects(
        &self,
        spec: &Value,
        binding: &Value,
        denial: &Denial<'_>,
    ) -> Result<Option<Vec<Option<Value>>>, ApiError> {
        let Some(kind) = spec.get("paramKind").filter(|k| k.is_object()) else {
            return Ok(Some(vec![None]));
        };
        let found = self.params(kind, &binding["spec"]["paramRef"]);
        if !found.is_empty() {
            return Ok(Some(found.into_iter().map(Some).collect()));
        }
        let allow = binding["spec"]["paramRef"]["parameterNotFoundAction"].as_str() == Some("Allow");
        if allow {
            return Ok(None);
        }
        Err(denial.deny(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            "Forbidden",
        ))
    }

    /// The parameter objects a binding's `paramRef` names (cluster-scoped kinds; by name or by
    /// label selector, `{}` = all).
    fn params(&self, kind: &Value, param_ref: &Value) -> Vec<Value> {
        let api_version = kind["apiVersion"].as_str().unwrap_or_default();
        let kind = kind["kind"].as_str().unwrap_or_default();
        let Some(rt) = self
            .registry
            .all()
            .find(|t| t.api_version() == api_version && t.kind == kind)
            .cloned()
        else {
            return Vec::new();
        };
        let objects = self.store.list(&rt.storage_key, None);
        objects
            .into_iter()
            .filter(|o| match param_ref["name"].as_str() {
                Some(name) => o["metadata"]["name"].as_str() == Some(name),
                None => labels_match(param_ref.get("selector"), &o["metadata"]["labels"]),
            })
            .map(|o| o.as_ref().clone())
            .collect()
    }
}
