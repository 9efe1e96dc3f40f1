//! After the run: releasing what a finished pipeline holds, TTL reaping, and suspend.

use tpu_operator_api::{
    conditions::{Progress, find_condition, reasons, types},
    training_pipeline::TrainingPipelinePhase as Phase,
};

use super::{
    Action, Child, Planner, Requeue, Step, TrainingObserved, is_finished,
    status::{self, time},
};

impl Planner<'_> {
    /// Succeeded or Failed: release what training still holds, then reap after the TTL.
    pub(super) fn finished(&mut self) -> Step {
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
    pub(super) fn apply_suspend(&mut self, step: Step) -> Step {
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
}
