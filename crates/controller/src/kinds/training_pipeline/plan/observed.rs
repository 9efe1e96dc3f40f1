//! What the plan reads: the observed children, Vertex job and TPU VM completion marker.

use tpu_operator_api::common::CostEstimate;
use tpu_operator_gcp::aiplatform_v1::model::JobState;

/// What the observe step saw of an owned child (`PreprocessBatch` or `TpuSlice`).
#[derive(Clone, Debug, PartialEq)]
pub enum Child {
    Absent,
    /// An object of that name exists without this pipeline as its controller.
    NotOwned,
    /// Being deleted (finalizers cleaning the cloud).
    Deleting,
    /// Working on it (kstatus Reconciling, or not reconciled yet).
    Progressing {
        reason: String,
        message: String,
    },
    Ready {
        message: String,
    },
    Stalled {
        reason: String,
        message: String,
    },
}

impl Child {
    pub(super) fn holds_cloud_resources(&self) -> bool {
        matches!(
            self,
            Child::Progressing { .. } | Child::Ready { .. } | Child::Stalled { .. }
        )
    }
}

/// A Vertex custom job of this pipeline.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub name: String,
    /// The job's `tpu-operator-attempt` label.
    pub attempt: i32,
    pub state: JobState,
    /// Vertex's error message, if any.
    pub message: String,
    /// The workload's exit code, when the error message names one (`spec.retryPolicy`).
    pub exit_code: Option<i32>,
    /// Whether `<modelDir>model/` exists; only looked up once the job succeeded.
    pub model_exists: Option<bool>,
    /// A Spot job that ended FAILED because its Spot VMs were reclaimed (see
    /// `observe::spot_preempted`): not the workload's fault, so not a counted attempt.
    pub preempted: bool,
}

/// Whether a job in `state` has ended: it bills no more. A state newer than this client has not
/// (it may bill).
pub fn job_ended(state: &JobState) -> bool {
    matches!(
        state,
        JobState::Succeeded
            | JobState::PartiallySucceeded
            | JobState::Failed
            | JobState::Cancelled
            | JobState::Expired
    )
}

/// Whether cancelling a job in `state` stops what it bills: it has neither ended nor is it
/// cancelling already (cancelling a state newer than this client is harmless). Suspend,
/// deletion and the duplicate jobs of an attempt cancel by this one rule.
pub fn cancel_stops_billing(state: &JobState) -> bool {
    !job_ended(state) && *state != JobState::Cancelling
}

/// TPU VM mode: the completion marker the training container wrote under `modelDir` during the
/// current attempt (older markers are ignored).
#[derive(Clone, Debug, PartialEq)]
pub enum Marker {
    None,
    Succeeded,
    Failed { detail: String, exit_code: Option<i32> },
}

#[derive(Clone, Debug, PartialEq)]
pub enum TrainingObserved {
    Vertex { job: Option<JobView> },
    TpuVm { slice: Child, marker: Marker },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub preprocess: Child,
    pub training: TrainingObserved,
    /// Reaping only: the Vertex jobs still labelled with this pipeline's UID.
    pub held_jobs: Vec<JobView>,
    /// Other jobs of the current attempt that still run: a create whose reply was lost made them
    /// (see `duplicates`). Cancelled, the current job being the attempt's oldest.
    pub duplicate_jobs: Vec<JobView>,
    /// Reaping only: whether the delete operation in `status.pendingOperation` is done.
    pub pending_operation_done: Option<bool>,
    /// Cost estimates the children publish (the Vertex job has none: no price table for it yet).
    pub costs: Vec<CostEstimate>,
}
