//! Types shared by more than one kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{ENV_NAME, IMAGE, MAX_ARG_LENGTH, MAX_LIST_ITEMS};

/// Status fields a newer release of the operator wrote that this one does not know, by name, as
/// read.
///
/// Status is one server-side apply of the whole status, owned by the operator's field manager,
/// so a field the writer leaves out is removed. An older release running against status a newer
/// one wrote would erase everything it does not know: during a rollback, or while the leader is
/// handed over between releases. Each status type keeps these fields (`#[serde(flatten)]`) and
/// the status writers send them back unchanged. They are not part of the generated schema; the
/// newer release's CRDs carry them.
pub type NewerFields = std::collections::BTreeMap<String, serde_json::Value>;

/// A status type that keeps the [`NewerFields`] it was read with.
pub trait KeepsNewerFields {
    fn newer_fields(&self) -> &NewerFields;
    fn newer_fields_mut(&mut self) -> &mut NewerFields;
}

/// Implements [`KeepsNewerFields`] for status types with a `newer_fields` field.
macro_rules! keeps_newer_fields {
    ($($status:ty),* $(,)?) => {$(
        impl $crate::common::KeepsNewerFields for $status {
            fn newer_fields(&self) -> &$crate::common::NewerFields {
                &self.newer_fields
            }
            fn newer_fields_mut(&mut self) -> &mut $crate::common::NewerFields {
                &mut self.newer_fields
            }
        }
    )*};
}
pub(crate) use keeps_newer_fields;

/// What happens to the cloud resources when the custom resource is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Cancel running work, wait for it to stop, then delete the cloud resources (the default).
    #[default]
    Delete,
    /// Leave the cloud resources running and only forget them. They keep costing money and keep
    /// their `tpu-operator-*` labels, so `gcloud ... list --filter=labels.managed-by=tpu-operator`
    /// still finds them.
    Orphan,
}

/// Where to look at a cloud object the operator made: its Cloud Console page and its logs.
/// Derived from the object's name alone, so they are there as soon as the object is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Links {
    /// The object's Cloud Console page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<String>,
    /// The Logs Explorer running the query that selects the object's logs (`tpu-operator logs`
    /// reads the same entries from the command line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
    /// Vertex AI with `enableWebAccess`: the interactive shell of each replica, by replica
    /// (`workerpool0-0`), as the job reports them in `webAccessUris`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub web_access: std::collections::BTreeMap<String, String>,
    /// Vertex AI: the TensorBoard instance the job writes to (`training.vertex.tensorboard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<String>,
}

/// A training or workload container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// Container image, e.g. `us-docker.pkg.dev/my-project/trainers/jax-trainer:1.4`.
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE))]
    pub image: String,
    /// Entrypoint override (the image's ENTRYPOINT when empty). `$(RAW_DATA)`, `$(PROCESSED_DATA)`
    /// and `$(MODEL_DIR)` are replaced with the pipeline's artifact URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub command: Vec<String>,
    /// Arguments (the image's CMD when empty). Artifact placeholders as for `command`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub args: Vec<String>,
    /// Environment variables for the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS))]
    pub env: Vec<EnvVar>,
}

/// One environment variable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// Variable name, e.g. `XLA_FLAGS`.
    #[schemars(length(min = 1, max = 128), regex(pattern = ENV_NAME))]
    pub name: String,
    /// Variable value (artifact placeholders such as `$(MODEL_DIR)` are replaced).
    #[serde(default)]
    #[schemars(length(max = MAX_ARG_LENGTH))]
    pub value: String,
}

/// Estimated cloud cost of what a resource ran, from the operator's price table (list prices, USD).
/// An estimate for budgeting and alerts, not a bill.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostEstimate {
    /// Estimated spend so far, in US dollars.
    pub so_far_usd: f64,
    /// Current burn rate in US dollars per hour (0 when nothing billable is running).
    pub per_hour_usd: f64,
    /// Name of the price-table entry used, e.g. `tpu-v6e-spot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_key: Option<String>,
    /// When `soFarUsd` was last brought up to date (TpuSlice: it grows by `perHourUsd` for the
    /// time since then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accrued_through: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}
