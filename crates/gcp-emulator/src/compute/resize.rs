//! MIG resize requests (`instanceGroupManagerResizeRequests` insert / get / list / cancel /
//! delete): all-or-nothing creation of `resizeBy` VMs when capacity exists, for flex-start.
//!
//! Sources: the discovery document (`InstanceGroupManagerResizeRequest.state`: CREATING "is
//! being created and may still fail creation", ACCEPTED "accepted for provisioning when the
//! capacity becomes available", SUCCEEDED, FAILED "any VMs that were created during provisioning
//! are rolled back and removed from the MIG", CANCELLED; `resizeBy` "the group's target size
//! will be increased by this number"; `requestedRunDuration` "at the end of the run duration
//! instance will be deleted"; cancel "is only possible for requests that are accepted in the
//! queue"; delete "deletes the specified, inactive resize request ... does not delete
//! instances"); "About resize requests in a MIG"
//! (https://docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig: VMs
//! created all at once; the run duration must be between 10 minutes and seven days; after it
//! the MIG deletes the VMs) and "Create resize requests in a MIG"
//! (https://docs.cloud.google.com/compute/docs/instance-groups/create-resize-requests-mig).

use super::ComputeState;
use super::{BASE, Loc, errors, igm, instances, operations, templates};
use crate::api::Req;
use crate::cloud::{Cloud, TimerKind};
use crate::errors::ApiResult;
use crate::wire::time::ts;
use serde_json::{Value, json};

#[derive(Debug)]
pub struct ResizeRec {
    pub body: Value,
    pub igm: String,
    pub seq: u64,
    /// The insert operation, DONE when the request is ACCEPTED.
    pub insert_op: Option<String>,
    /// Keys of the VMs it created (empty until capacity is granted).
    pub instances: Vec<String>,
    pub granted: bool,
}

impl ResizeRec {
    pub fn state(&self) -> &str {
        self.body["state"].as_str().unwrap_or("")
    }
    fn resize_by(&self) -> i64 {
        self.body["resizeBy"].as_i64().unwrap_or(0)
    }
}

const MIN_RUN: i64 = 600;
const MAX_RUN: i64 = 7 * 24 * 3600;

/// `resizeBy`, the only form supported, which must be > 0.
fn checked_resize_by(v: &Value) -> ApiResult<i64> {
    if !v["instances"].is_null() {
        return Err(errors::invalid_field(
            "resource.instances",
            "",
            "The emulator supports resizeBy only.",
        ));
    }
    let by = v["resizeBy"].as_i64().unwrap_or(0);
    if by <= 0 {
        return Err(errors::invalid_field(
            "resource.resizeBy",
            &by.to_string(),
            "Must be > 0.",
        ));
    }
    Ok(by)
}

