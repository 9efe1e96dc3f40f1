//! The simulated training container on Compute Engine TPU VMs, as on TPU nodes
//! (`tpu::nodes::fire_workload`; the two share `outputs.rs`): an instance that reaches RUNNING with metadata
//! `tpu-operator-done-uri` (the operator's generated startup script) writes a checkpoint every
//! `workload_checkpoint` while it runs (when its script passes `CHECKPOINT_DIR`) and, after
//! `tpu_workload`, `<uri>_SUCCESS` (or `_FAILED` for a `FailWorkload` fault naming it). Every
//! host of a multi-host slice runs the same container; the marker is written once per host.

use super::ComputeState;
use crate::cloud::{Cloud, TimerKind};
use crate::faults::name_matches;
use crate::logging::workloads::INFO;
use crate::outputs::{DONE_URI_KEY, checkpoint_dir_in, committed_step, write_checkpoint_at};
use crate::training::Progress;

pub(super) fn metadata<'a>(ce: &'a ComputeState, key: &str, item: &str) -> Option<&'a str> {
    ce.instances.get(key)?.body["metadata"]["items"]
        .as_array()?
        .iter()
        .find(|i| i["key"] == item)?["value"]
        .as_str()
}

/// The instance became RUNNING: start its workload if it has one.
pub fn start(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    if metadata(ce, key, DONE_URI_KEY).is_none() {
        return;
    }
    let end = Cloud::add(w.now, w.cfg.durations.tpu_workload);
    // It resumes from the newest complete checkpoint (a VM recreated after a preemption).
    let s0 = checkpoint_dir(ce, key).map_or(0, |dir| committed_step(w, &dir));
    if let Some(r) = ce.instances.get_mut(key) {
        r.workload_end = Some(end);
        r.run.progress = Some(Progress { t0: w.now, s0 });
    }
    if w.cfg.simulate_outputs {
        log(w, ce, key, INFO, "Workload container started");
    }
    schedule_step(w, ce, key);
}

/// The `CHECKPOINT_DIR` the instance's startup script passes to its container.
pub(super) fn checkpoint_dir(ce: &ComputeState, key: &str) -> Option<String> {
    metadata(ce, key, "startup-script").and_then(checkpoint_dir_in)
}

pub(super) fn schedule_step(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(end) = ce.instances.get(key).and_then(|r| r.workload_end) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let has_dir = checkpoint_dir(ce, key).is_some();
    let at = if every.is_zero() || !has_dir {
        end
    } else {
        Cloud::add(w.now, every).min(end)
    };
    let seq = w.schedule(at, TimerKind::Compute, &format!("iw|{key}"));
    if let Some(r) = ce.instances.get_mut(key) {
        r.workload_seq = seq;
    }
}

/// The workload's next event: a checkpoint, or its exit.
pub fn fire(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some(r) = ce.instances.get(key) else {
        return;
    };
    if r.workload_seq != seq || r.status() != "RUNNING" {
        return;
    }
    let name = r.body["name"].as_str().unwrap_or_default().to_string();
    let silent = !w.cfg.simulate_outputs || name_matches(&w.faults.suppressed_outputs, &name);
    if r.workload_end.is_some_and(|end| w.now < end) {
        // The step reached (`crate::training`), not written twice.
        let step = r
            .run
            .progress
            .map(|p| p.step_at(w.now, w.cfg.durations.workload_checkpoint));
        if !silent
            && let (Some(dir), Some(step)) = (checkpoint_dir(ce, key), step)
            && write_checkpoint_at(w, &dir, step)
        {
            log(
                w,
                ce,
                key,
                INFO,
                &format!("step {step}: checkpoint saved to {dir}{step}/"),
            );
        }
        schedule_step(w, ce, key);
        return;
    }
    let Some(uri) = metadata(ce, key, DONE_URI_KEY).map(str::to_string) else {
        return;
    };
    if let Some(r) = ce.instances.get_mut(key) {
        r.workload_end = None;
        r.run.progress = None;
    }
    let failed = crate::faults::matching(&w.faults.failing_workloads, &name).copied();
    let error = crate::faults::matching(&w.faults.messages, &name).cloned();
    if w.cfg.simulate_outputs {
        for (severity, line) in crate::logging::workloads::exit_lines(failed, error.as_deref()) {
            log(w, ce, key, severity, &line);
        }
    }
    if !silent {
        crate::outputs::tpu_workload_done(w, &uri, failed);
    }
}

/// A line of the instance's workload container (one host), as docker's `gcplogs` driver writes
/// it (`logging::workloads`).
pub(super) fn log(w: &mut Cloud, ce: &ComputeState, key: &str, severity: i32, text: &str) {
    if let Some(script) = metadata(ce, key, "startup-script").map(str::to_string) {
        crate::logging::workloads::workload(w, key, &script, 1, severity, text);
    }
}
