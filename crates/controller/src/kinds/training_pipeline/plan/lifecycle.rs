//! After the run: releasing what a finished pipeline holds, starting another run (raised
//! `maxRetries`, the rerun annotation), TTL reaping, and suspend.

use tpu_operator_api::{
    conditions::{Progress, find_condition, reasons, types},
    training_pipeline::{
        RERUN_ANNOTATION, RerunStatus, StageName, StageState, TrainingMode, TrainingPipelinePhase as Phase,
    },
};

use super::{
    Action, Child, Planner, Requeue, Step, TrainingObserved, is_finished,
    status::{self, time},
};

/// Event reason of a new run started by the rerun annotation.
pub const RERUN: &str = "Rerun";

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
    /// Succeeded or Failed: release what training still holds, start another run when one is
    /// asked for, then reap after the TTL.
    pub(super) fn finished(&mut self, mode: TrainingMode) -> Step {
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
        if let Some(step) = self.reopen(mode) {
            return step;
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
        self.reap(phase, ttl)
    }

    /// The TTL passed: wait for a pending Vertex operation, delete the held job records one per
    /// pass, then record the reaping (`reapedTime`, the kstatus message, an Event).
    fn reap(&mut self, phase: Phase, ttl: i64) -> Step {
        let keep = |action, requeue| Step {
            phase,
            kstatus: None,
            action,
            requeue,
        };
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

    /// Counted training attempts of the current run (earlier runs' do not count against
    /// `maxRetries`).
    pub(super) fn run_attempts(&self) -> i32 {
        let earlier = self.st.rerun.as_ref().map_or(0, |r| r.earlier_attempts);
        status::stage(&self.st, StageName::Train).attempts - earlier
    }

    /// A rerun annotation value not acted on yet.
    fn rerun_requested(&self) -> Option<&str> {
        let value = self.input.rerun.filter(|v| !v.is_empty())?;
        (self.st.rerun.as_ref().map(|r| r.value.as_str()) != Some(value)).then_some(value)
    }

    /// Failed for `RetriesExhausted` and `maxRetries` now allows another attempt.
    fn retries_raised(&self) -> bool {
        let exhausted = find_condition(&self.st.conditions, types::STALLED)
            .is_some_and(|c| c.status == "True" && c.reason == reasons::RETRIES_EXHAUSTED);
        self.st.phase == Phase::Failed && exhausted && self.run_attempts() <= self.spec().max_retries
    }

    /// A finished pipeline whose last slice is released runs again: for a new rerun annotation
    /// value (a new run, a fresh `maxRetries` budget, a succeeded preprocessing kept), or after
    /// `maxRetries` was raised on a pipeline that ran out of retries (the next counted attempt).
    /// Never while suspended: the request waits, and the status says what it did last.
    fn reopen(&mut self, mode: TrainingMode) -> Option<Step> {
        if self.spec().suspend {
            return None;
        }
        let now = time(self.input.now);
        if let Some(value) = self.rerun_requested().map(str::to_string) {
            let earlier_attempts = status::stage(&self.st, StageName::Train).attempts;
            self.st.rerun = Some(RerunStatus {
                value: value.clone(),
                start_time: Some(now),
                earlier_attempts,
            });
            self.reset_run();
            let why = format!("re-run {value:?} requested ({RERUN_ANNOTATION})");
            self.event(false, RERUN, format!("{why}: starting a new run"));
            let pre = status::stage_mut(&mut self.st, StageName::Preprocess);
            if !matches!(pre.state, StageState::Succeeded | StageState::Skipped) {
                // Preprocessing did not succeed: it runs again, then training.
                pre.state = StageState::Pending;
                pre.start_time = None;
                pre.end_time = None;
                pre.message = None;
                return Some(self.run(mode));
            }
            self.st.current_stage = Some(StageName::Train);
            return Some(self.start_attempt(self.st.attempts + 1, true, Some(why)));
        }
        if self.retries_raised() {
            let (attempts, max) = (self.run_attempts(), self.spec().max_retries);
            let why = format!("maxRetries raised to {max} after {attempts} failed attempts: resuming");
            self.event(false, reasons::RETRYING, why.clone());
            self.reset_run();
            self.st.current_stage = Some(StageName::Train);
            return Some(self.start_attempt(self.st.attempts + 1, true, Some(why)));
        }
        None
    }

    /// What a finished run recorded that the next one replaces.
    fn reset_run(&mut self) {
        self.st.completion_time = None;
        self.st.reaped_time = None;
        if let Some(outputs) = self.st.outputs.as_mut() {
            outputs.model_uri = None;
        }
        let train = status::stage_mut(&mut self.st, StageName::Train);
        train.state = StageState::Pending;
        train.end_time = None;
    }

    /// `spec.suspend`: nothing new is created; running work keeps running and is still tracked.
    /// A step already held back by suspend ([`held`]) says what waits.
    pub(super) fn apply_suspend(&mut self, step: Step) -> Step {
        if !self.spec().suspend || is_finished(step.phase) || step.phase == Phase::Suspended {
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
}
