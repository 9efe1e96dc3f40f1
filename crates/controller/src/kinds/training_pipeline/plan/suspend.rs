//! Suspend: what a suspended pipeline holds back ([`held`]) and stops (the job, the slice, the
//! batch), and resuming with an attempt that spends no retry.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, StageState, TrainingPipelinePhase as Phase},
};

use tpu_operator_gcp::aiplatform_v1::model::JobState;

use super::{
    Action, Child, JobView, Planner, Requeue, Step, TrainingObserved, budget_hold::BY_BUDGET, is_finished,
    observed::cancel_stops_billing, status::time,
};

/// The step of a pass that would create `what` while `spec.suspend` holds it back: nothing of it
/// is recorded (no attempt, no start time), so the next pass finds the same status. `why`: what
/// the creation follows (a failed attempt, a preemption).
pub(super) fn held(what: &str, why: Option<&str>) -> Step {
    let message = match why {
        Some(why) => format!("suspended: {why}; {what} is created once spec.suspend is false"),
        None => format!("suspended: {what} is created once spec.suspend is false"),
    };
    Step {
        phase: Phase::Suspended,
        kstatus: Some((Progress::Idle, reasons::SUSPENDED, message)),
        action: Action::Nothing,
        requeue: Requeue::Stable,
    }
}

