//! The simulated training container on Compute Engine TPU VMs, as on TPU nodes
//! (`tpu::nodes::fire_workload`; the two share `outputs.rs`): an instance that reaches RUNNING with metadata
//! `tpu-operator-done-uri` (the operator's generated startup script) writes a checkpoint every
//! `workload_checkpoint` while it runs (when its script passes `CHECKPOINT_DIR`) and, after
//! `tpu_workload`, `<uri>_SUCCESS` (or `_FAILED` for a `FailWorkload` fault naming it). Every
//! host of a multi-host slice runs the same container; the marker is written once per host.

use super::ComputeState;
use crate::cloud::{Cloud, TimerKind};
use crate::faults::name_matches;
use crate::outputs::{DONE_URI_KEY, checkpoint_dir_in, write_checkpoint_to};

fn metadata<'a>(ce: &'a ComputeState, key: &str, item: &str) -> Option<&'a str> {
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
    if let Some(r) = ce.instances.get_mut(key) {
        r.workload_end = Some(end);
    }
    schedule_step(w, ce, key);
}

fn schedule_step(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(end) = ce.instances.get(key).and_then(|r| r.workload_end) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let has_dir = metadata(ce, key, "startup-script")
        .and_then(checkpoint_dir_in)
        .is_some();
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
        if !silent && let Some(dir) = metadata(ce, key, "startup-script").and_then(checkpoint_dir_in) {
            write_checkpoint_to(w, &dir);
        }
        schedule_step(w, ce, key);
        return;
    }
    let Some(uri) = metadata(ce, key, DONE_URI_KEY).map(str::to_string) else {
        return;
    };
    if let Some(r) = ce.instances.get_mut(key) {
        r.workload_end = None;
    }
    if !silent {
        let failed = crate::faults::matching(&w.faults.failing_workloads, &name).copied();
        crate::outputs::tpu_workload_done(w, &uri, failed);
    }
}