/// `requestedRunDuration` must be within [10 minutes, 7 days], and is required for a flex-start
/// template.
fn check_run_duration(v: &Value, flex: bool) -> ApiResult<()> {
    let run = v["requestedRunDuration"]["seconds"]
        .as_str()
        .and_then(|s| s.parse::<i64>().ok());
    match run {
        None if flex => return Err(errors::required("resource.requestedRunDuration")),
        Some(s) if !(MIN_RUN..=MAX_RUN).contains(&s) => {
            return Err(errors::invalid_field(
                "resource.requestedRunDuration.seconds",
                &s.to_string(),
                "The run duration must be between 10 minutes and 7 days.",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// VMs asked for by the MIG's resize requests not yet granted (CREATING or ACCEPTED).
fn queued_by(ce: &ComputeState, igm_key: &str) -> i64 {
    ce.resize
        .values()
        .filter(|r| r.igm == igm_key && !r.granted && matches!(r.state(), "CREATING" | "ACCEPTED"))
        .map(ResizeRec::resize_by)
        .sum()
}

/// The output-only fields of a new resize request; it starts CREATING.
fn fill_output_fields(w: &mut Cloud, v: &mut Value, scope: &str, key: &str) {
    v["kind"] = json!("compute#instanceGroupManagerResizeRequest");
    v["id"] = json!(super::numeric_id(w));
    v["creationTimestamp"] = json!(ts(w.now));
    v["selfLink"] = json!(format!("{BASE}{key}"));
    v["zone"] = json!(format!("{BASE}{scope}"));
    v["state"] = json!("CREATING");
    v["status"] = json!({});
}

pub fn insert(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    igm_key: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let mut v = super::validate("InstanceGroupManagerResizeRequest", req)?;
    let g = ce.igms.find(igm_key, errors::not_found)?;
    if g.deleting.is_some() {
        return Err(errors::not_ready(format!(
            "The instance group manager '{igm_key}' is being deleted"
        )));
    }
    let name = super::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{igm_key}/resizeRequests/{name}");
    if ce.resize.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let by = checked_resize_by(&v)?;
    let flex = ce
        .templates
        .get(&g.template)
        .is_some_and(templates::is_flex_start);
    check_run_duration(&v, flex)?;
    // Everything already asked for must still fit the workload policy's topology.
    let queued = queued_by(ce, igm_key);
    igm::check_topology(ce, g.policy.as_deref(), g.machine, g.target_size + queued + by)?;
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    fill_output_fields(w, &mut v, scope, &key);
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagerResizeRequests.insert",
        &key,
    );
    let at = Cloud::add(w.now, w.cfg.durations.resize_accept);
    let seq = w.schedule(at, TimerKind::Compute, &format!("rr|{key}"));
    ce.resize.insert(
        key,
        ResizeRec {
            body: v,
            igm: igm_key.to_string(),
            seq,
            insert_op: Some(op.clone()),
            instances: Vec::new(),
            granted: false,
        },
    );
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// CREATING -> ACCEPTED (the insert operation is DONE), then provision if capacity exists.
pub fn fire_accept(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some(r) = ce.resize.get_mut(key) else {
        return;
    };
    if r.seq != seq || r.state() != "CREATING" {
        return;
    }
    r.body["state"] = json!("ACCEPTED");
    if let Some(op) = r.insert_op.take() {
        operations::done(w, ce, &op);
    }
    try_grant(w, ce, key);
}

/// An ACCEPTED request gets all its VMs at once when capacity for all of them exists: the MIG's
/// `targetSize` grows by `resizeBy`; the run duration starts now.
pub fn try_grant(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.resize.get(key) else {
        return;
    };
    if r.granted || r.state() != "ACCEPTED" {
        return;
    }
    let Some(g) = ce.igms.get(&r.igm) else {
        return;
    };
    if g.deleting.is_some() {
        return;
    }
    let (by, igm_key) = (r.resize_by(), r.igm.clone());
    let kind = igm::kind(ce, g);
    if !instances::has_capacity(w, ce, &g.zone.clone(), g.machine, by as u64, kind) {
        return;
    }
    let run = r.body["requestedRunDuration"]["seconds"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok());
    let names: Vec<String> = (0..by).map(|_| igm::new_name(w, ce, &igm_key)).collect();
    let (project, zone) = {
        let g = &ce.igms[&igm_key];
        (g.project.clone(), g.zone.clone())
    };
    let keys: Vec<String> = names
        .iter()
        .map(|n| format!("projects/{project}/zones/{zone}/instances/{n}"))
        .collect();
    ce.igms.get_mut(&igm_key).expect("present").target_size += by;
    igm::create_members(w, ce, &igm_key, names, Some(key));
    if let Some(s) = run {
        // Per VM, so that deleting the (then inactive) request does not extend their run.
        for k in &keys {
            instances::schedule_end(w, ce, k, s);
        }
    }
    let r = ce.resize.get_mut(key).expect("present");
    r.granted = true;
    r.instances = keys;
}

/// One of its VMs is RUNNING: SUCCEEDED once all are.
pub fn instance_running(ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.resize.get(key) else {
        return;
    };
    let all = r
        .instances
        .iter()
        .all(|k| ce.instances.get(k).is_some_and(|i| i.status() == "RUNNING"));
    if all && r.state() == "ACCEPTED" {
        ce.resize.get_mut(key).expect("present").body["state"] = json!("SUCCEEDED");
    }
}

/// Removes the request's VMs from the MIG (deleting them; the target size shrinks by as many).
fn roll_back(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(r) = ce.resize.get(key) else {
        return;
    };
    let (igm_key, vms) = (r.igm.clone(), r.instances.clone());
    let live: Vec<String> = vms.into_iter().filter(|k| ce.instances.contains_key(k)).collect();
    if let Some(g) = ce.igms.get_mut(&igm_key) {
        g.target_size = (g.target_size - live.len() as i64).max(0);
    }
    for k in &live {
        instances::begin_delete(w, ce, k, None);
    }
}

/// Admin: the request fails now with `message` (`status.error`); VMs it created are rolled
/// back and removed from the MIG (discovery doc, state FAILED).
pub fn fail(w: &mut Cloud, ce: &mut ComputeState, key: &str, message: &str) -> ApiResult<()> {
    let r = ce.resize.find(key, errors::not_found)?;
    if !matches!(r.state(), "CREATING" | "ACCEPTED") {
        return Err(errors::not_ready(format!(
            "Resize request '{key}' is {}, not active",
            r.state()
        )));
    }
    roll_back(w, ce, key);
    let r = ce.resize.get_mut(key).expect("present");
    r.body["state"] = json!("FAILED");
    r.body["status"]["error"] = json!({"errors": [{"code": instances::STOCKOUT_CODE, "message": message}]});
    if let Some(op) = r.insert_op.take() {
        operations::done(w, ce, &op);
    }
    Ok(())
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    ce.resize.find(key, errors::not_found).map(|r| r.body.clone())
}

pub fn list(ce: &ComputeState, igm_key: &str, req: &Req) -> ApiResult<Value> {
    if !ce.igms.contains_key(igm_key) {
        return Err(errors::not_found(igm_key));
    }
    super::list_collection(
        &ce.resize,
        &format!("{igm_key}/resizeRequests"),
        "compute#instanceGroupManagerResizeRequestList",
        &["name", "state", "id"],
        req,
        |_, r| Some(r.body.clone()),
    )
}

/// Cancel: only while ACCEPTED and not provisioned yet; else 400 (`resourceNotReady`, assumed).
pub fn cancel(
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
    let r = ce.resize.find(key, errors::not_found)?;
    if r.state() != "ACCEPTED" || r.granted {
        return Err(errors::not_ready(format!(
            "Resize request '{key}' cannot be cancelled in state {}: only requests that are ACCEPTED in the queue can be cancelled",
            r.state()
        )));
    }
    ce.resize.get_mut(key).expect("present").body["state"] = json!("CANCELLED");
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagerResizeRequests.cancel",
        key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// Delete: only inactive requests (SUCCEEDED, FAILED, CANCELLED); the VMs stay.
pub fn delete(
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
    let r = ce.resize.find(key, errors::not_found)?;
    if matches!(r.state(), "CREATING" | "ACCEPTED") {
        return Err(errors::not_ready(format!(
            "Resize request '{key}' is {}: an active request cannot be deleted; cancel it first",
            r.state()
        )));
    }
    let rr = ce.resize.remove(key).expect("present");
    // Its VMs stay in the MIG; they no longer belong to a request.
    for k in &rr.instances {
        if let Some(i) = ce.instances.get_mut(k) {
            i.resize = None;
        }
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagerResizeRequests.delete",
        key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}
