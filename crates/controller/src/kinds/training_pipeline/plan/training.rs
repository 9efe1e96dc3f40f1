//! The training stage: a Vertex custom job (its steps in [`super::vertex_job`]) or an owned
//! TpuSlice, attempts and retries.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, StageState, TrainingMode, TrainingPipelinePhase as Phase},
};

use super::{
    Action, CHILD_NOT_OWNED, Child, Marker, Planner, Requeue, Step, TrainingObserved, held, status::time,
};

/// Attempts that did not count against `maxRetries` (Spot preemptions, expired capacity waits)
/// after which a further preemption counts after all: a zone that reclaims every Spot job must
/// end the pipeline some day rather than create jobs forever.
pub const MAX_UNCOUNTED_PREEMPTIONS: i32 = 10;

impl Planner<'_> {
    /// Training attempts so far that did not count against `maxRetries`.
    pub(super) fn uncounted_attempts(&self) -> i32 {
        let resumes = self.record.suspension.as_ref().map_or(0, |s| s.resumes)
            + self.record.kueue.as_ref().map_or(0, |k| k.resumes);
        (self.record.attempts - self.record.stage(StageName::Train).attempts - resumes).max(0)
    }

    pub(super) fn tpu_vm(&mut self, slice: &Child, marker: &Marker) -> Step {
        let name = self.input.train_child.to_string();
        let release = if slice.holds_cloud_resources() {
            Action::DeleteSlice
        } else {
            Action::Nothing
        };
        self.record_slice(slice, &name);
        match marker {
            Marker::Succeeded => {
                let model = self.spec().artifacts.model_dir.clone();
                let mut step = self.finish_succeeded(model);
                step.action = release;
                step
            }
            Marker::Failed { detail, exit_code } => {
                let detail = format!("training container failed on TpuSlice {name}: {detail}");
                self.failed_as_the_policy_says(detail, *exit_code, release)
            }
            Marker::None => self.slice_step(slice, &name),
        }
    }

    /// The slice is this attempt's: its name goes to the Train stage. A live slice may come from
    /// an attempt whose status write was lost (operator killed between the create and the write):
    /// it is adopted as the attempt it is, started no later than now.
    fn record_slice(&mut self, slice: &Child, name: &str) {
        let adopted = matches!(slice, Child::Progressing { .. } | Child::Ready { .. });
        if adopted {
            self.record.attempts = self.record.attempts.max(1);
        }
        let now = time(self.input.now);
        let stage = self.record.stage_mut(StageName::Train);
        stage.resource_name = Some(name.to_string());
        if adopted {
            // Without a start time the completion markers are never looked at (the pipeline would
            // stay Training forever). The attempt started no later than now.
            stage.start_time.get_or_insert(now);
            stage.attempts = stage.attempts.max(1);
        }
    }

    /// No completion marker yet: the step follows the slice's own state.
    fn slice_step(&mut self, slice: &Child, name: &str) -> Step {
        match slice {
            Child::Absent => self.start_attempt(self.record.attempts + 1, true, None),
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
            Child::Progressing { reason, message } if reason == reasons::MAINTENANCE_ONGOING => {
                // The run goes on after it, from its checkpoint: still training, not queued.
                let stage = self.record.stage_mut(StageName::Train);
                stage.state = StageState::Running;
                stage.message = Some(format!("{reason}: {message}"));
                Step::working(
                    Phase::Training,
                    reasons::MAINTENANCE_ONGOING,
                    format!("TpuSlice {name}: {message}"),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            Child::Progressing { reason, message } => self.slice_provisioning(name, reason, message),
            Child::Ready { .. } => {
                let stage = self.record.stage_mut(StageName::Train);
                stage.state = StageState::Running;
                stage.message = Some("training container running".into());
                Step::working(
                    Phase::Training,
                    reasons::RUNNING,
                    format!("training on TpuSlice {name} (attempt {})", self.record.attempts),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            // The slice retries an exhausted project quota itself, slowly, and waits for a
            // WorkloadPriorityClass its Kueue label names to exist: waits, not failed attempts.
            Child::Stalled { reason, message } if let Some(reason) = slice_wait(reason) => Step {
                phase: Phase::Waiting,
                kstatus: Some((Progress::Stalled, reason, format!("TpuSlice {name}: {message}"))),
                action: Action::Nothing,
                requeue: Requeue::Stable,
            },
            Child::Stalled { reason, message } => {
                let detail = format!("TpuSlice {name} stalled ({reason}): {message}");
                self.attempt_failed(detail, Action::DeleteSlice, true)
            }
        }
    }

    /// The slice is being provisioned: the attempt is queued, waiting for capacity polls at the
    /// capacity interval.
    fn slice_provisioning(&mut self, name: &str, reason: &str, message: &str) -> Step {
        let stage = self.record.stage_mut(StageName::Train);
        stage.state = StageState::Queued;
        stage.message = Some(format!("{reason}: {message}"));
        // Queued in Kueue (the slice carries the pipeline's queue label) is a wait too.
        let (phase, kstatus_reason, requeue) = match reason {
            reasons::WAITING_FOR_CAPACITY => {
                (Phase::Waiting, reasons::WAITING_FOR_CAPACITY, Requeue::Capacity)
            }
            reasons::RATE_LIMITED => (Phase::Waiting, reasons::RATE_LIMITED, Requeue::Capacity),
            reasons::QUEUED_IN_KUEUE => (Phase::Waiting, reasons::QUEUED_IN_KUEUE, Requeue::Capacity),
            _ => (Phase::Provisioning, reasons::PROVISIONING, Requeue::Active),
        };
        Step::working(
            phase,
            kstatus_reason,
            format!("TpuSlice {name}: {message}"),
            Action::Nothing,
            requeue,
        )
    }

    /// [`Self::start_attempt`] after an attempt ended, with the Event that says so (not
    /// published while suspend holds the attempt back: every pass would publish it again).
    pub(super) fn retry(
        &mut self,
        attempt: i32,
        counted: bool,
        why: String,
        event: (bool, &str, String),
    ) -> Step {
        let step = self.start_attempt(attempt, counted, Some(why));
        // A held attempt (suspend, Kueue) says it when it is created instead: every pass until
        // then would publish it again.
        if step.action.creates() {
            self.event(event.0, event.1, event.2);
        }
        step
    }

    /// A new training attempt: a Vertex job or a slice. `counted` attempts use up `maxRetries`.
    /// While suspended, nothing of it is recorded ([`held`]).
    pub(super) fn start_attempt(&mut self, attempt: i32, counted: bool, why: Option<String>) -> Step {
        let now = time(self.input.now);
        let mode = self.spec().training.mode().unwrap_or(TrainingMode::Vertex);
        let what = match mode {
            TrainingMode::Vertex => "custom job",
            TrainingMode::TpuVm => "TpuSlice",
        };
        if self.spec().suspend {
            return held(&format!("{what} for attempt {attempt}"), why.as_deref());
        }
        // Before Kueue's gate: a Workload admitted while the budget holds the attempt back would
        // be released and queued again on every pass.
        if let Some(hold) = self.budget_holds().cloned() {
            return self.held_by_budget(&hold, &format!("{what} for attempt {attempt}"));
        }
        if self.kueue_holds() {
            return self.held_by_kueue(&format!("{what} for attempt {attempt}"));
        }
        let (counted, why) = if let Some(by) = self.take_resumption(attempt) {
            let why =
                why.unwrap_or_else(|| format!("resumed after {by}; training continues from CHECKPOINT_DIR"));
            (false, Some(why))
        } else {
            (counted, why)
        };
        self.record.attempts = attempt;
        self.record.custom_job_name = None;
        let stage = self.record.stage_mut(StageName::Train);
        stage.state = StageState::Queued;
        // The start of the current attempt: TPU VM markers older than this belong to an earlier one.
        stage.start_time = Some(now);
        stage.end_time = None;
        stage.gcp_name = None;
        if counted {
            stage.attempts += 1;
        }
        stage.message = why.clone();
        let action = match mode {
            TrainingMode::Vertex => Action::CreateJob { attempt },
            TrainingMode::TpuVm => Action::CreateSlice { attempt },
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

    /// A training attempt failed: retry (after `before_retry`, e.g. releasing the old slice)
    /// while the budget lasts, else the pipeline fails. A failure that does not `count` (the
    /// retry policy's `Ignore`) retries with an attempt that does not count either.
    pub(super) fn attempt_failed(&mut self, detail: String, before_retry: Action, count: bool) -> Step {
        let max = self.spec().max_retries;
        let attempts = self.run_attempts();
        if count && attempts > max {
            let msg = format!("{detail}; no retries left ({attempts} attempts, maxRetries {max})");
            self.record.stage_mut(StageName::Train).state = StageState::Failed;
            let release = match before_retry {
                Action::DeleteSlice => Action::DeleteSlice,
                _ => Action::Nothing,
            };
            return self.finish_failed(reasons::RETRIES_EXHAUSTED, msg, release);
        }
        let which = if count {
            format!("retry {attempts} of {max}")
        } else {
            "a retry that does not count".to_string()
        };
        match before_retry {
            Action::CreateJob { attempt } => {
                let note = format!("{detail}; {which}");
                self.retry(attempt, count, detail, (true, reasons::RETRYING, note))
            }
            Action::DeleteSlice => Step::working(
                Phase::Training,
                reasons::RETRYING,
                format!("{detail}; releasing the slice before {which}"),
                Action::DeleteSlice,
                Requeue::Active,
            ),
            // The slice is gone (or going): the next attempt starts once it is absent.
            _ => match &self.input.observed.training {
                TrainingObserved::TpuVm {
                    slice: Child::Absent, ..
                } => {
                    let note = format!("{detail}; {which}");
                    let attempt = self.record.attempts + 1;
                    self.retry(attempt, count, detail, (true, reasons::RETRYING, note))
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
}

/// The reason a stalled training slice waits for without failing the attempt, as a `'static`
/// reason for the pipeline's own condition.
fn slice_wait(reason: &str) -> Option<&'static str> {
    [reasons::QUOTA_EXCEEDED, reasons::PRIORITY_CLASS_NOT_FOUND]
        .into_iter()
        .find(|r| *r == reason)
}
