//! Maintenance of Compute Engine VMs, as on TPU nodes (`tpu::nodes::maintenance`):
//! `resourceStatus.upcomingMaintenance` (the discovery document's `UpcomingMaintenance`, under
//! `Instance.resourceStatus`) announced by the `ScheduleMaintenance` fault, the maintenance at the
//! window's start or at once through `instances.performMaintenance` /
//! `instances.simulateMaintenanceEvent`, its end; and `instances.setMetadata`, through which the
//! operator asks the workload for a checkpoint.
//!
//! Assumed (not documented for TPU VMs): the VM stays RUNNING during the maintenance (its
//! workload stops and restarts at the end, as after a host event with `onHostMaintenance
//! TERMINATE` and automatic restart); `canReschedule: false` is served (Compute keeps fields at
//! their default); operation types `performMaintenance`, `simulateMaintenanceEvent`,
//! `setMetadata`.

use super::interrupt::{checkpoint_request, interrupt, resume};
use super::{ComputeState, Loc, errors, operations};
use crate::api::Req;
use crate::cloud::{Cloud, TimerKind};
use crate::errors::{ApiError, ApiResult};
use crate::outputs::CHECKPOINT_REQUEST_KEY;
use crate::training::{Cause, Notice};
use crate::wire::time::ts;
use serde_json::{Value, json};

fn notice_of(ce: &ComputeState, key: &str) -> Value {
    ce.instances
        .get(key)
        .map(|r| r.body["resourceStatus"]["upcomingMaintenance"].clone())
        .unwrap_or_default()
}

fn ongoing(ce: &ComputeState, key: &str) -> bool {
    notice_of(ce, key)["maintenanceStatus"] == "ONGOING"
}

fn set_notice(ce: &mut ComputeState, key: &str, n: &Notice, start: chrono::DateTime<chrono::Utc>) {
    let Some(r) = ce.instances.get_mut(key) else {
        return;
    };
    r.body["resourceStatus"]["upcomingMaintenance"] = json!({
        "type": if n.unscheduled { "UNSCHEDULED" } else { "SCHEDULED" },
        "canReschedule": n.can_reschedule,
        "windowStartTime": ts(start),
        "windowEndTime": ts(Cloud::add(start, n.duration)),
        "latestWindowStartTime": ts(start),
        "maintenanceStatus": "PENDING",
    });
    r.run.maintenance_len = n.duration;
}

/// The fault on a VM (`projects/p/zones/z/instances/i` or a unique bare name).
pub fn schedule(w: &mut Cloud, ce: &mut ComputeState, name: &str, n: Notice) -> ApiResult<()> {
    let key = super::instances::find_key(ce, name).ok_or_else(|| errors::not_found(name))?;
    if ongoing(ce, &key) {
        return Err(ApiError::precondition(format!(
            "instance {key} is already under maintenance"
        )));
    }
    let start = Cloud::add(w.now, n.start_in);
    let seq = w.schedule(start, TimerKind::Compute, &format!("im|{key}"));
    set_notice(ce, &key, &n, start);
    if let Some(r) = ce.instances.get_mut(&key) {
        r.run.maintenance_timer = Some(seq);
    }
    Ok(())
}

/// The maintenance timer: the window starts, or the maintenance ends.
pub fn fire(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some(r) = ce.instances.get_mut(key) else {
        return;
    };
    if r.run.maintenance_timer != Some(seq) {
        return;
    }
    r.run.maintenance_timer = None;
    if ongoing(ce, key) {
        end(w, ce, key);
    } else {
        begin(w, ce, key);
    }
}

fn begin(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.instances.get(key) else { return };
    let end = Cloud::add(w.now, r.run.maintenance_len);
    let seq = w.schedule(end, TimerKind::Compute, &format!("im|{key}"));
    let paused = interrupt(w, ce, key, Cause::Maintenance);
    let Some(r) = ce.instances.get_mut(key) else {
        return;
    };
    let notice = &mut r.body["resourceStatus"]["upcomingMaintenance"];
    notice["maintenanceStatus"] = json!("ONGOING");
    notice["windowStartTime"] = json!(ts(w.now));
    notice["windowEndTime"] = json!(ts(end));
    r.run.maintenance_timer = Some(seq);
    r.run.paused = paused.or(r.run.paused);
}

fn end(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.instances.get_mut(key) else {
        return;
    };
    if let Some(s) = r.body["resourceStatus"].as_object_mut() {
        s.remove("upcomingMaintenance");
    }
    if let Some(op) = r.run.maintenance_op.take() {
        operations::done(w, ce, &op);
    }
    resume(w, ce, key);
}

