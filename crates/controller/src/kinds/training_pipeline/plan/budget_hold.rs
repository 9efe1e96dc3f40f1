//! A period budget's `SuspendAtCheckpoint` (the namespace's `TpuPolicy`): while it is in force,
//! nothing new is created (an attempt or a batch the pipeline would start is held, recording
//! nothing, as `spec.suspend` holds it), and a running training attempt is stopped as
//! `spec.suspend` stops it, but only once a committed checkpoint written after the pipeline saw
//! the action has been listed: the steps since the last checkpoint are not thrown away. When the
//! period ends, the next attempt resumes from `CHECKPOINT_DIR` and spends no retry.
//! `status.budgetSuspension` records when the action was seen, the checkpoint and what stopped.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{BudgetSuspensionStatus, StageName, TrainingPipelinePhase as Phase},
};

use super::{
    Action, Planner, Requeue, Step, is_finished,
    status::{time, to_chrono},
    suspend::RESUMED,
};
use crate::governance::tenancy::rules::Suspending;

/// What stopped an attempt, in messages.
pub(super) const BY_BUDGET: &str = "a SuspendAtCheckpoint budget action";

impl Planner<'_> {
    /// The `SuspendAtCheckpoint` action in force now (its period not yet over).
    pub(super) fn budget_holds(&self) -> Option<&Suspending> {
        self.input
            .budget
            .filter(|hold| to_chrono(&hold.until) > self.input.now)
    }

    /// The step a creation of `what` takes while the action is in force: nothing of it is
    /// recorded, and the pipeline looks again when the period ends.
    pub(super) fn held_by_budget(&mut self, hold: &Suspending, what: &str) -> Step {
        self.note_budget(hold);
        let message = format!(
            "{}: SuspendAtCheckpoint is in force until {}; {what} is created then, resuming from CHECKPOINT_DIR",
            hold.budget, hold.until.0
        );
        Step {
            phase: Phase::Suspended,
            kstatus: Some((Progress::Idle, reasons::BUDGET_SUSPENDED, message)),
            action: Action::Nothing,
            requeue: self.until_period_end(hold),
        }
    }

    /// The action after the pass decided its step: nothing while it is not in force (or the
    /// pipeline is finished or suspended by its spec); otherwise the running attempt is stopped
    /// once a checkpoint newer than the action is listed, and is left training until then.
    pub(super) fn apply_budget(&mut self, step: Step) -> Step {
        let Some(hold) = self.budget_holds().cloned() else {
            self.budget_lifted();
            return step;
        };
        if is_finished(step.phase) || self.spec().suspend {
            return step;
        }
        self.note_budget(&hold);
        if step.action.creates() {
            // Every create path asks `budget_holds` first; this keeps any other from slipping by.
            return self.held_by_budget(&hold, "the next attempt");
        }
        if self.budget_stopped() {
            return self.stopped_step(step, &hold);
        }
        let training = self.record.current_stage == Some(StageName::Train);
        match self.checkpoint_after_notice() {
            Some(checkpoint) if training => match self.stop_billing(BY_BUDGET) {
                Some(stop) => {
                    let now = time(self.input.now);
                    if let Some(record) = self.record.budget_suspension.as_mut() {
                        record.checkpoint = Some(checkpoint.clone());
                        record.suspended_time = Some(now);
                        record.stopped = Some(stop.what.clone());
                        record.stopped_attempt = stop.attempt;
                    }
                    let message = format!(
                        "{}: suspended after the committed checkpoint {checkpoint}: {}; training resumes from it at {}",
                        hold.budget, stop.what, hold.until.0
                    );
                    self.event(true, reasons::BUDGET_SUSPENDED, message.clone());
                    Step {
                        phase: Phase::Suspended,
                        kstatus: Some((Progress::Idle, reasons::BUDGET_SUSPENDED, message)),
                        action: stop.action,
                        requeue: Requeue::Active,
                    }
                }
                None => step,
            },
            _ => self.awaiting_checkpoint(step, &hold),
        }
    }

    /// Training goes on until its next committed checkpoint: the step as decided, its message
    /// saying what comes.
    fn awaiting_checkpoint(&self, mut step: Step, hold: &Suspending) -> Step {
        let noticed = self
            .record
            .budget_suspension
            .as_ref()
            .map(|r| r.noticed_time.0.to_string())
            .unwrap_or_default();
        if let Some((_, _, message)) = step.kstatus.as_mut() {
            message.push_str(&format!(
                "; {}: SuspendAtCheckpoint is in force, so training is suspended after its next committed checkpoint (written after {noticed})",
                hold.budget
            ));
        }
        step
    }

    /// Stopped by the action: what is left to stop (a job still cancelling, a slice deleting)
    /// is followed closely, then the pipeline waits for the period's end.
    fn stopped_step(&self, step: Step, hold: &Suspending) -> Step {
        let record = self.record.budget_suspension.as_ref();
        let stopped = record.and_then(|r| r.stopped.clone()).unwrap_or_default();
        let checkpoint = record.and_then(|r| r.checkpoint.clone()).unwrap_or_default();
        let settled = matches!(step.action, Action::Nothing) && !self.training_bills();
        Step {
            phase: Phase::Suspended,
            kstatus: Some((
                Progress::Idle,
                reasons::BUDGET_SUSPENDED,
                format!(
                    "{}: suspended after the committed checkpoint {checkpoint} ({stopped}); training resumes from it at {}",
                    hold.budget, hold.until.0
                ),
            )),
            requeue: if settled {
                self.until_period_end(hold)
            } else {
                Requeue::Active
            },
            action: step.action,
        }
    }

    /// Whether the action stopped an attempt that has not been resumed yet.
    fn budget_stopped(&self) -> bool {
        self.record
            .budget_suspension
            .as_ref()
            .is_some_and(|r| r.suspended_time.is_some() && r.resumed_time.is_none())
    }

    /// The newest committed checkpoint, when it was written after the pipeline saw the action.
    fn checkpoint_after_notice(&self) -> Option<String> {
        let noticed = to_chrono(&self.record.budget_suspension.as_ref()?.noticed_time);
        // As the last progress check listed it (the record holds no checkpoint).
        let ckpt = self.old().checkpoint.as_ref()?;
        let written = to_chrono(ckpt.latest_time.as_ref()?);
        (written > noticed).then(|| ckpt.latest_uri.clone()).flatten()
    }

    /// The record of this period's action: started when the pipeline first sees it (again after
    /// an earlier period's suspension resumed).
    fn note_budget(&mut self, hold: &Suspending) {
        let now = time(self.input.now);
        let fresh = match &self.record.budget_suspension {
            None => true,
            Some(r) => r.resumed_time.is_some() || (r.until != hold.until && r.suspended_time.is_none()),
        };
        if fresh {
            self.record.budget_suspension = Some(BudgetSuspensionStatus {
                budget: hold.budget.clone(),
                noticed_time: now,
                until: hold.until.clone(),
                checkpoint: None,
                suspended_time: None,
                stopped: None,
                stopped_attempt: None,
                resumed_time: None,
            });
        } else if let Some(r) = self.record.budget_suspension.as_mut() {
            r.budget = hold.budget.clone();
            r.until = hold.until.clone();
        }
    }

    /// The action is no longer in force: a record of a period in which nothing was stopped is
    /// dropped (the run kept training). A stopped attempt is resumed where the next attempt
    /// starts ([`Self::resumed_from_budget`]).
    fn budget_lifted(&mut self) {
        if self
            .record
            .budget_suspension
            .as_ref()
            .is_some_and(|r| r.suspended_time.is_none())
        {
            self.record.budget_suspension = None;
        }
    }

    /// The attempt after the one the action stopped starts: the resumption's time and Event.
    pub(super) fn resumed_from_budget(&mut self) {
        let now = time(self.input.now);
        let Some(record) = self.record.budget_suspension.as_mut() else {
            return;
        };
        record.stopped_attempt = None;
        record.resumed_time = Some(now);
        let note = format!(
            "resumed: the budget period ended (it had stopped: {})",
            record.stopped.clone().unwrap_or_default()
        );
        self.event(false, RESUMED, note);
    }

    fn until_period_end(&self, hold: &Suspending) -> Requeue {
        let left = (to_chrono(&hold.until) - self.input.now)
            .to_std()
            .unwrap_or_default();
        Requeue::After(left)
    }
}
