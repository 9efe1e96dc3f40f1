//! What `act` learned, for `report` to write: `act` carries the plan's action out and changes
//! nothing it is given, so what the cloud answered (a job's name, a delete operation, a create
//! paced or refused) and what the progress check found travel here to the one status builder.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, TrainingPipelinePhase, TrainingPipelineStatus},
};
use tpu_operator_gcp::aiplatform_v1::model::CustomJob;

use super::{progress, status::time};

/// What the action left for the status and the wait.
#[derive(Debug, Default)]
pub struct Done {
    /// What the action did that the status records.
    pub action: Did,
    /// The checkpoint and the `ProgressStalled` condition as the progress check left them.
    pub progress: progress::Found,
    /// When the next checkpoint listing is due (while training).
    pub next_check: Option<Duration>,
}

/// What one action did, as far as the status is concerned.
#[derive(Debug, Default)]
pub struct Did {
    pub outcome: Outcome,
    /// The unconfirmed-create time persisted (write-ahead) before a job create was sent.
    pub unconfirmed: Option<Time>,
}

impl Did {
    pub fn just(outcome: Outcome) -> Self {
        Did {
            outcome,
            unconfirmed: None,
        }
    }
}

/// The action's outcome, when the status has something to say of it.
#[derive(Debug, Default)]
pub enum Outcome {
    /// Nothing to record (an owned child created or deleted, a Workload written, a job
    /// cancelled: the next observe reads them).
    #[default]
    Nothing,
    /// The attempt's job, found by its labels (a create whose status write was lost): listed, so
    /// is any older job of the attempt a lost reply left.
    Found { name: String },
    /// The attempt's job, just created (kept for its links and the cloud watch).
    Created { job: Box<CustomJob> },
    /// Not sent: the project's Vertex creates are paced and others are ahead.
    Paced { message: String, at: DateTime<Utc> },
    /// A spec the cloud cannot take: the pipeline fails with `InvalidSpec`.
    Invalid { message: String, at: DateTime<Utc> },
    /// A finished job's record is being deleted (TTL reaping) by this operation.
    Deleting { operation: String },
}

impl Did {
    /// Writes what the action did into `st` (for `report`, and for the progress check's view
    /// of the status being built).
    pub fn record(&self, st: &mut TrainingPipelineStatus) {
        if let Some(at) = &self.unconfirmed {
            st.unconfirmed_create_time = Some(at.clone());
        }
        match &self.outcome {
            Outcome::Nothing => {}
            Outcome::Found { name } => {
                st.unconfirmed_create_time = None;
                job_named(st, name);
            }
            Outcome::Created { job } => job_named(st, &job.name),
            Outcome::Paced { message, at } => {
                st.stage_mut(StageName::Train).message = Some(message.clone());
                let reason = reasons::WAITING_FOR_CREATE_RATE;
                st.set_kstatus(Progress::Reconciling, reason, message, time(*at));
            }
            Outcome::Invalid { message, at } => {
                let now = time(*at);
                st.phase = TrainingPipelinePhase::Failed;
                st.completion_time = Some(now.clone());
                st.message = Some(message.clone());
                st.set_kstatus(Progress::Stalled, reasons::INVALID_SPEC, message, now);
            }
            Outcome::Deleting { operation } => st.pending_operation = Some(operation.clone()),
        }
    }

    /// The job this pass created, if any.
    pub fn created(&self) -> Option<&CustomJob> {
        match &self.outcome {
            Outcome::Created { job } => Some(job),
            _ => None,
        }
    }
}

/// The attempt's job is `name`.
fn job_named(st: &mut TrainingPipelineStatus, name: &str) {
    st.custom_job_name = Some(name.to_string());
    st.stage_mut(StageName::Train).gcp_name = Some(name.to_string());
}
