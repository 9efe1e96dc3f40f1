//! The pipeline's decisions: from (spec, observed children and cloud state, current status, now)
//! to at most one action, the verdict (phase, kstatus, requeue), the pipeline's [`Record`] as it
//! moves on and the events to publish. `report` makes the status of them: the plan builds none.
//!
//! Stages run in order: Preprocess (optional, an owned `PreprocessBatch`) → Train (a Vertex AI
//! custom job, or an owned `TpuSlice` running the training container) → Done.
//!
//! - Retries: a failed training attempt (Vertex job FAILED, TPU VM workload `_FAILED`, slice
//!   Stalled) starts a new attempt while `train.attempts <= maxRetries`. Preemptions (handled by the
//!   TpuSlice, which recreates itself) and capacity waits (a Vertex FlexStart job EXPIRED) start
//!   no attempt or an uncounted one. `status.attempts` numbers every training job / slice created
//!   (it is the job's `tpu-operator-attempt` label); the Train stage's `attempts` counts those that
//!   count against `maxRetries`.
//! - Suspend: nothing new is created (no batch, job or slice), what bills is stopped (the job
//!   cancelled, the slice deleted, a running batch deleted; checkpoints kept) and the phase is
//!   `Suspended`. A pass that would create something records nothing of it (no attempt counted,
//!   no start time): a suspended pipeline's status is a function of what it observes, so it is
//!   written once, not on every pass. Resuming replaces the stopped attempt with one that does
//!   not count against `maxRetries` (`status.suspension`).
//! - Kueue (the pipeline's `kueue.x-k8s.io/queue-name` label, integration on): no job or slice
//!   before the Workload is admitted; an eviction stops what bills as suspend does, then releases
//!   the quota; the attempt after re-admission spends no retry (`kueue_gate`).
//! - A budget's `SuspendAtCheckpoint` (the namespace's `TpuPolicy`): nothing new is created, and
//!   the running attempt is stopped as suspend stops it once a checkpoint written after the
//!   action is listed; at the period's end training resumes with an attempt that spends no retry
//!   (`budget_hold`).
//! - Re-runs: raising `maxRetries` on a pipeline Failed for `RetriesExhausted` starts a new
//!   counted attempt (from `CHECKPOINT_DIR`); a `tpu-operator.dev/rerun` annotation value other
//!   than `status.rerun.value` starts one new run of a finished pipeline, with a fresh
//!   `maxRetries` budget, keeping a preprocessing stage that succeeded. Neither happens while
//!   suspended, nor before a TPU VM slice of the last run is released (see `lifecycle`).
//! - `ttlSecondsAfterFinished`: once that long after completion, the cloud resources the pipeline
//!   still holds are reaped (Vertex job records; the TPU VM slice is already released when training
//!   ends) and `reapedTime` is set; the pipeline object and its status stay.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{
        PipelineOutputs, RerunStatus, StageName, StageState, TrainingMode, TrainingPipelinePhase as Phase,
        TrainingPipelineSpec, TrainingPipelineStatus,
    },
};

use super::status::{self, time};
use crate::{
    governance::tenancy::rules::Suspending,
    kueue::queued::{Queued, Write},
    reconcile::plan::{Kstatus, Verdict},
};

/// Reason of a pipeline stopped by a failed preprocessing stage.
pub const PREPROCESS_FAILED: &str = "PreprocessFailed";
/// Event reason of a duplicate Vertex job of one attempt being cancelled.
pub const DUPLICATE_JOB_CANCELLED: &str = "DuplicateJobCancelled";
/// Reason of a pipeline whose owned child already exists but belongs to someone else.
pub const CHILD_NOT_OWNED: &str = "ChildNotOwned";

/// The one action of this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Nothing,
    /// Create the owned `PreprocessBatch` `<name>-preprocess`.
    CreatePreprocess,
    /// Delete the owned `PreprocessBatch` of an earlier run (a re-run after it failed).
    DeletePreprocess,
    /// Find (by UID + attempt labels) or create the Vertex job of this attempt.
    CreateJob {
        attempt: i32,
    },
    /// Create the owned `TpuSlice` `<name>-train` for this attempt.
    CreateSlice {
        attempt: i32,
    },
    /// Delete the owned `TpuSlice` (release after an attempt, retry, or finish).
    DeleteSlice,
    /// Cancel the current Vertex job (suspend stops what bills).
    CancelJob {
        name: String,
    },
    /// Delete a finished Vertex job record (TTL reaping).
    DeleteJob {
        name: String,
    },
    /// Create, release or delete the pipeline's Kueue Workload (`kueue_gate`).
    Workload(Write),
    /// Deletion only: delete these finished Vertex jobs, then let the finalizer go (`cleanup`).
    Release {
        delete: Vec<String>,
    },
}