impl Planner<'_> {
    /// `spec.suspend` on a pipeline still running: nothing new is created ([`held`] steps) and
    /// what bills is stopped, one thing per pass: the current Vertex job is cancelled, the
    /// training slice deleted (its node with it), a running preprocessing batch deleted (its
    /// Dataproc batch cancelled). Checkpoints stay where they are. `status.suspension` records
    /// when and what; resuming is noted by [`Self::note_resumed`].
    pub(super) fn apply_suspend(&mut self, step: Step) -> Step {
        if !self.spec().suspend {
            self.note_resumed();
            return step;
        }
        if is_finished(step.phase) {
            return step;
        }
        self.note_suspended();
        let keeps = !matches!(step.action, Action::Nothing) && !step.action.creates();
        let stop = if keeps {
            None
        } else {
            self.stop_billing(BY_SUSPEND)
        };
        let action = match (&stop, step.action) {
            (Some(stop), _) => stop.action.clone(),
            (None, action) if action.creates() => Action::Nothing,
            (None, action) => action,
        };
        if let Some(stop) = &stop {
            self.event(false, reasons::SUSPENDED, format!("suspended: {}", stop.what));
            let record = self.record.suspension.get_or_insert_with(Default::default);
            record.stopped = Some(stop.what.clone());
            record.stopped_attempt = stop.attempt.or(record.stopped_attempt);
        }
        let stopped = self.record.suspension.as_ref().and_then(|s| s.stopped.clone());
        let message = match (stopped, step.phase) {
            (Some(stopped), _) => format!(
                "suspended: {stopped}; checkpoints are kept and training resumes from them once spec.suspend is false"
            ),
            // A held step says what waits.
            (None, Phase::Suspended) => return Step { action, ..step },
            (None, _) => "suspended: nothing new is created until spec.suspend is false".to_string(),
        };
        // Stopping is followed closely (the job's cancel, the slice's delete), and so is a
        // cancelled job until it has ended: its end frees the Kueue quota, and the cloud watch
        // wakes the pipeline when the listing shows it. A stopped pipeline only waits for its
        // spec.
        let requeue = if matches!(action, Action::Nothing) && !self.training_bills() {
            Requeue::Stable
        } else {
            Requeue::Active
        };
        Step {
            phase: Phase::Suspended,
            kstatus: Some((Progress::Idle, reasons::SUSPENDED, message)),
            action,
            requeue,
        }
    }

    /// The pipeline is (still) suspended: the first pass of a suspension records its time and
    /// forgets what an earlier one stopped.
    fn note_suspended(&mut self) {
        let now = time(self.input.now);
        let record = self.record.suspension.get_or_insert_with(Default::default);
        if record.suspended_time.is_none() || record.resumed_time.is_some() {
            record.suspended_time = Some(now);
            record.resumed_time = None;
            record.stopped = None;
        }
    }

    /// `spec.suspend` went back to false: the resumption's time and its Event.
    fn note_resumed(&mut self) {
        let now = time(self.input.now);
        let Some(record) = self.record.suspension.as_mut() else {
            return;
        };
        if record.suspended_time.is_none() || record.resumed_time.is_some() {
            return;
        }
        record.resumed_time = Some(now);
        let note = match &record.stopped {
            Some(stopped) => format!("resumed (suspending had stopped: {stopped})"),
            None => "resumed".to_string(),
        };
        self.event(false, RESUMED, note);
    }

    /// What bills now and how to stop it: the running preprocessing batch, the current attempt's
    /// Vertex job while it is queued or running, or the training slice while it holds a node.
    /// `by` (`spec.suspend`, `Kueue`) names what stops it in the stage's message.
    pub(super) fn stop_billing(&mut self, by: &str) -> Option<Stop> {
        let observed = self.input.observed;
        let preprocessing = self.record.current_stage == Some(StageName::Preprocess);
        if preprocessing && matches!(observed.preprocess, Child::Progressing { .. }) {
            let name = self.input.preprocess_child;
            let stage = self.record.stage_mut(StageName::Preprocess);
            stage.state = StageState::Cancelled;
            stage.message = Some(format!("stopped by {by}; runs again on resume"));
            return Some(Stop {
                action: Action::DeletePreprocess,
                what: format!(
                    "PreprocessBatch {name} deleted (its Dataproc batch is cancelled; it runs again on resume)"
                ),
                attempt: None,
            });
        }
        let what = match &observed.training {
            TrainingObserved::Vertex { job: Some(job) } if cancel_stops_billing(&job.state) => Stop {
                action: Action::CancelJob {
                    name: job.name.clone(),
                },
                what: format!("custom job {} (attempt {}) cancelled", job.name, job.attempt),
                attempt: Some(job.attempt),
            },
            TrainingObserved::TpuVm { slice, .. } if slice.holds_cloud_resources() => Stop {
                action: Action::DeleteSlice,
                what: format!(
                    "TpuSlice {} (attempt {}) deleted with its TPU node",
                    self.input.train_child, self.record.attempts
                ),
                attempt: Some(self.record.attempts),
            },
            _ => return None,
        };
        let stage = self.record.stage_mut(StageName::Train);
        stage.state = StageState::Cancelled;
        stage.message = Some(format!(
            "stopped by {by}; a new attempt resumes from CHECKPOINT_DIR"
        ));
        Some(what)
    }

    /// What stopped `attempt` (its job cancelled, its slice deleted), when suspending
    /// (`spec.suspend`, a budget's `SuspendAtCheckpoint`) or a Kueue eviction did: the attempt that replaces it is a resumption,
    /// not a retry.
    pub(super) fn stopped_by(&self, attempt: i32) -> Option<&'static str> {
        let suspended = self.record.suspension.as_ref().and_then(|s| s.stopped_attempt);
        let evicted = self.record.kueue.as_ref().and_then(|k| k.stopped_attempt);
        let over_budget = self
            .record
            .budget_suspension
            .as_ref()
            .and_then(|b| b.stopped_attempt);
        if suspended == Some(attempt) {
            Some(BY_SUSPEND)
        } else if evicted == Some(attempt) {
            Some(BY_KUEUE)
        } else if over_budget == Some(attempt) {
            Some(BY_BUDGET)
        } else {
            None
        }
    }

    /// The job `by` (suspend, an eviction) cancelled: while it still cancels it still bills, so
    /// the next attempt waits for it (resuming beside a job that still cancelled once ran
    /// two) and usage counts it; once it has ended, the Train stage's end is recorded (usage no
    /// longer counts it) and the next attempt starts (held while suspended or evicted).
    pub(super) fn after_stopped_job(&mut self, job: &JobView, by: &str) -> Step {
        let attempt = job.attempt;
        if job.state == JobState::Cancelling {
            return Step::working(
                Phase::Provisioning,
                reasons::CANCELLING,
                format!(
                    "custom job {} (attempt {attempt}) stopped by {by} is still cancelling; the next attempt starts once it has ended",
                    job.name
                ),
                Action::Nothing,
                Requeue::Active,
            );
        }
        let now = time(self.input.now);
        let stage = self.record.stage_mut(StageName::Train);
        if stage.state == StageState::Cancelled {
            stage.end_time.get_or_insert(now);
        }
        let detail = format!(
            "custom job {} (attempt {attempt}) was cancelled by {by}; resuming from CHECKPOINT_DIR",
            job.name
        );
        self.start_attempt(attempt + 1, false, Some(detail))
    }

    /// Starting `attempt` after the one suspending or an eviction stopped: it is recorded as a
    /// resumption (and the stopped attempt forgotten, so a later failure is a failure). Returns
    /// what had stopped the one before.
    pub(super) fn take_resumption(&mut self, attempt: i32) -> Option<&'static str> {
        if self.spec().suspend || self.kueue_holds() || self.budget_holds().is_some() {
            return None;
        }
        let by = self.stopped_by(attempt - 1)?;
        if by == BY_BUDGET {
            self.resumed_from_budget();
        } else if by == BY_SUSPEND {
            let record = self.record.suspension.get_or_insert_with(Default::default);
            record.stopped_attempt = None;
            record.resumes += 1;
        } else {
            let kueue = self.record.kueue.get_or_insert_with(Default::default);
            kueue.stopped_attempt = None;
            kueue.resumes += 1;
        }
        Some(by)
    }
}

/// What stopped an attempt, in messages.
pub(super) const BY_SUSPEND: &str = "spec.suspend";
pub(super) const BY_KUEUE: &str = "a Kueue eviction";

/// Event reason of a suspended pipeline resumed.
pub const RESUMED: &str = "Resumed";

/// How to stop what bills while suspended or evicted, and what to call it in status.
pub(super) struct Stop {
    pub action: Action,
    pub what: String,
    /// The training attempt stopped (resuming replaces it with an uncounted one).
    pub attempt: Option<i32>,
}
