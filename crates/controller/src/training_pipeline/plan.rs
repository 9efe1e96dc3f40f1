//! The pipeline's decisions: from (spec, observed children and cloud state, current status, now)
//! to the new status, at most one action, the requeue interval and the events to publish.
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
//! - Suspend: nothing new is created (no batch, job or slice) and the phase is `Suspended`. Work
//!   already running keeps running and is still tracked; delete the pipeline to cancel it.
//! - `ttlSecondsAfterFinished`: once that long after completion, the cloud resources the pipeline
//!   still holds are reaped (Vertex job records; the TPU VM slice is already released when training
//!   ends) and `reapedTime` is set; the pipeline object and its status stay.
//!
//! Does not touch Kubernetes or Google Cloud.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, find_condition, reasons, types},
    training_pipeline::{
        PipelineOutputs, StageName, StageState, TrainingPipelinePhase as Phase, TrainingPipelineSpec,
        TrainingPipelineStatus,
    },
};
use tpu_operator_gcp::aiplatform_v1::model::JobState;

use super::status::{self, time};

/// Reason of a pipeline stopped by a failed preprocessing stage.
pub const PREPROCESS_FAILED: &str = "PreprocessFailed";
/// Reason of a pipeline whose owned child already exists but belongs to someone else.
pub const CHILD_NOT_OWNED: &str = "ChildNotOwned";

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
    fn holds_cloud_resources(&self) -> bool {
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
    /// Whether `<modelDir>model/` exists; only looked up once the job succeeded.
    pub model_exists: Option<bool>,
}

/// TPU VM mode: the completion marker the training container wrote under `modelDir` during the
/// current attempt (older markers are ignored).
#[derive(Clone, Debug, PartialEq)]
pub enum Marker {
    None,
    Succeeded,
    Failed { detail: String },
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
    /// Reaping only: whether the delete operation in `status.pendingOperation` is done.
    pub pending_operation_done: Option<bool>,
}

/// Training mode, from the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Vertex,
    TpuVm,
}

impl Mode {
    pub fn of(spec: &TrainingPipelineSpec) -> Result<Mode, String> {
        match (&spec.training.vertex, &spec.training.tpu_vm) {
            (Some(_), None) => Ok(Mode::Vertex),
            (None, Some(_)) => Ok(Mode::TpuVm),
            _ => Err("spec.training: set exactly one of vertex and tpuVm".into()),
        }
    }
}

/// The one action of this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Nothing,
    /// Create the owned `PreprocessBatch` `<name>-preprocess`.
    CreatePreprocess,
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
    /// Delete a finished Vertex job record (TTL reaping).
    DeleteJob {
        name: String,
    },
}

