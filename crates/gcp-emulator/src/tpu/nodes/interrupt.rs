//! What happens to a node's running workload besides its own checkpoints: an interruption
//! (maintenance, preemption, deletion, stop) that loses the steps since its newest committed
//! checkpoint, its restart after maintenance, and a checkpoint the operator requests through the
//! node's metadata (`tpu-operator-checkpoint-request`).

use super::*;
use crate::training::{CheckpointRequest, WorkloadInterruption};
use std::time::Duration;

/// True while the node's workload container runs (started, not ended, not interrupted).
fn running(rec: &NodeRec) -> bool {
    rec.workload_timer.is_some() && !rec.workload_done && rec.run.progress.is_some()
}

/// Stops the node's running workload for `cause` and records the steps it loses (those since
/// the newest complete checkpoint in its `CHECKPOINT_DIR`). Returns the run time it still has
/// ahead, the time to redo since that checkpoint included; `None` when none was running.
pub(super) fn interrupt(w: &mut Cloud, tpu: &mut Tpu, name: &str, cause: Cause) -> Option<Duration> {
    if !running(tpu.nodes.get(name)?) {
        return None;
    }
    if matches!(cause, Cause::Preemption | Cause::Deletion | Cause::Stop) {
        stop_peers(w, tpu, name);
    }
    let rec = tpu.nodes.get(name)?;
    let progress = rec.run.progress?;
    let left = rec
        .workload_end
        .map_or(Duration::ZERO, |end| (end - w.now).to_std().unwrap_or_default());
    let every = w.cfg.durations.workload_checkpoint;
    let committed = checkpoint_dir(tpu, name).map_or(0, |dir| committed_step(w, &dir));
    let step = progress.step_at(w.now, every);
    w.training.interruptions.push(WorkloadInterruption {
        node: name.to_string(),
        at: w.now,
        cause,
        step_at_interruption: step,
        committed_step: committed,
        steps_lost: step.saturating_sub(committed),
    });
    let rec = tpu.nodes.get_mut(name)?;
    rec.workload_timer = None;
    rec.run.progress = None;
    Some(left + progress.redone(committed, w.now, every))
}

/// A multislice run (the nodes whose containers got the same `MEGASCALE_COORDINATOR_ADDRESS`)
/// cannot go on without one of its slices: when `lost`'s container stops for good, the others'
/// stop too (their collectives never complete), with the run time they had left kept for when
/// they are started again (`waited_attributes`).
fn stop_peers(w: &mut Cloud, tpu: &mut Tpu, lost: &str) {
    let run_of = |rec: &NodeRec| {
        rec.workload_env
            .as_ref()
            .and_then(|env| env.get("MEGASCALE_COORDINATOR_ADDRESS").cloned())
    };
    let Some(run) = tpu.nodes.get(lost).and_then(run_of) else {
        return;
    };
    let peers: Vec<String> = tpu
        .nodes
        .iter()
        .filter(|(name, rec)| name.as_str() != lost && running(rec) && run_of(rec).as_ref() == Some(&run))
        .map(|(name, _)| name.clone())
        .collect();
    for peer in peers {
        let left = interrupt(w, tpu, &peer, Cause::Restart);
        if let Some(rec) = tpu.nodes.get_mut(&peer) {
            rec.run.paused = left;
        }
    }
}

/// The maintenance is over: a workload it stopped starts again, as the startup script does at
/// boot, from the newest complete checkpoint, with the run time it had left.
pub(super) fn resume(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    let Some(left) = rec.run.paused.take() else { return };
    if rec.state() != "READY" || rec.workload_done {
        return;
    }
    let script = rec.body["metadata"]["startup-script"]
        .as_str()
        .unwrap_or_default();
    if let Some(env) = container_env(script, &rec.body["metadata"]) {
        rec.workload_env = Some(env);
    }
    rec.workload_end = Some(Cloud::add(w.now, left));
    let s0 = checkpoint_dir(tpu, name).map_or(0, |dir| committed_step(w, &dir));
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.run.progress = Some(Progress { t0: w.now, s0 });
    }
    let line = format!("Workload container started (restored from step {s0})");
    workload_log(w, tpu, name, INFO, &line);
    schedule_workload_step(w, tpu, name);
}

/// After a metadata patch: a startup script that waits for metadata attributes before it runs
/// its container (a multislice node's slice id and coordinator) stops a running container when
/// one is taken off, losing the steps since its newest checkpoint, and runs it again from that
/// checkpoint, with the run time it had left, once all are back.
pub(super) fn waited_attributes(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get(name) else { return };
    let script = rec.body["metadata"]["startup-script"]
        .as_str()
        .unwrap_or_default();
    let waits = container_env(script, &rec.body["metadata"]).is_none();
    if waits && running(rec) {
        let left = interrupt(w, tpu, name, Cause::Restart);
        if let Some(rec) = tpu.nodes.get_mut(name) {
            rec.run.paused = left;
        }
    } else if !waits && rec.run.paused.is_some() && !under_maintenance(rec) {
        resume(w, tpu, name);
    }
}

/// After a metadata patch: a new, non-empty `tpu-operator-checkpoint-request` value (`before`
/// is the previous one) asks the running workload for a checkpoint now, which it writes when its
/// startup script watches that key. The container then goes on from that checkpoint (no steps
/// lost); its periodic checkpoints keep their interval from there.
pub(super) fn checkpoint_request(w: &mut Cloud, tpu: &mut Tpu, name: &str, before: Option<&str>) {
    let Some(rec) = tpu.nodes.get(name) else { return };
    let value = rec.body["metadata"][CHECKPOINT_REQUEST_KEY]
        .as_str()
        .unwrap_or_default();
    let script = rec.body["metadata"]["startup-script"]
        .as_str()
        .unwrap_or_default();
    let writes = w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name);
    if value.is_empty()
        || before == Some(value)
        || rec.state() != "READY"
        || !running(rec)
        || !script.contains(CHECKPOINT_REQUEST_KEY)
        || !writes
    {
        return;
    }
    let (Some(progress), Some(dir)) = (rec.run.progress, checkpoint_dir(tpu, name)) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let step = progress.step_at(w.now, every);
    if write_checkpoint_at(w, &dir, step) {
        let line = format!("step {step}: checkpoint saved to {dir}{step}/ (requested)");
        workload_log(w, tpu, name, INFO, &line);
    }
    w.training.checkpoint_requests.push(CheckpointRequest {
        node: name.to_string(),
        at: w.now,
        step,
    });
    // Restarted from that checkpoint: the part of a step made since it is done again.
    let redone = progress.redone(step, w.now, every);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.run.progress = Some(Progress { t0: w.now, s0: step });
        rec.workload_end = rec.workload_end.map(|end| Cloud::add(end, redone));
    }
    schedule_workload_step(w, tpu, name);
}
