//! After the run: releasing what a finished pipeline holds, starting another run (raised
//! `maxRetries`, the rerun annotation), TTL reaping, and suspend.

use tpu_operator_api::{
    conditions::{Progress, find_condition, reasons, types},
    duration::parse_duration,
    training_pipeline::{
        KeptSlice, RERUN_ANNOTATION, RerunStatus, StageName, StageState, TrainingMode,
        TrainingPipelinePhase as Phase,
    },
};

use super::{
    Action, Child, Planner, Requeue, Step, TrainingObserved,
    status::{self, time},
};

/// Event reason of a new run started by the rerun annotation.
pub const RERUN: &str = "Rerun";

/// Event reason of a failed run's slice kept for debugging.
pub const SLICE_KEPT: &str = "SliceKept";

impl Planner<'_> {
    /// Succeeded or Failed: release what training still holds, start another run when one is
    /// asked for, then reap after the TTL.
    pub(super) fn finished(&mut self, mode: TrainingMode) -> Step {
        // Finished by the stored phase: the record holds none.
        let phase = self.old().phase;
        let keep = |action, requeue| Step {
            phase,
            kstatus: None,
            action,
            requeue,
        };
        if let TrainingObserved::TpuVm { slice, .. } = &self.input.observed.training {
            if slice.holds_cloud_resources() {
                if let Some(left) = self.kept_for() {
                    return keep(Action::Nothing, Requeue::After(left));
                }
                return keep(Action::DeleteSlice, Requeue::Active);
            }
            if *slice == Child::Deleting {
                return keep(Action::Nothing, Requeue::Active);
            }
            // Kept as a record (not removed: a status field a server-side apply stops sending
            // leaves an empty object behind, which the schema's required fields refuse).
            if let Some(kept) = self.record.kept_slice.as_mut() {
                kept.released_time.get_or_insert_with(|| time(self.input.now));
            }
        }
        if let Some(step) = self.reopen(mode) {
            return step;
        }
        let (Some(ttl), Some(done), None) = (
            self.spec().ttl_seconds_after_finished,
            self.record.completion_time.as_ref(),
            self.record.reaped_time.as_ref(),
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
        if self.record.pending_operation.is_some() {
            match observed.pending_operation_done {
                Some(true) => self.record.pending_operation = None,
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
        self.record.reaped_time = Some(time(self.input.now));
        let progress = if phase == Phase::Succeeded {
            Progress::Ready
        } else {
            Progress::Stalled
        };
        let before = find_condition(&self.old().conditions, types::READY)
            .or_else(|| find_condition(&self.old().conditions, types::STALLED))
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

    /// The run failed with its slice still there: with `keepFailedSliceFor` set it is kept
    /// (`status.keptSlice`, a Normal `SliceKept` Event) instead of deleted, and the message says
    /// until when.
    pub(super) fn keep_failed_slice(&mut self, message: String) -> (String, Action) {
        let keep = self
            .spec()
            .training
            .tpu_vm
            .as_ref()
            .and_then(|t| t.keep_failed_slice_for.as_deref());
        let Some(keep) = keep.and_then(|k| parse_duration(k).ok()) else {
            return (message, Action::DeleteSlice);
        };
        let until = self.input.now + chrono::Duration::from_std(keep).unwrap_or_default();
        let name = self.input.train_child.to_string();
        self.record.kept_slice = Some(KeptSlice {
            name: name.clone(),
            until: time(until),
            released_time: None,
        });
        let kept = format!(
            "TpuSlice {name} is kept for debugging until {} (spec.training.tpuVm.keepFailedSliceFor; it bills until then)",
            until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        self.event(false, SLICE_KEPT, kept.clone());
        (format!("{message}; {kept}"), Action::Nothing)
    }

    /// How long the kept slice of a failed run is still kept: `None` once the time is up or a
    /// new run is asked for (the slice is released first).
    fn kept_for(&self) -> Option<std::time::Duration> {
        let kept = self
            .record
            .kept_slice
            .as_ref()
            .filter(|k| k.released_time.is_none())?;
        let until = status::to_chrono(&kept.until);
        if self.rerun_requested().is_some() || self.retries_raised() {
            return None;
        }
        (until - self.input.now)
            .to_std()
            .ok()
            .filter(|left| !left.is_zero())
    }

    /// Counted training attempts of the current run (earlier runs' do not count against
    /// `maxRetries`).
    pub(super) fn run_attempts(&self) -> i32 {
        let earlier = self.record.rerun.as_ref().map_or(0, |r| r.earlier_attempts);
        self.record.stage(StageName::Train).attempts - earlier
    }

    /// A rerun annotation value not acted on yet.
    fn rerun_requested(&self) -> Option<&str> {
        let value = self.input.rerun.filter(|v| !v.is_empty())?;
        (self.record.rerun.as_ref().map(|r| r.value.as_str()) != Some(value)).then_some(value)
    }

    /// Failed for `RetriesExhausted` and `maxRetries` now allows another attempt.
    fn retries_raised(&self) -> bool {
        let exhausted = find_condition(&self.old().conditions, types::STALLED)
            .is_some_and(|c| c.status == "True" && c.reason == reasons::RETRIES_EXHAUSTED);
        self.old().phase == Phase::Failed && exhausted && self.run_attempts() <= self.spec().max_retries
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
            let earlier_attempts = self.record.stage(StageName::Train).attempts;
            self.record.rerun = Some(RerunStatus {
                value: value.clone(),
                start_time: Some(now),
                earlier_attempts,
            });
            self.reset_run();
            let why = format!("re-run {value:?} requested ({RERUN_ANNOTATION})");
            self.event(false, RERUN, format!("{why}: starting a new run"));
            let pre = self.record.stage_mut(StageName::Preprocess);
            if !matches!(pre.state, StageState::Succeeded | StageState::Skipped) {
                // Preprocessing did not succeed: it runs again, then training.
                pre.state = StageState::Pending;
                pre.start_time = None;
                pre.end_time = None;
                pre.message = None;
                return Some(self.run(mode));
            }
            self.record.current_stage = Some(StageName::Train);
            return Some(self.start_attempt(self.record.attempts + 1, true, Some(why)));
        }
        if self.retries_raised() {
            let (attempts, max) = (self.run_attempts(), self.spec().max_retries);
            let why = format!("maxRetries raised to {max} after {attempts} failed attempts: resuming");
            self.event(false, reasons::RETRYING, why.clone());
            self.reset_run();
            self.record.current_stage = Some(StageName::Train);
            return Some(self.start_attempt(self.record.attempts + 1, true, Some(why)));
        }
        None
    }

    /// What a finished run recorded that the next one replaces.
    fn reset_run(&mut self) {
        self.record.completion_time = None;
        self.record.reaped_time = None;
        if let Some(outputs) = self.record.outputs.as_mut() {
            outputs.model_uri = None;
        }
        let train = self.record.stage_mut(StageName::Train);
        train.state = StageState::Pending;
        train.end_time = None;
    }
}