impl Action {
    /// Whether the action creates something billable (the tenancy policy is checked first).
    pub fn creates(&self) -> bool {
        matches!(
            self,
            Action::CreatePreprocess | Action::CreateJob { .. } | Action::CreateSlice { .. }
        )
    }
}

pub use crate::runtime::requeue::Requeue;

pub use crate::reconcile::report::Transition;

/// The pass's plan: the action, the verdict (phase, kstatus, requeue) and [`Details`].
pub type Plan = crate::reconcile::plan::Plan<Action, Phase, Details>;

/// What the pipeline's plan decides besides the action and the verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Details {
    /// The time the plan was made at: the pass's one "now" (`report` stamps the verdict's
    /// conditions with it, brings the cost and `timeSpent` up to it, so the parts meet the
    /// times the plan wrote, e.g. `startTime`).
    pub now: DateTime<Utc>,
    /// The pipeline's record as the state machine leaves it: stages, attempts, times, outputs,
    /// suspension, re-run ([`Record`]). Not a status: `report` makes one of it, the stored
    /// status and the verdict.
    pub record: Record,
    /// Vertex jobs to cancel besides the action: duplicates of the current attempt.
    pub cancel_jobs: Vec<String>,
    /// The Events the plan decided (a phase change, a duplicate cancelled): `act` publishes them.
    pub events: Vec<Transition>,
}

/// One branch's outcome. `kstatus: None` leaves the conditions as they are (finished pipelines).
struct Step {
    phase: Phase,
    kstatus: Option<(Progress, &'static str, String)>,
    action: Action,
    requeue: Requeue,
}

impl Step {
    fn working(
        phase: Phase,
        reason: &'static str,
        message: String,
        action: Action,
        requeue: Requeue,
    ) -> Self {
        Step {
            phase,
            kstatus: Some((Progress::Reconciling, reason, message)),
            action,
            requeue,
        }
    }
}

pub struct Input<'a> {
    pub spec: &'a TrainingPipelineSpec,
    /// The stored status: where the record starts, and what the plan reads of what only
    /// `report` writes (the phase and conditions it decides from, the checkpoint listed).
    pub status: &'a TrainingPipelineStatus,
    pub observed: &'a Observed,
    pub now: DateTime<Utc>,
    /// `<name>-preprocess` and `<name>-train`, for messages.
    pub preprocess_child: &'a str,
    pub train_child: &'a str,
    /// The pipeline's `tpu-operator.dev/rerun` annotation (empty counts as absent).
    pub rerun: Option<&'a str>,
    /// Its Kueue Workload as read, when Kueue gates the training stage.
    pub queue: Option<&'a Queued>,
    /// A `SuspendAtCheckpoint` budget action in force for its namespace.
    pub budget: Option<&'a Suspending>,
}

pub fn plan(input: &Input) -> Plan {
    let mut p = Planner {
        input,
        record: Record::of(input.status),
        events: Vec::new(),
    };
    let step = match input.spec.training.mode() {
        Err(message) => p.finish_failed(reasons::INVALID_SPEC, message.into(), Action::Nothing),
        Ok(mode) => {
            p.init(mode);
            if is_finished(input.status.phase) {
                p.finished(mode)
            } else {
                p.run(mode)
            }
        }
    };
    let step = p.apply_suspend(step);
    let step = p.apply_budget(step);
    let step = p.apply_kueue(step);
    p.finalize(step)
}

pub fn is_finished(phase: Phase) -> bool {
    matches!(phase, Phase::Succeeded | Phase::Failed)
}

/// `dir` + `leaf`, with exactly one `/` between them.
pub fn join_uri(dir: &str, leaf: &str) -> String {
    format!("{}/{leaf}", dir.trim_end_matches('/'))
}

struct Planner<'a> {
    input: &'a Input<'a>,
    /// The record being decided (the stored status is `input.status`).
    record: Record,
    events: Vec<Transition>,
}

