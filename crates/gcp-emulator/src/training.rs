//! The step model of a simulated training workload, and the records of what happened to it.
//!
//! A running workload started (or restarted) at `t0` from committed step `s0` is at step
//! `s0 + floor((now - t0) / workloadCheckpoint × STEPS_PER_CHECKPOINT)`: its steps advance
//! continuously, its periodic checkpoints write the step it has reached, and an interruption
//! (maintenance, preemption, deletion, stop) loses the steps made since its newest committed
//! checkpoint. The records ([`WorkloadInterruption`], [`CheckpointRequest`]) let tests measure
//! the steps lost. Shared by the services that run simulated training (TPU VM nodes).

use crate::outputs::STEPS_PER_CHECKPOINT;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where a running workload's step count starts: at `t0` it was at step `s0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub t0: DateTime<Utc>,
    pub s0: u64,
}

impl Progress {
    /// The step reached at `now` with one checkpoint every `every` (`0s`: a hung run, whose
    /// step does not move).
    pub fn step_at(&self, now: DateTime<Utc>, every: Duration) -> u64 {
        let every = every.as_nanos();
        let elapsed = (now - self.t0).to_std().unwrap_or_default().as_nanos();
        if every == 0 {
            return self.s0;
        }
        let steps = elapsed * u128::from(STEPS_PER_CHECKPOINT) / every;
        self.s0 + u64::try_from(steps).unwrap_or(u64::MAX - self.s0)
    }

    /// The run time, since `t0`, after which `step` was reached (0 for a step before `s0`).
    fn time_to(&self, step: u64, every: Duration) -> Duration {
        let steps = u128::from(step.saturating_sub(self.s0));
        let nanos = steps * every.as_nanos() / u128::from(STEPS_PER_CHECKPOINT);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The run time a restart from `committed` at `now` does again: the time since the
    /// workload passed `committed` (everything since `t0` when it never did in this run, or
    /// when its step does not move).
    pub fn redone(&self, committed: u64, now: DateTime<Utc>, every: Duration) -> Duration {
        let elapsed = (now - self.t0).to_std().unwrap_or_default();
        elapsed.saturating_sub(self.time_to(committed, every))
    }
}

/// Where the simulated workload of a TPU node or Compute Engine VM stands, and the machine's
/// maintenance event.
#[derive(Clone, Debug, Default)]
pub struct RunState {
    /// Where the running workload's step count starts; `None` while it does not run.
    pub progress: Option<Progress>,
    /// Run time still ahead of a workload that maintenance stopped (it restarts at the end).
    pub paused: Option<std::time::Duration>,
    /// The maintenance timer: the window's start, then the maintenance's end.
    pub maintenance_timer: Option<u64>,
    /// The operation (performMaintenance / simulateMaintenanceEvent) done at the end.
    pub maintenance_op: Option<String>,
    /// How long the maintenance lasts once it starts.
    pub maintenance_len: std::time::Duration,
}

/// A maintenance event announced on a TPU node or a Compute Engine VM
/// ([`crate::Fault::ScheduleMaintenance`]).
#[derive(Clone, Copy, Debug)]
pub struct Notice {
    /// From now to the window's start (emulated time).
    pub start_in: Duration,
    /// How long the maintenance lasts.
    pub duration: Duration,
    /// `canReschedule`: the customer may start it earlier with `performMaintenance`.
    pub can_reschedule: bool,
    /// `type: UNSCHEDULED` rather than SCHEDULED.
    pub unscheduled: bool,
}

/// Why a running workload stopped.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    /// A maintenance event started on its node.
    Maintenance,
    /// Its Spot / preemptible node (or queued resource) was preempted.
    Preemption,
    /// Its node was deleted while the workload ran.
    Deletion,
    /// Its node was stopped while the workload ran.
    Stop,
    /// A multislice run lost one of its slices (its peers stop with it), or its startup script
    /// stopped it because an attribute it waits for was taken off the node's metadata (the
    /// operator takes the coordinator's address off a multislice's nodes while it replaces a lost
    /// slice). It runs again, from its newest checkpoint, once the attribute is back.
    Restart,
}

/// One interruption of a running simulated workload.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadInterruption {
    /// The TPU node (full name).
    pub node: String,
    pub at: DateTime<Utc>,
    pub cause: Cause,
    /// The step the workload had reached.
    pub step_at_interruption: u64,
    /// The newest complete checkpoint (with `_CHECKPOINT_METADATA`) in its `CHECKPOINT_DIR`;
    /// 0 when there is none.
    pub committed_step: u64,
    /// `step_at_interruption - committed_step`: what the workload computes again.
    pub steps_lost: u64,
}

/// A checkpoint request the workload honoured (metadata `tpu-operator-checkpoint-request`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRequest {
    pub node: String,
    pub at: DateTime<Utc>,
    /// The step of the checkpoint it committed.
    pub step: u64,
}

/// What simulated workloads went through, oldest first (kept until a reset).
#[derive(Clone, Debug, Default)]
pub struct TrainingLog {
    pub interruptions: Vec<WorkloadInterruption>,
    pub checkpoint_requests: Vec<CheckpointRequest>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn steps_advance_continuously_from_the_committed_step() {
        let every = Duration::from_secs(120);
        let p = Progress { t0: at(0), s0: 200 };
        assert_eq!(p.step_at(at(0), every), 200);
        assert_eq!(p.step_at(at(120), every), 300);
        // 299 s: 299 / 120 × 100 = 249.17 → 249.
        assert_eq!(p.step_at(at(299), every), 449);
        assert_eq!(p.step_at(at(300), every), 450);
        // A hung run (no checkpoints) does not move.
        assert_eq!(p.step_at(at(300), Duration::ZERO), 200);
    }

    #[test]
    fn redone_time_is_the_run_time_since_the_committed_step() {
        let every = Duration::from_secs(120);
        let p = Progress { t0: at(0), s0: 0 };
        // At 300 s (step 250) with step 200 committed (reached at 240 s): 60 s again.
        assert_eq!(p.redone(200, at(300), every), Duration::from_secs(60));
        // Nothing committed in this run: all of it again.
        assert_eq!(p.redone(0, at(300), every), Duration::from_secs(300));
        assert_eq!(p.redone(250, at(300), every), Duration::ZERO);
        assert_eq!(p.redone(0, at(300), Duration::ZERO), Duration::from_secs(300));
    }
}
