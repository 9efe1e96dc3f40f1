//! What an object queued through Kueue carries: the labels that put it in a queue (the names
//! every Kueue integration reads), and what its status says of the wait (docs/kueue.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The LocalQueue (in the object's namespace) the object waits in. Kueue's own label: Jobs,
/// JobSets and Pods name their queue the same way.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The WorkloadPriorityClass of the object's Workload (Kueue's own label).
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// Kueue's view of the object: which Workload stands for it, where it waits, whether it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KueueStatus {
    /// The `kueue.x-k8s.io` Workload that stands for this object (same namespace, owned by it,
    /// deleted with it).
    pub workload: String,
    /// The LocalQueue named by the `kueue.x-k8s.io/queue-name` label.
    pub local_queue: String,
    /// The ClusterQueue that admitted the Workload, while it is admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// Position in the LocalQueue while pending, 1 being the next to be admitted (from Kueue's
    /// visibility API; absent where the cluster does not serve it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i32>,
    /// While pending at `position`: when Kueue will likely admit the Workload, estimated from
    /// the position and the hold times seen in the same LocalQueue (docs/kueue.md, "Wait
    /// estimate"). Absent until a hold in that queue has ended since the operator started, and
    /// while none of the queue's Workloads holds quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start_time: Option<Time>,
    /// Kueue admitted the Workload: the cloud work may exist.
    #[serde(default)]
    pub admitted: bool,
    /// How many times Kueue evicted the Workload (a preemption, a deactivation, ...) while it ran.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub evictions: i32,
    /// What this object had in the cloud was deleted because Kueue did not (or no longer) admit
    /// it, and that stop is counted: the next admission creates new cloud resources.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// TrainingPipeline (Vertex training): the attempt an eviction stopped (its custom job
    /// cancelled) until the attempt that replaces it starts; that one resumes from
    /// `CHECKPOINT_DIR` and does not count against `maxRetries`. (TPU VM training is gated at its
    /// slice, whose own `status.kueue` shows its evictions.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_attempt: Option<i32>,
    /// TrainingPipeline: attempts started after an eviction (none of them counted against
    /// `maxRetries`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resumes: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
