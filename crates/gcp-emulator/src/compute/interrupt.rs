//! What happens to a Compute Engine VM's running workload besides its own checkpoints, as on TPU
//! nodes (`tpu::nodes::interrupt`): an interruption (maintenance, preemption, deletion) that
//! loses the steps since its newest committed checkpoint, its restart after maintenance, and a
//! checkpoint requested through `instances.setMetadata` (`tpu-operator-checkpoint-request`).

use super::ComputeState;
use super::workload::{checkpoint_dir, log, metadata, schedule_step};
use crate::cloud::Cloud;
use crate::faults::name_matches;
use crate::logging::workloads::INFO;
use crate::outputs::{CHECKPOINT_REQUEST_KEY, committed_step, write_checkpoint_at};
use crate::training::{Cause, CheckpointRequest, Progress, WorkloadInterruption};
use std::time::Duration;

/// Stops the VM's running workload for `cause` and records the steps it loses. Returns the run
/// time it still has ahead, the time to redo since its newest checkpoint included; `None` when
/// none was running.
pub fn interrupt(w: &mut Cloud, ce: &mut ComputeState, key: &str, cause: Cause) -> Option<Duration> {
    let r = ce.instances.get(key)?;
    let progress = r.run.progress?;
    let left = r
        .workload_end
        .map_or(Duration::ZERO, |end| (end - w.now).to_std().unwrap_or_default());
    let every = w.cfg.durations.workload_checkpoint;
    let committed = checkpoint_dir(ce, key).map_or(0, |dir| committed_step(w, &dir));
    let step = progress.step_at(w.now, every);
    w.training.interruptions.push(WorkloadInterruption {
        node: key.to_string(),
        at: w.now,
        cause,
        step_at_interruption: step,
        committed_step: committed,
        steps_lost: step.saturating_sub(committed),
    });
    let r = ce.instances.get_mut(key)?;
    r.workload_seq = 0;
    r.run.progress = None;
    Some(left + progress.redone(committed, w.now, every))
}

/// The maintenance is over: a workload it stopped starts again from the newest complete
/// checkpoint, with the run time it had left.
pub fn resume(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.instances.get_mut(key) else {
        return;
    };
    let Some(left) = r.run.paused.take() else { return };
    if r.status() != "RUNNING" {
        return;
    }
    r.workload_end = Some(Cloud::add(w.now, left));
    let s0 = checkpoint_dir(ce, key).map_or(0, |dir| committed_step(w, &dir));
    if let Some(r) = ce.instances.get_mut(key) {
        r.run.progress = Some(Progress { t0: w.now, s0 });
    }
    if w.cfg.simulate_outputs {
        let line = format!("Workload container started (restored from step {s0})");
        log(w, ce, key, INFO, &line);
    }
    schedule_step(w, ce, key);
}

/// After `instances.setMetadata`: a new, non-empty `tpu-operator-checkpoint-request` value
/// (`before` is the previous one) makes a running workload whose startup script watches that
/// key write the checkpoint of its current step now and go on from it.
pub fn checkpoint_request(w: &mut Cloud, ce: &mut ComputeState, key: &str, before: Option<&str>) {
    let Some(r) = ce.instances.get(key) else { return };
    let value = metadata(ce, key, CHECKPOINT_REQUEST_KEY).unwrap_or_default();
    let script = metadata(ce, key, "startup-script").unwrap_or_default();
    let name = r.body["name"].as_str().unwrap_or_default();
    let writes = w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name);
    if value.is_empty()
        || before == Some(value)
        || r.status() != "RUNNING"
        || !script.contains(CHECKPOINT_REQUEST_KEY)
        || !writes
    {
        return;
    }
    let (Some(progress), Some(dir)) = (r.run.progress, checkpoint_dir(ce, key)) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let step = progress.step_at(w.now, every);
    if write_checkpoint_at(w, &dir, step) {
        let line = format!("step {step}: checkpoint saved to {dir}{step}/ (requested)");
        log(w, ce, key, INFO, &line);
    }
    w.training.checkpoint_requests.push(CheckpointRequest {
        node: key.to_string(),
        at: w.now,
        step,
    });
    let redone = progress.redone(step, w.now, every);
    if let Some(r) = ce.instances.get_mut(key) {
        r.run.progress = Some(Progress { t0: w.now, s0: step });
        r.workload_end = r.workload_end.map(|end| Cloud::add(end, redone));
    }
    schedule_step(w, ce, key);
}