/// `instances.setMetadata`, `instances.performMaintenance`, `instances.simulateMaintenanceEvent`
/// on the instance `key` of `project`'s zonal `scope`.
pub fn call(
    method: &str,
    w: &mut Cloud,
    ce: &mut ComputeState,
    (project, scope, key): (&str, &str, &str),
    req: &Req,
) -> ApiResult<Value> {
    match method {
        "instances.setMetadata" => set_metadata(w, ce, project, scope, key, req),
        "instances.performMaintenance" => perform(w, ce, project, scope, key, req),
        _ => simulate(w, ce, project, scope, key, req),
    }
}

/// The zone of a zonal scope (`projects/p/zones/z`).
fn zone_of(scope: &str) -> Loc {
    Loc::Zone(scope.rsplit('/').next().unwrap_or_default().to_string())
}

/// `instances.performMaintenance`: a RUNNING VM's pending maintenance that `canReschedule`
/// starts now; the operation is DONE when it ends.
fn perform(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    key: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let r = ce.instances.find(key, errors::not_found)?;
    if r.status() != "RUNNING" {
        return Err(errors::not_ready(format!(
            "The instance '{key}' is {}, not RUNNING.",
            r.status()
        )));
    }
    let notice = notice_of(ce, key);
    if notice["maintenanceStatus"] != "PENDING" {
        return Err(errors::not_ready(format!(
            "The instance '{key}' has no pending maintenance (no resourceStatus.upcomingMaintenance with maintenanceStatus PENDING)."
        )));
    }
    if notice["canReschedule"] != true {
        return Err(errors::not_ready(format!(
            "The maintenance of instance '{key}' cannot be rescheduled (upcomingMaintenance.canReschedule is false)."
        )));
    }
    start_now(w, ce, (project, scope, key), req, "performMaintenance")
}

/// `instances.simulateMaintenanceEvent`: an UNSCHEDULED maintenance starts now on a RUNNING VM
/// for `durations.maintenance`; the operation is DONE when it ends.
fn simulate(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    key: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let r = ce.instances.find(key, errors::not_found)?;
    if r.status() != "RUNNING" || ongoing(ce, key) {
        return Err(errors::not_ready(format!(
            "The instance '{key}' is {} or already under maintenance.",
            r.status()
        )));
    }
    let n = Notice {
        start_in: std::time::Duration::ZERO,
        duration: w.cfg.durations.maintenance,
        can_reschedule: false,
        unscheduled: true,
    };
    set_notice(ce, key, &n, w.now);
    start_now(w, ce, (project, scope, key), req, "simulateMaintenanceEvent")
}

/// Starts the VM's maintenance now, under an operation of `verb` that is DONE when it ends.
fn start_now(
    w: &mut Cloud,
    ce: &mut ComputeState,
    (project, scope, key): (&str, &str, &str),
    req: &Req,
    verb: &str,
) -> ApiResult<Value> {
    let op = operations::start(w, ce, project, &zone_of(scope), verb, key);
    if let Some(r) = ce.instances.get_mut(key) {
        r.run.maintenance_op = Some(op.clone());
    }
    begin(w, ce, key);
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// `instances.setMetadata` (body `Metadata`): replaces the VM's metadata items when the body's
/// `fingerprint` is the VM's current one (412 `conditionNotMet` otherwise, as Compute answers a
/// write based on a stale read); a new checkpoint-request value reaches its workload.
fn set_metadata(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    key: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let current = ce.instances.find(key, errors::not_found)?.body["metadata"]["fingerprint"].clone();
    let body = super::validate("Metadata", req)?;
    if body["fingerprint"] != current {
        return Err(ApiError::condition_not_met(
            "Supplied fingerprint does not match current metadata fingerprint.",
        ));
    }
    let before = super::workload::metadata(ce, key, CHECKPOINT_REQUEST_KEY).map(str::to_string);
    let fingerprint = super::instances::metadata_fingerprint(w);
    if let Some(r) = ce.instances.get_mut(key) {
        r.body["metadata"]["items"] = body.get("items").cloned().unwrap_or_else(|| json!([]));
        r.body["metadata"]["fingerprint"] = json!(fingerprint);
    }
    checkpoint_request(w, ce, key, before.as_deref());
    let op = operations::start(w, ce, project, &zone_of(scope), "setMetadata", key);
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// Fails the maintenance operation of a VM that goes away before its maintenance ends.
pub fn abandon(w: &mut Cloud, ce: &mut ComputeState, op: Option<String>) {
    if let Some(op) = op {
        let msg = "The instance went away during maintenance.";
        operations::fail(w, ce, &op, "ABORTED", msg, (409, "CONFLICT"));
    }
}
