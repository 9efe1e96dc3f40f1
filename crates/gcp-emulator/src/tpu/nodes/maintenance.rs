//! Maintenance events of TPU nodes: the `upcomingMaintenance` notice (the `ScheduleMaintenance`
//! fault), the maintenance itself at the window's start (or at once through v2alpha1
//! `nodes.performMaintenance` / `nodes.simulateMaintenanceEvent`), and its end.
//!
//! While it runs the notice says `maintenanceStatus: ONGOING` and the node stays READY with
//! `health: UNHEALTHY_MAINTENANCE` (v2 `Node.health`: "The node is under maintenance/priority
//! boost caused rescheduling and will resume running once rescheduled"); its workload stops and
//! loses the steps since its newest checkpoint. At the end the notice is gone, the node is
//! HEALTHY and the workload starts again from its newest checkpoint.

use super::*;
use crate::training::Notice;
use std::time::Duration;

/// The v2alpha1 Node type of the maintenance operations' `response`.
const ALPHA_NODE_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2alpha1.Node";

/// True while a maintenance event runs on the node (`maintenanceStatus: ONGOING`).
pub(super) fn under_maintenance(rec: &NodeRec) -> bool {
    rec.body["upcomingMaintenance"]["maintenanceStatus"] == "ONGOING"
}

/// `UpcomingMaintenance` as the v2 schema spells it (proto3 JSON: `canReschedule` only when
/// true). The window's latest start is its start: the emulator never defers it.
fn notice_body(n: &Notice, start: chrono::DateTime<chrono::Utc>, status: &str) -> Value {
    let mut v = json!({
        "type": if n.unscheduled { "UNSCHEDULED" } else { "SCHEDULED" },
        "windowStartTime": ts(start),
        "windowEndTime": ts(Cloud::add(start, n.duration)),
        "latestWindowStartTime": ts(start),
        "maintenanceStatus": status,
    });
    if n.can_reschedule {
        v["canReschedule"] = json!(true);
    }
    v
}

/// The fault: announces a maintenance event and arms its timer at the window's start. A notice
/// still pending is replaced; a maintenance under way cannot be.
pub fn schedule_maintenance(w: &mut Cloud, tpu: &mut Tpu, name: &str, n: Notice) -> ApiResult<()> {
    let rec = tpu.nodes.find(name, not_found)?;
    if under_maintenance(rec) {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" is already under maintenance"
        )));
    }
    let start = Cloud::add(w.now, n.start_in);
    let timer = w.schedule(start, TimerKind::NodeMaintenance, name);
    let rec = tpu.nodes.find_mut(name, not_found)?;
    rec.body["upcomingMaintenance"] = notice_body(&n, start, "PENDING");
    rec.run.maintenance_timer = Some(timer);
    rec.run.maintenance_len = n.duration;
    Ok(())
}

/// The maintenance timer: the window starts (PENDING), or the maintenance ends (ONGOING).
pub fn fire_maintenance(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    if rec.run.maintenance_timer != Some(seq) {
        return;
    }
    rec.run.maintenance_timer = None;
    if under_maintenance(rec) {
        end(w, tpu, name);
    } else {
        begin(w, tpu, name);
    }
}

/// The maintenance starts now: ONGOING, UNHEALTHY_MAINTENANCE while READY, the workload stopped.
fn begin(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get(name) else { return };
    let end = Cloud::add(w.now, rec.run.maintenance_len);
    let timer = w.schedule(end, TimerKind::NodeMaintenance, name);
    let paused = interrupt(w, tpu, name, Cause::Maintenance);
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    let notice = &mut rec.body["upcomingMaintenance"];
    notice["maintenanceStatus"] = json!("ONGOING");
    notice["windowStartTime"] = json!(ts(w.now));
    notice["windowEndTime"] = json!(ts(end));
    if rec.state() == "READY" {
        rec.body["health"] = json!("UNHEALTHY_MAINTENANCE");
    }
    rec.run.maintenance_timer = Some(timer);
    rec.run.paused = paused.or(rec.run.paused);
}

/// The maintenance is over: no notice, HEALTHY while READY, the workload restarted, the
/// operation that started it (if any) done with the node.
fn end(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    if let Some(m) = rec.body.as_object_mut() {
        m.remove("upcomingMaintenance");
    }
    if rec.state() == "READY" {
        rec.body["health"] = json!("HEALTHY");
    }
    let op = rec.run.maintenance_op.take();
    let mut node = rec.body.clone();
    // One `performMaintenanceQueuedResource` operation covers every node it named: done when
    // the last of their maintenances is over.
    let shared = |op: &String| {
        tpu.nodes
            .under("")
            .any(|(_, r)| r.run.maintenance_op.as_ref() == Some(op))
    };
    if let Some(op) = op.filter(|op| !shared(op)) {
        if let Some(m) = node.as_object_mut() {
            m.remove("health");
        }
        lro::finish_ok(&mut w.ops, w.now, &op, lro::any(ALPHA_NODE_TYPE, &node));
    }
    resume(w, tpu, name);
    // A workload that was to start during the maintenance (its node became READY then).
    maybe_schedule_workload(w, tpu, name);
}

