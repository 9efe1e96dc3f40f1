//! What the operator writes into a `TpuPolicy`: the live usage of the namespaces it selects and
//! the record of their period budgets.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::BudgetUsage;

/// Live usage of the selected namespaces, written by the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TpuPolicyStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the operator enforces this policy (reason `Enforced`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// How many namespaces the policy selects now.
    #[serde(default)]
    pub selected_namespaces: u32,
    /// TPU chips held across the selected namespaces.
    #[serde(default)]
    pub chips: u32,
    /// Estimated US dollars per hour of everything running in the selected namespaces.
    #[serde(default)]
    pub spend_per_hour_usd: f64,
    /// Objects in the selected namespaces currently refused by a policy (`PolicyDenied`).
    #[serde(default)]
    pub refused: u32,
    /// Per selected namespace (at most 100, the busiest first; the totals count all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceUsage>,
    /// Each selected namespace's spend in each budget's current period (`spec.budgets`). Every
    /// namespace is kept: this is the record spend is metered from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetUsage>,
    /// Fields a newer release wrote that this one does not know ([`crate::common::NewerFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub newer_fields: crate::common::NewerFields,
}

/// What one namespace holds now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceUsage {
    /// The namespace's name.
    pub name: String,
    /// TPU chips held (slices running or being created, Vertex TPU jobs running).
    pub chips: u32,
    /// Estimated US dollars per hour of what runs.
    pub spend_per_hour_usd: f64,
    /// Objects currently refused by a policy.
    pub refused: u32,
}

/// `usd` rounded to cents, never `-0.0`: an empty `f64` sum is `-0.0` (Rust's float `Sum` starts
/// there), which serializes as `-0.0` and `kubectl get tpupolicies` prints as `-0`.
pub fn cents(usd: f64) -> f64 {
    // Adding `+0.0` turns `-0.0` into `+0.0` and leaves every other value as it is.
    (usd * 100.0).round() / 100.0 + 0.0
}

/// `status.conditions` bounded as on the other kinds. It stays an atomic list: making it a
/// list-map would change how server-side apply merges it, which versions sharing one schema
/// cannot do.
fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<Condition>>::json_schema(generator);
    schema.insert("maxItems".into(), serde_json::json!(16));
    schema
}
