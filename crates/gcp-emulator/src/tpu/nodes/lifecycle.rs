//! The node state machine: delete / stop / start, the timer that completes each transition, and
//! preemption.

use super::*;

pub(super) fn transition(
    w: &mut Cloud,
    tpu: &mut Tpu,
    name: &str,
    verb: &str,
    to: &str,
    d: std::time::Duration,
) -> ApiResult<Reply> {
    let parent = name.split("/nodes/").next().unwrap_or_default().to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, verb),
    );
    let timer = w.schedule(Cloud::add(w.now, d), TimerKind::Node, name);
    // A workload running on the node stops (a start finds none running).
    let cause = if verb == "delete" {
        Cause::Deletion
    } else {
        Cause::Stop
    };
    interrupt(w, tpu, name, cause);
    let rec = tpu.nodes.find_mut(name, not_found)?;
    // An operation still waiting on the previous transition is superseded: it fails ABORTED.
    let previous = rec.op.replace(op_name);
    rec.body["state"] = json!(to);
    if let Some(m) = rec.body.as_object_mut() {
        m.remove("health");
    }
    rec.timer = Some(timer);
    rec.workload_timer = None;
    // A workload stopped by maintenance does not restart on a node going down.
    rec.run.paused = None;
    if let Some(prev) = previous {
        let err = ApiError::new(Code::Aborted, format!("Operation superseded by {verb} of {name}"));
        lro::finish_err(&mut w.ops, w.now, &prev, &err);
    }
    Ok(Reply::op(op))
}

pub fn delete(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    if rec.state() == "DELETING" {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" is already being deleted"
        )));
    }
    let d = w.cfg.durations.tpu_delete;
    transition(w, tpu, name, "delete", "DELETING", d)
}

pub fn stop(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    if rec.hosts > 1 {
        return Err(ApiError::precondition(format!(
            "Stop is only available with single TPU nodes; \"{name}\" has {} hosts",
            rec.hosts
        )));
    }
    if rec.state() != "READY" {
        return Err(ApiError::precondition(format!(
            "Cannot stop TPU node \"{name}\" in state {}",
            rec.state()
        )));
    }
    let d = w.cfg.durations.tpu_stop;
    transition(w, tpu, name, "stop", "STOPPING", d)
}

pub fn start(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    if rec.state() != "STOPPED" {
        return Err(ApiError::precondition(format!(
            "Cannot start TPU node \"{name}\" in state {}",
            rec.state()
        )));
    }
    let d = w.cfg.durations.tpu_start;
    transition(w, tpu, name, "start", "STARTING", d)
}

/// State-machine step for a node.
pub fn fire(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    if rec.timer != Some(seq) {
        return;
    }
    rec.timer = None;
    let op = rec.op.take();
    // A create accepted under a `CapacityError { shape: operation }`: the operation fails with
    // RESOURCE_EXHAUSTED (code 8) and its details, and the node does not stay.
    if rec.state() == "CREATING"
        && let Some(err) = w.faults.doomed_creates.remove(name)
    {
        tpu.nodes.remove(name);
        if let Some(op) = op {
            lro::finish_err(&mut w.ops, w.now, &op, &err);
        }
        return;
    }
    match rec.state().to_string().as_str() {
        "CREATING" | "STARTING" => {
            rec.body["state"] = json!("READY");
            let health = if under_maintenance(rec) {
                "UNHEALTHY_MAINTENANCE"
            } else {
                "HEALTHY"
            };
            rec.body["health"] = json!(health);
            let resp = op_copy(rec);
            if let Some(op) = op {
                lro::finish_ok(&mut w.ops, w.now, &op, resp);
            }
            maybe_schedule_workload(w, tpu, name);
        }
        "STOPPING" => {
            rec.body["state"] = json!("STOPPED");
            let resp = op_copy(rec);
            if let Some(op) = op {
                lro::finish_ok(&mut w.ops, w.now, &op, resp);
            }
        }
        "DELETING" => {
            abandon_maintenance(w, rec, name);
            tpu.nodes.remove(name);
            if let Some(op) = op {
                lro::finish_ok(&mut w.ops, w.now, &op, json!({"@type": lro::EMPTY}));
            }
        }
        _ => {}
    }
}

/// Fault: preempt a spot / preemptible node now.
pub fn preempt(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<()> {
    let rec = tpu.nodes.find_mut(name, not_found)?;
    let qr = rec.body["queuedResource"].as_str().map(str::to_string);
    if let Some(qr) = qr {
        return crate::tpu::queued::preempt(w, tpu, &qr);
    }
    if !rec.is_spot() {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" is neither spot nor preemptible"
        )));
    }
    mark_preempted(w, tpu, name);
    Ok(())
}

pub fn mark_preempted(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    interrupt(w, tpu, name, Cause::Preemption);
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    rec.run.paused = None;
    rec.body["state"] = json!("PREEMPTED");
    if let Some(m) = rec.body.as_object_mut() {
        m.remove("health");
    }
    rec.timer = None;
    rec.workload_timer = None;
    if let Some(op) = rec.op.take() {
        lro::finish_err(
            &mut w.ops,
            w.now,
            &op,
            &ApiError::new(Code::Aborted, format!("TPU node \"{name}\" was preempted")),
        );
    }
}

/// Starts deleting a node without an operation (queued resource teardown).
pub fn delete_quietly(w: &mut Cloud, tpu: &mut Tpu, name: &str, d: std::time::Duration) {
    if !tpu.nodes.contains_key(name) {
        return;
    }
    let t = w.schedule(Cloud::add(w.now, d), TimerKind::Node, name);
    interrupt(w, tpu, name, Cause::Deletion);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.run.paused = None;
        rec.body["state"] = json!("DELETING");
        if let Some(m) = rec.body.as_object_mut() {
            m.remove("health");
        }
        rec.timer = Some(t);
        rec.workload_timer = None;
    }
}
