//! CEL validation rules (`x-kubernetes-validations`), one table per kind.
//!
//! The rules live here rather than as scattered schemars attributes so each kind's admission
//! policy reads as one list. [`crate::crds`] places them into the generated schema at the listed
//! paths. Every rule names the offending field (`fieldPath`) and says how to fix it.
//!
//! Constraints honoured (see `tests` and the fixture suite):
//! - only CEL features that both a real kube-apiserver and `kube-cel` 0.8 (used by kube-emulator)
//!   support: `has`, `in`, `matches`, `startsWith`/`endsWith`, `split`, `int()`, `all`/`exists`
//!   on bounded maps, ternaries;
//! - every string / list / map a rule reads carries a maxLength / maxItems / maxProperties, so the
//!   API server's cost estimator accepts the CRD;
//! - transition rules (`oldSelf`) sit on non-list nodes, so they see the old value on updates.

use serde_json::{Map, Value, json};

mod batch;
mod pipeline;
mod slice;

pub use batch::preprocess_batch_rules;
pub use pipeline::training_pipeline_rules;
pub use slice::tpu_slice_rules;

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The CEL expression; must evaluate to true for valid objects.
    pub rule: String,
    /// Static message (used when there is no `message_expression`).
    pub message: String,
    /// CEL expression producing the message (overrides `message` when it evaluates).
    pub message_expression: Option<String>,
    /// Path of the offending field relative to the node the rule sits on (e.g. `.zone`).
    pub field_path: Option<String>,
    /// `FieldValueForbidden` for immutability, else the API server default (FieldValueInvalid).
    pub reason: Option<&'static str>,
}

impl Rule {
    fn new(rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            rule: rule.into(),
            message: message.into(),
            message_expression: None,
            field_path: None,
            reason: None,
        }
    }

    fn at(mut self, field_path: &str) -> Self {
        self.field_path = Some(field_path.to_string());
        self
    }

    fn message_expression(mut self, expr: impl Into<String>) -> Self {
        self.message_expression = Some(expr.into());
        self
    }

    fn forbidden(mut self) -> Self {
        self.reason = Some("FieldValueForbidden");
        self
    }

    /// The JSON form that goes into the schema.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("rule".into(), json!(self.rule));
        m.insert("message".into(), json!(self.message));
        if let Some(e) = &self.message_expression {
            m.insert("messageExpression".into(), json!(e));
        }
        if let Some(p) = &self.field_path {
            m.insert("fieldPath".into(), json!(p));
        }
        if let Some(r) = self.reason {
            m.insert("reason".into(), json!(r));
        }
        Value::Object(m)
    }
}

/// A rule and the schema node it belongs to: a dotted path from the resource root (`spec.capacity`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedRule {
    /// Dotted property path from the root of the resource schema.
    pub path: String,
    /// The rule.
    pub rule: Rule,
}

fn place(path: &str, rules: Vec<Rule>) -> Vec<PlacedRule> {
    rules
        .into_iter()
        .map(|rule| PlacedRule {
            path: path.to_string(),
            rule,
        })
        .collect()
}

fn join(prefix: &str, rel: &str) -> String {
    if rel.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{rel}")
    }
}

fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `field` may not change after creation, including being added or removed.
fn immutable_optional(kind: &str, field: &str) -> Rule {
    Rule::new(
        format!("has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"),
        format!("{field} is immutable after creation: delete and recreate the {kind} to change it"),
    )
    .at(&format!(".{field}"))
    .forbidden()
}

/// `field` (required) may not change after creation; rule sits on the field itself.
fn immutable_here(kind: &str, field: &str) -> Rule {
    Rule::new(
        "self == oldSelf",
        format!("{field} is immutable after creation: delete and recreate the {kind} to change it"),
    )
    .forbidden()
}

/// A policy that selects nothing is a mistake, not a harmless no-op.
pub fn tpu_policy_rules() -> Vec<PlacedRule> {
    place(
        "spec",
        vec![Rule::new(
            "has(self.namespaces) || has(self.namespaceSelector)",
            "select namespaces: set spec.namespaces (names, `team-*` prefixes, `*`) or spec.namespaceSelector ({} selects every namespace)",
        )],
    )
}

/// The rules of a kind by its name.
pub fn rules_for_kind(kind: &str) -> Vec<PlacedRule> {
    match kind {
        "TpuSlice" => tpu_slice_rules(),
        "PreprocessBatch" => preprocess_batch_rules(),
        "TrainingPipeline" => training_pipeline_rules(),
        "TpuPolicy" => tpu_policy_rules(),
        _ => Vec::new(),
    }
}