impl Planner<'_> {
    fn spec(&self) -> &TrainingPipelineSpec {
        self.input.spec
    }

    /// The stored status, for what the plan decides from but does not record.
    fn old(&self) -> &TrainingPipelineStatus {
        self.input.status
    }

    fn init(&mut self, mode: TrainingMode) {
        let now = self.input.now;
        self.record.start_time.get_or_insert_with(|| time(now));
        let pre = if self.spec().preprocess.is_some() {
            StageState::Pending
        } else {
            StageState::Skipped
        };
        self.record.ensure_stage(StageName::Preprocess, mode, pre);
        self.record
            .ensure_stage(StageName::Train, mode, StageState::Pending);
        // The annotation a pipeline is created with names its first run, not a second one.
        if self.input.status.start_time.is_none()
            && self.record.rerun.is_none()
            && let Some(value) = self.input.rerun.filter(|v| !v.is_empty())
        {
            self.record.rerun = Some(RerunStatus {
                value: value.to_string(),
                start_time: None,
                earlier_attempts: 0,
            });
        }
    }

    fn event(&mut self, warning: bool, reason: &str, note: String) {
        self.events.push(Transition {
            warning,
            reason: reason.to_string(),
            note,
        });
    }

    fn run(&mut self, mode: TrainingMode) -> Step {
        if self.spec().preprocess.is_some()
            && self.record.stage(StageName::Preprocess).state != StageState::Succeeded
            && let Some(step) = self.preprocess()
        {
            return step;
        }
        self.record.current_stage = Some(StageName::Train);
        match (mode, &self.input.observed.training) {
            (TrainingMode::Vertex, TrainingObserved::Vertex { job }) => self.vertex(job.as_ref()),
            (TrainingMode::TpuVm, TrainingObserved::TpuVm { slice, marker }) => self.tpu_vm(slice, marker),
            _ => Step::working(
                Phase::Provisioning,
                reasons::PENDING,
                "training mode changed; observing again".into(),
                Action::Nothing,
                Requeue::Active,
            ),
        }
    }

    fn finish_succeeded(&mut self, model_uri: String) -> Step {
        let now = time(self.input.now);
        let stage = self.record.stage_mut(StageName::Train);
        stage.state = StageState::Succeeded;
        stage.end_time = Some(now.clone());
        stage.message = Some(format!("model written to {model_uri}"));
        self.record.completion_time = Some(now);
        let processed = self.spec().artifacts.processed_data.clone();
        let outputs = self.record.outputs.get_or_insert_with(PipelineOutputs::default);
        outputs.model_uri = Some(model_uri.clone());
        if self.input.spec.preprocess.is_some() {
            outputs.processed_data = processed;
        }
        Step {
            phase: Phase::Succeeded,
            kstatus: Some((
                Progress::Ready,
                reasons::SUCCEEDED,
                format!("model written to {model_uri}"),
            )),
            action: Action::Nothing,
            requeue: Requeue::Active,
        }
    }

    fn finish_failed(&mut self, reason: &'static str, message: String, action: Action) -> Step {
        let (message, action) = match action {
            Action::DeleteSlice => self.keep_failed_slice(message),
            action => (message, action),
        };
        let now = time(self.input.now);
        // Kept once set: a pass that finds the pipeline failed again writes nothing new.
        self.record.completion_time.get_or_insert_with(|| now.clone());
        if let Some(stage) = self
            .record
            .stages
            .iter_mut()
            .find(|s| matches!(s.state, StageState::Running | StageState::Queued))
        {
            stage.state = StageState::Failed;
            stage.end_time = Some(now);
        }
        Step {
            phase: Phase::Failed,
            kstatus: Some((Progress::Stalled, reason, message)),
            action,
            requeue: Requeue::Active,
        }
    }

    fn finalize(mut self, step: Step) -> Plan {
        let old_phase = self.old().phase;
        let kstatus = step.kstatus.map(|(progress, reason, message)| Kstatus {
            progress,
            reason,
            message,
        });
        if step.phase != old_phase {
            let reason = format!("{:?}", step.phase);
            // The message the status will show: the verdict's, else the one it has.
            let message = kstatus
                .as_ref()
                .map(|k| &k.message)
                .or(self.old().message.as_ref());
            let note = message.cloned().unwrap_or_else(|| reason.clone());
            self.event(step.phase == Phase::Failed, &reason, note);
        }
        let cancel_jobs = self.cancel_duplicates();
        let requeue = if cancel_jobs.is_empty() {
            step.requeue
        } else {
            Requeue::Active
        };
        let verdict = Verdict {
            phase: step.phase,
            kstatus,
            requeue,
        };
        let details = Details {
            now: self.input.now,
            record: self.record,
            cancel_jobs,
            events: self.events,
        };
        Plan::new(step.action, verdict, details)
    }

    /// The current attempt's other running jobs are cancelled, whatever else this pass does
    /// (cancelling creates nothing, so suspend does not hold it back), each with a Warning.
    fn cancel_duplicates(&mut self) -> Vec<String> {
        let kept = self.record.custom_job_name.clone().unwrap_or_default();
        let mut names = Vec::new();
        for job in &self.input.observed.duplicate_jobs {
            let note = format!(
                "custom job {} is a second job for attempt {} (a create whose reply was lost, listed late); cancelling it and keeping the oldest, {kept}",
                job.name, job.attempt
            );
            self.events.push(Transition {
                warning: true,
                reason: DUPLICATE_JOB_CANCELLED.to_string(),
                note,
            });
            names.push(job.name.clone());
        }
        names
    }
}

mod budget_hold;
mod kueue_gate;
mod lifecycle;
mod observed;
mod preprocess;
mod record;
mod retry_policy;
mod suspend;
mod training;
mod vertex_job;

use suspend::held;

pub use record::Record;

pub use observed::{Child, JobView, Marker, Observed, TrainingObserved, cancel_stops_billing, job_ended};

#[cfg(test)]
mod tests;
