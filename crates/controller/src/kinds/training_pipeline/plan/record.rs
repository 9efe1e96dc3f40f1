//! What the pipeline's state machine decides about its progress: the stages and their attempts,
//! the times of the run, its outputs, and what suspend, a budget, Kueue or a re-run left to
//! remember. It starts from what the stored status recorded ([`Record::of`]) and `report` makes
//! a status of it (with the verdict, what `act` did, links, cost and time spent).
//!
//! It has no room for what only `report` builds (phase, conditions, message, observed
//! generation, links, estimated cost, time spent, checkpoint, the unconfirmed create): the plan
//! reads those from the stored status and decides the phase and message through its verdict.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tpu_operator_api::{
    kueue::KueueStatus,
    training_pipeline::{
        BudgetSuspensionStatus, KeptSlice, PipelineOutputs, RerunStatus, StageName, StageState, StageStatus,
        SuspensionStatus, TrainingMode, TrainingPipelineStatus,
    },
};

/// The pipeline's record as the state machine leaves it. Each field is the status field of
/// the same name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// The stage running now (or the last one).
    pub current_stage: Option<StageName>,
    /// Per-stage progress (the cloud objects' links, capacity and interruptions in them are
    /// carried as stored: `report` brings them up to date from what was read).
    pub stages: Vec<StageStatus>,
    /// The Vertex job of the current attempt.
    pub custom_job_name: Option<String>,
    /// A Vertex job delete still in flight (TTL reaping); the plan clears it once it is done.
    pub pending_operation: Option<String>,
    /// Training jobs or slices created so far (every attempt, counted or not).
    pub attempts: i32,
    pub start_time: Option<Time>,
    pub completion_time: Option<Time>,
    pub reaped_time: Option<Time>,
    pub outputs: Option<PipelineOutputs>,
    pub rerun: Option<RerunStatus>,
    pub kept_slice: Option<KeptSlice>,
    pub suspension: Option<SuspensionStatus>,
    pub budget_suspension: Option<BudgetSuspensionStatus>,
    pub kueue: Option<KueueStatus>,
}

impl Record {
    /// What the stored status recorded: the state machine's starting point.
    pub fn of(st: &TrainingPipelineStatus) -> Self {
        Record {
            current_stage: st.current_stage,
            stages: st.stages.clone(),
            custom_job_name: st.custom_job_name.clone(),
            pending_operation: st.pending_operation.clone(),
            attempts: st.attempts,
            start_time: st.start_time.clone(),
            completion_time: st.completion_time.clone(),
            reaped_time: st.reaped_time.clone(),
            outputs: st.outputs.clone(),
            rerun: st.rerun.clone(),
            kept_slice: st.kept_slice.clone(),
            suspension: st.suspension.clone(),
            budget_suspension: st.budget_suspension.clone(),
            kueue: st.kueue.clone(),
        }
    }

    /// Inserts the stage entry if missing (its kind follows the training mode).
    pub fn ensure_stage(&mut self, name: StageName, mode: TrainingMode, initial: StageState) {
        StageStatus::ensure(&mut self.stages, name, mode, initial);
    }

    /// The stage entry (a pending placeholder when it was never created).
    pub fn stage(&self, name: StageName) -> &StageStatus {
        StageStatus::find(&self.stages, name)
    }

    /// The stage entry, created as Pending if missing.
    pub fn stage_mut(&mut self, name: StageName) -> &mut StageStatus {
        StageStatus::find_mut(&mut self.stages, name)
    }
}