impl Action {
    fn creates(&self) -> bool {
        matches!(
            self,
            Action::CreatePreprocess | Action::CreateJob { .. } | Action::CreateSlice { .. }
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Cloud state is changing: poll soon.
    Active,
    /// Waiting for capacity.
    Capacity,
    /// Nothing expected soon (children's changes trigger a reconcile through the watch).
    Stable,
    /// A deadline of our own (the TTL), capped at the stable interval by the caller.
    After(Duration),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub status: TrainingPipelineStatus,
    pub action: Action,
    pub requeue: Requeue,
    pub events: Vec<Event>,
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
    pub status: &'a TrainingPipelineStatus,
    pub generation: Option<i64>,
    pub observed: &'a Observed,
    pub now: DateTime<Utc>,
    /// `<name>-preprocess` and `<name>-train`, for messages.
    pub preprocess_child: &'a str,
    pub train_child: &'a str,
}

pub fn plan(input: &Input) -> Plan {
    let mut p = Planner {
        input,
        st: input.status.clone(),
        events: Vec::new(),
    };
    p.st.observed_generation = input.generation;
    let step = match Mode::of(input.spec) {
        Err(message) => p.finish_failed(reasons::INVALID_SPEC, message, Action::Nothing),
        Ok(mode) => {
            p.init(mode);
            if is_finished(p.st.phase) {
                p.finished()
            } else {
                p.run(mode)
            }
        }
    };
    let step = p.apply_suspend(step);
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
    st: TrainingPipelineStatus,
    events: Vec<Event>,
}

impl Planner<'_> {
    fn spec(&self) -> &TrainingPipelineSpec {
        self.input.spec
    }

    fn init(&mut self, mode: Mode) {
        let now = self.input.now;
        self.st.start_time.get_or_insert_with(|| time(now));
        let pre = if self.spec().preprocess.is_some() {
            StageState::Pending
        } else {
            StageState::Skipped
        };
        status::ensure_stage(&mut self.st, StageName::Preprocess, mode, pre);
        status::ensure_stage(&mut self.st, StageName::Train, mode, StageState::Pending);
        if let Some((accelerator, chips)) = status::accelerator_of(self.spec()) {
            self.st.accelerator_type = Some(accelerator);
            self.st.chips = Some(chips);
        }
    }

    fn event(&mut self, warning: bool, reason: &str, note: String) {
        self.events.push(Event {
            warning,
            reason: reason.to_string(),
            note,
        });
    }

    fn run(&mut self, mode: Mode) -> Step {
        if self.spec().preprocess.is_some()
            && status::stage(&self.st, StageName::Preprocess).state != StageState::Succeeded
            && let Some(step) = self.preprocess()
        {
            return step;
        }
        self.st.current_stage = Some(StageName::Train);
        match (mode, &self.input.observed.training) {
            (Mode::Vertex, TrainingObserved::Vertex { job }) => self.vertex(job.as_ref()),
            (Mode::TpuVm, TrainingObserved::TpuVm { slice, marker }) => self.tpu_vm(slice, marker),
            _ => Step::working(
                Phase::Provisioning,
                reasons::PENDING,
                "training mode changed; observing again".into(),
                Action::Nothing,
                Requeue::Active,
            ),
        }
    }

    /// Stage 1. `None` when it succeeded now and training may start in this same pass.
    fn preprocess(&mut self) -> Option<Step> {
        let now = time(self.input.now);
        let name = self.input.preprocess_child;
        self.st.current_stage = Some(StageName::Preprocess);
        let stage = status::stage_mut(&mut self.st, StageName::Preprocess);
        stage.resource_name = Some(name.to_string());
        let step = match &self.input.observed.preprocess {
            Child::Absent => {
                stage.state = StageState::Running;
                stage.start_time.get_or_insert(now);
                stage.attempts = stage.attempts.max(1);
                Step::working(
                    Phase::Preprocessing,
                    reasons::CREATING,
                    format!("creating PreprocessBatch {name}"),
                    Action::CreatePreprocess,
                    Requeue::Active,
                )
            }
            Child::NotOwned => {
                let msg = format!("PreprocessBatch {name} exists and is not owned by this pipeline");
                return Some(self.finish_failed(CHILD_NOT_OWNED, msg, Action::Nothing));
            }
            Child::Deleting => Step::working(
                Phase::Preprocessing,
                reasons::DELETING,
                format!("waiting for PreprocessBatch {name} to finish deleting"),
                Action::Nothing,
                Requeue::Active,
            ),
            Child::Progressing { reason, message } => {
                stage.state = StageState::Running;
                stage.message = Some(format!("{reason}: {message}"));
                Step::working(
                    Phase::Preprocessing,
                    reasons::RUNNING,
                    format!("preprocessing ({name}): {message}"),
                    Action::Nothing,
                    Requeue::Stable,
                )
            }
            Child::Ready { message } => {
                stage.state = StageState::Succeeded;
                stage.end_time = Some(now);
                stage.message = Some(message.clone());
                let processed = self.spec().artifacts.processed_data.clone();
                self.st
                    .outputs
                    .get_or_insert_with(PipelineOutputs::default)
                    .processed_data = processed;
                self.event(
                    false,
                    "PreprocessSucceeded",
                    format!("PreprocessBatch {name} succeeded"),
                );
                return None;
            }
            Child::Stalled { reason, message } => {
                stage.state = StageState::Failed;
                stage.end_time = Some(now);
                stage.message = Some(format!("{reason}: {message}"));
                let msg = format!("preprocessing failed (PreprocessBatch {name}, {reason}): {message}");
                return Some(self.finish_failed(PREPROCESS_FAILED, msg, Action::Nothing));
            }
        };
        Some(step)
    }

    fn vertex(&mut self, job: Option<&JobView>) -> Step {
        let Some(job) = job else {
            return self.start_attempt(self.st.attempts + 1, true, None);
        };
        let now = time(self.input.now);
        self.st.attempts = self.st.attempts.max(job.attempt);
        self.st.custom_job_name = Some(job.name.clone());
        let stage = status::stage_mut(&mut self.st, StageName::Train);
        stage.gcp_name = Some(job.name.clone());
        stage.attempts = stage.attempts.max(1);
        stage.start_time.get_or_insert(now);
        let attempt = job.attempt;
        match job.state {
            JobState::Queued | JobState::Pending => {
                stage.state = StageState::Queued;
                Step::working(
                    Phase::Provisioning,
                    reasons::QUEUED,
                    format!(
                        "custom job {} (attempt {attempt}) waits for TPU capacity",
                        job.name
                    ),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            JobState::Running | JobState::Updating | JobState::Paused => {
                stage.state = StageState::Running;
                Step::working(
                    Phase::Training,
                    reasons::RUNNING,
                    format!(
                        "custom job {} (attempt {attempt}) is {}",
                        job.name,
                        job_state_name(&job.state)
                    ),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            JobState::Succeeded | JobState::PartiallySucceeded => match job.model_exists {
                Some(true) => {
                    let model = join_uri(&self.spec().artifacts.model_dir, "model/");
                    self.finish_succeeded(model)
                }
                Some(false) => {
                    stage.state = StageState::Failed;
                    let model = join_uri(&self.spec().artifacts.model_dir, "model/");
                    let msg = format!(
                        "custom job {} succeeded but wrote no model under {model}",
                        job.name
                    );
                    self.finish_failed(reasons::OUTPUT_MISSING, msg, Action::Nothing)
                }
                None => Step::working(
                    Phase::Training,
                    reasons::SUCCEEDED,
                    "verifying the model output".into(),
                    Action::Nothing,
                    Requeue::Active,
                ),
            },
            JobState::Failed => {
                let detail = format!(
                    "custom job {} (attempt {attempt}) failed: {}",
                    job.name, job.message
                );
                self.attempt_failed(detail, Action::CreateJob { attempt: attempt + 1 })
            }
            JobState::Expired => {
                let detail = format!(
                    "custom job {} (attempt {attempt}) expired waiting for capacity; not counted as a failure",
                    job.name
                );
                self.start_attempt(attempt + 1, false, Some(detail))
            }
            JobState::Cancelling | JobState::Cancelled => {
                stage.state = StageState::Cancelled;
                let msg = format!("custom job {} was cancelled outside the operator", job.name);
                self.finish_failed(reasons::CANCELLED, msg, Action::Nothing)
            }
            // Unspecified and states newer than this client: keep polling.
            _ => Step::working(
                Phase::Training,
                reasons::RUNNING,
                format!(
                    "custom job {} is in state {}",
                    job.name,
                    job_state_name(&job.state)
                ),
                Action::Nothing,
                Requeue::Active,
            ),
        }
    }

    fn tpu_vm(&mut self, slice: &Child, marker: &Marker) -> Step {
        let name = self.input.train_child.to_string();
        let release = if slice.holds_cloud_resources() {
            Action::DeleteSlice
        } else {
            Action::Nothing
        };
        let stage = status::stage_mut(&mut self.st, StageName::Train);
        stage.resource_name = Some(name.clone());
        match marker {
            Marker::Succeeded => {
                let model = self.spec().artifacts.model_dir.clone();
                let mut step = self.finish_succeeded(model);
                step.action = release;
                return step;
            }
            Marker::Failed { detail } => {
                let detail = format!("training container failed on TpuSlice {name}: {detail}");
                return self.attempt_failed(detail, release);
            }
            Marker::None => {}
        }
        match slice {
            Child::Absent => self.start_attempt(self.st.attempts + 1, true, None),
            Child::NotOwned => {
                let msg = format!("TpuSlice {name} exists and is not owned by this pipeline");
                self.finish_failed(CHILD_NOT_OWNED, msg, Action::Nothing)
            }
            Child::Deleting => Step::working(
                Phase::Provisioning,
                reasons::DELETING,
                format!("waiting for TpuSlice {name} to finish deleting"),
                Action::Nothing,
                Requeue::Active,
            ),
            Child::Progressing { reason, message } => {
                stage.state = StageState::Queued;
                stage.message = Some(format!("{reason}: {message}"));
                let requeue = if reason == reasons::WAITING_FOR_CAPACITY {
                    Requeue::Capacity
                } else {
                    Requeue::Active
                };
                Step::working(
                    Phase::Provisioning,
                    reasons::PROVISIONING,
                    format!("TpuSlice {name}: {message}"),
                    Action::Nothing,
                    requeue,
                )
            }
            Child::Ready { .. } => {
                stage.state = StageState::Running;
                stage.message = Some("training container running".into());
                Step::working(
                    Phase::Training,
                    reasons::RUNNING,
                    format!("training on TpuSlice {name} (attempt {})", self.st.attempts),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            Child::Stalled { reason, message } => {
                let detail = format!("TpuSlice {name} stalled ({reason}): {message}");
                self.attempt_failed(detail, Action::DeleteSlice)
            }
        }
    }

    /// A new training attempt: a Vertex job or a slice. `counted` attempts use up `maxRetries`.
    fn start_attempt(&mut self, attempt: i32, counted: bool, why: Option<String>) -> Step {
        let now = time(self.input.now);
        let mode = Mode::of(self.spec()).unwrap_or(Mode::Vertex);
        self.st.attempts = attempt;
        self.st.custom_job_name = None;
        let stage = status::stage_mut(&mut self.st, StageName::Train);
        stage.state = StageState::Queued;
        // The start of the current attempt: TPU VM markers older than this belong to an earlier one.
        stage.start_time = Some(now);
        stage.end_time = None;
        stage.gcp_name = None;
        if counted {
            stage.attempts += 1;
        }
        stage.message = why.clone();
        let (action, what) = match mode {
            Mode::Vertex => (Action::CreateJob { attempt }, "custom job"),
            Mode::TpuVm => (Action::CreateSlice { attempt }, "TpuSlice"),
        };
        let reason = if attempt > 1 {
            reasons::RETRYING
        } else {
            reasons::CREATING
        };
        let message = match why {
            Some(why) => format!("{why}; creating {what} for attempt {attempt}"),
            None => format!("creating {what} for attempt {attempt}"),
        };
        Step::working(Phase::Provisioning, reason, message, action, Requeue::Active)
    }

    /// A counted training attempt failed: retry (after `before_retry`, e.g. releasing the old
    /// slice) while the budget lasts, else the pipeline fails.
    fn attempt_failed(&mut self, detail: String, before_retry: Action) -> Step {
        let max = self.spec().max_retries;
        let attempts = status::stage(&self.st, StageName::Train).attempts;
        if attempts > max {
            let msg = format!("{detail}; no retries left ({attempts} attempts, maxRetries {max})");
            status::stage_mut(&mut self.st, StageName::Train).state = StageState::Failed;
            let release = match before_retry {
                Action::DeleteSlice => Action::DeleteSlice,
                _ => Action::Nothing,
            };
            return self.finish_failed(reasons::RETRIES_EXHAUSTED, msg, release);
        }
        match before_retry {
            Action::CreateJob { attempt } => {
                let note = format!("{detail}; retry {attempts} of {max}");
                self.event(true, reasons::RETRYING, note);
                self.start_attempt(attempt, true, Some(detail))
            }
            Action::DeleteSlice => Step::working(
                Phase::Training,
                reasons::RETRYING,
                format!("{detail}; releasing the slice before retry {attempts} of {max}"),
                Action::DeleteSlice,
                Requeue::Active,
            ),
            // The slice is gone (or going): the next attempt starts once it is absent.
            _ => match &self.input.observed.training {
                TrainingObserved::TpuVm {
                    slice: Child::Absent, ..
                } => {
                    let note = format!("{detail}; retry {attempts} of {max}");
                    self.event(true, reasons::RETRYING, note);
                    self.start_attempt(self.st.attempts + 1, true, Some(detail))
                }
                _ => Step::working(
                    Phase::Training,
                    reasons::RETRYING,
                    format!("{detail}; waiting for the slice to be released before retrying"),
                    Action::Nothing,
                    Requeue::Active,
                ),
            },
        }
    }

    fn finish_succeeded(&mut self, model_uri: String) -> Step {
        let now = time(self.input.now);
        let stage = status::stage_mut(&mut self.st, StageName::Train);
        stage.state = StageState::Succeeded;
        stage.end_time = Some(now.clone());
        stage.message = Some(format!("model written to {model_uri}"));
        self.st.completion_time = Some(now);
        let processed = self.spec().artifacts.processed_data.clone();
        let outputs = self.st.outputs.get_or_insert_with(PipelineOutputs::default);
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
        let now = time(self.input.now);
        self.st.completion_time = Some(now.clone());
        if let Some(stage) = self
            .st
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

    /// Succeeded or Failed: release what training still holds, then reap after the TTL.
    fn finished(&mut self) -> Step {
        let phase = self.st.phase;
        let keep = |action, requeue| Step {
            phase,
            kstatus: None,
            action,
            requeue,
        };
        if let TrainingObserved::TpuVm { slice, .. } = &self.input.observed.training {
            if slice.holds_cloud_resources() {
                return keep(Action::DeleteSlice, Requeue::Active);
            }
            if *slice == Child::Deleting {
                return keep(Action::Nothing, Requeue::Active);
            }
        }
        let (Some(ttl), Some(done), None) = (
            self.spec().ttl_seconds_after_finished,
            self.st.completion_time.as_ref(),
            self.st.reaped_time.as_ref(),
        ) else {
            return keep(Action::Nothing, Requeue::Stable);
        };
        let due = status::to_chrono(done) + chrono::Duration::seconds(ttl);
        if self.input.now < due {
            let wait = (due - self.input.now).to_std().unwrap_or_default();
            return keep(Action::Nothing, Requeue::After(wait));
        }
        let observed = self.input.observed;
        if self.st.pending_operation.is_some() {
            match observed.pending_operation_done {
                Some(true) => self.st.pending_operation = None,
                _ => return keep(Action::Nothing, Requeue::Active),
            }
        }
        if let Some(job) = observed.held_jobs.first() {
            return keep(
                Action::DeleteJob {
                    name: job.name.clone(),
                },
                Requeue::Active,
            );
        }
        self.st.reaped_time = Some(time(self.input.now));
        let progress = if phase == Phase::Succeeded {
            Progress::Ready
        } else {
            Progress::Stalled
        };
        let before = find_condition(&self.st.conditions, types::READY)
            .or_else(|| find_condition(&self.st.conditions, types::STALLED))
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let message = format!("{before}; cloud resources reaped after ttlSecondsAfterFinished={ttl}");
        self.event(false, reasons::REAPED, message.clone());
        Step {
            phase,
            kstatus: Some((progress, reasons::REAPED, message)),
            action: Action::Nothing,
            requeue: Requeue::Stable,
        }
    }

    /// `spec.suspend`: nothing new is created; running work keeps running and is still tracked.
    fn apply_suspend(&mut self, step: Step) -> Step {
        if !self.spec().suspend || is_finished(step.phase) {
            return step;
        }
        let action = if step.action.creates() {
            Action::Nothing
        } else {
            step.action
        };
        Step {
            phase: Phase::Suspended,
            kstatus: Some((
                Progress::Idle,
                reasons::SUSPENDED,
                "suspended: no new batch, job or slice is created; work already running keeps running \
                 (delete the pipeline to cancel it)"
                    .into(),
            )),
            action,
            requeue: Requeue::Stable,
        }
    }

    fn finalize(mut self, step: Step) -> Plan {
        let old_phase = self.input.status.phase;
        let now = time(self.input.now);
        if let Some((progress, reason, message)) = &step.kstatus {
            self.st.message = Some(message.clone());
            status::set_kstatus(&mut self.st, *progress, reason, message, now.clone());
        }
        if step.phase != old_phase {
            let reason = format!("{:?}", step.phase);
            let note = self.st.message.clone().unwrap_or_else(|| reason.clone());
            self.event(step.phase == Phase::Failed, &reason, note);
        }
        self.st.phase = step.phase;
        status::set_stage_conditions(&mut self.st, self.input.spec.suspend, now);
        Plan {
            status: self.st,
            action: step.action,
            requeue: step.requeue,
            events: self.events,
        }
    }
}

fn job_state_name(state: &JobState) -> &str {
    state.name().unwrap_or("JOB_STATE_UNKNOWN")
}

#[cfg(test)]
mod tests;
