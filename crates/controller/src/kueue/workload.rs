//! The `kueue.x-k8s.io/v1beta2` Workload, with only the fields this operator writes or reads:
//! unknown fields are ignored when reading, and nothing is ever written back whole (creates,
//! and a merge patch of the status when releasing), so fields Kueue owns are never lost.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::PodTemplateSpec, apimachinery::pkg::apis::meta::v1::Condition};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// What the Workload asks of Kueue.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Workload",
    namespaced,
    status = "WorkloadStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// The LocalQueue, in the Workload's namespace.
    pub queue_name: String,
    /// The WorkloadPriorityClass, when the object names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_ref: Option<PriorityClassRef>,
    /// Always set: Kueue's visibility API fails on a pending Workload without it
    /// (tests/kueue/README.md), and 0 is what no class means.
    #[serde(default)]
    pub priority: i32,
    pub pod_sets: Vec<PodSet>,
    /// Kueue (or an admin) sets it false to deactivate the Workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// Identical pods (here: TPU VM hosts) and what each requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    pub name: String,
    pub count: i32,
    pub template: PodTemplateSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Set while Kueue reserves quota for the Workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub cluster_queue: String,
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    pub name: String,
    /// Pods admitted: fewer than asked only with partial admission, which a TPU slice never
    /// asks for (no `minCount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// ResourceFlavor by resource.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
}

/// Condition types Kueue writes on a Workload (`apis/kueue/v1beta2/workload_types.go`).
pub mod conditions {
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    pub const ADMITTED: &str = "Admitted";
    pub const EVICTED: &str = "Evicted";
    pub const PREEMPTED: &str = "Preempted";
    pub const REQUEUED: &str = "Requeued";
    pub const FINISHED: &str = "Finished";
}