/// Fails the maintenance operation of a node that goes away before its maintenance ends.
pub(super) fn abandon_maintenance(w: &mut Cloud, rec: &mut NodeRec, name: &str) {
    rec.run.maintenance_timer = None;
    if let Some(op) = rec.run.maintenance_op.take() {
        let err = ApiError::new(
            Code::Aborted,
            format!("TPU node \"{name}\" went away during maintenance"),
        );
        lro::finish_err(&mut w.ops, w.now, &op, &err);
    }
}

/// A v2alpha1 maintenance operation on `name`, pending until the maintenance ends.
fn start_op(w: &mut Cloud, tpu: &mut Tpu, name: &str, verb: &str) -> Value {
    let parent = name.split("/nodes/").next().unwrap_or_default().to_string();
    let op_name = tpu_op_name(w, &parent);
    let mut meta = op_metadata(w.now, name, verb);
    meta["apiVersion"] = json!("v2alpha1");
    let op = lro::start(&mut w.ops, Svc::Tpu, op_name.clone(), meta);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.run.maintenance_op = Some(op_name);
    }
    op
}

fn require_ready(rec: &NodeRec, name: &str) -> ApiResult<()> {
    if rec.state() != "READY" {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" is in state {}; maintenance needs a READY node",
            rec.state()
        )));
    }
    Ok(())
}

/// Refuses what the API refuses of a maintenance started by the customer: a node that is not
/// READY, or whose maintenance is not pending or may not be moved (`canReschedule`).
pub(crate) fn check_reschedulable(tpu: &Tpu, name: &str) -> ApiResult<()> {
    let rec = tpu.nodes.find(name, not_found)?;
    require_ready(rec, name)?;
    let notice = &rec.body["upcomingMaintenance"];
    if notice["maintenanceStatus"] != "PENDING" {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" has no pending maintenance (no upcomingMaintenance with maintenanceStatus PENDING)"
        )));
    }
    if notice["canReschedule"] != true {
        return Err(ApiError::precondition(format!(
            "The maintenance of TPU node \"{name}\" cannot be rescheduled (upcomingMaintenance.canReschedule is false)"
        )));
    }
    Ok(())
}

/// Starts node `name`'s pending maintenance now (checked by [`check_reschedulable`]), under
/// the operation `op` that is done when it is over.
pub(crate) fn start_maintenance(w: &mut Cloud, tpu: &mut Tpu, name: &str, op: &str) {
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.run.maintenance_op = Some(op.to_string());
    }
    begin(w, tpu, name);
}

/// v2alpha1 `nodes.performMaintenance`: starts a pending maintenance the customer may trigger
/// (`canReschedule`) now; the operation is done when it ends.
pub fn perform_maintenance(w: &mut Cloud, tpu: &mut Tpu, name: &str, body: &Value) -> ApiResult<Reply> {
    tpu.nodes.find(name, not_found)?;
    schema::validate(Svc::Tpu, "PerformMaintenanceRequest", body, "")?;
    check_reschedulable(tpu, name)?;
    let op = start_op(w, tpu, name, "performMaintenance");
    begin(w, tpu, name);
    Ok(Reply::op(op))
}

/// v2alpha1 `nodes.simulateMaintenanceEvent`: an UNSCHEDULED maintenance starts now and lasts
/// `durations.maintenance`; the operation is done when it ends. `workerIds` must name workers of
/// the node (the API fires the event on the first one; the emulator maintains the whole node).
pub fn simulate_maintenance(w: &mut Cloud, tpu: &mut Tpu, name: &str, body: &Value) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    let req = schema::validate(Svc::Tpu, "SimulateMaintenanceEventRequest", body, "")?;
    for id in req["workerIds"].as_array().into_iter().flatten() {
        let id = id.as_str().unwrap_or_default();
        if !id.parse::<u32>().is_ok_and(|i| i < rec.hosts) {
            return Err(ApiError::invalid_field(
                "worker_ids",
                format!(
                    "Invalid value at 'worker_ids': \"{id}\" is not a worker of {name} (0..{})",
                    rec.hosts
                ),
            ));
        }
    }
    require_ready(rec, name)?;
    if under_maintenance(rec) {
        return Err(ApiError::precondition(format!(
            "TPU node \"{name}\" is already under maintenance"
        )));
    }
    let n = Notice {
        start_in: Duration::ZERO,
        duration: w.cfg.durations.maintenance,
        can_reschedule: false,
        unscheduled: true,
    };
    let rec = tpu.nodes.find_mut(name, not_found)?;
    rec.body["upcomingMaintenance"] = notice_body(&n, w.now, "PENDING");
    rec.run.maintenance_len = n.duration;
    let op = start_op(w, tpu, name, "simulateMaintenanceEvent");
    begin(w, tpu, name);
    Ok(Reply::op(op))
}
