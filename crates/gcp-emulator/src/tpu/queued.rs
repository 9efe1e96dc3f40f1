//! TPU queued resources: create (with `queuedResourceId` + idempotent `requestId`), get, list,
//! delete (`force`), reset, and the state machine CREATING -> ACCEPTED -> WAITING_FOR_RESOURCES ->
//! PROVISIONING -> ACTIVE, FAILED (validUntil passed), SUSPENDING -> SUSPENDED (preemption),
//! DELETING -> gone.

use super::Tpu;
use super::{QR_TYPE, op_metadata, tpu_op_name};
use crate::api::{Reply, list_body};
use crate::cloud::{Cloud, TimerKind};
use crate::errors::{ApiError, ApiResult, Code};
use crate::lro;
use crate::wire::Query;
use crate::wire::schema::{self, Svc};
use crate::wire::time::{parse_duration, parse_ts, ts};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub struct QrRec {
    pub body: Value,
    pub op: Option<String>,
    pub timer: Option<u64>,
    /// Names of the nodes this queued resource created.
    pub nodes: Vec<String>,
    pub valid_until: Option<DateTime<Utc>>,
    pub valid_after: Option<DateTime<Utc>>,
}

impl QrRec {
    pub fn state(&self) -> &str {
        self.body["state"]["state"]
            .as_str()
            .unwrap_or("STATE_UNSPECIFIED")
    }
}

fn set_state(body: &mut Value, state: &str, initiator: Option<&str>) {
    let mut s = json!({"state": state});
    if let Some(i) = initiator {
        s["stateInitiator"] = json!(i);
    }
    body["state"] = s;
}

fn id_ok(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_.~+%-".contains(&c))
}

/// `requestId` of `queuedResources.create` / `.delete`: the discovery document (`tpu.v2.json`,
/// rev 20261001, both methods) describes it as "Optional. Idempotent request UUID.", and so does
/// the REST reference
/// (<https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.queuedResources/create>).
/// Any textual UUID form is accepted (hyphenated, simple, braced, `urn:uuid:`); that a non-UUID is
/// refused with 400 INVALID_ARGUMENT is the safer reading of "UUID", not a recorded answer
/// (docs/reliability.md, "Not verified against real GCP").
fn request_id_ok(id: &str) -> bool {
    uuid::Uuid::try_parse(id).is_ok()
}

fn bad_request_id(rid: &str) -> ApiError {
    ApiError::invalid_field(
        "request_id",
        format!("Invalid value at 'request_id' (TYPE_STRING), \"{rid}\": must be a UUID"),
    )
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("QueuedResource \"{name}\" not found"))
}

/// Node ids a spec creates (`nodeId`, or `{nodeIdPrefix}-0..N-1` for multislice).
fn spec_node_ids(spec: &Value, i: usize) -> ApiResult<(Vec<String>, bool)> {
    if let Some(id) = spec["nodeId"].as_str() {
        return Ok((vec![id.to_string()], false));
    }
    let ms = &spec["multisliceParams"];
    let count = ms["nodeCount"].as_i64().unwrap_or(0);
    if count > 1 {
        let prefix = ms["nodeIdPrefix"].as_str().unwrap_or("node");
        return Ok(((0..count).map(|n| format!("{prefix}-{n}")).collect(), true));
    }
    Err(ApiError::invalid_field(
        &format!("queued_resource.tpu.node_spec[{i}].node_id"),
        format!(
            "Invalid value at 'queued_resource.tpu.node_spec[{i}]': node_id or multislice_params.node_count > 1 is required"
        ),
    ))
}

/// Checks the node specs (and the reservation, spot / guaranteed choice) of a queued resource
/// to create; none of the nodes it would create may exist yet.
fn check_node_specs(tpu: &Tpu, qr: &Value) -> ApiResult<()> {
    let specs = qr["tpu"]["nodeSpec"].as_array().cloned().unwrap_or_default();
    if specs.is_empty() {
        return Err(ApiError::invalid_field(
            "queued_resource.tpu.node_spec",
            "queued_resource.tpu.node_spec must not be empty",
        ));
    }
    super::reservations::validate(qr)?;
    if qr.get("spot").is_some() && qr.get("guaranteed").is_some() {
        return Err(ApiError::invalid_field(
            "queued_resource.spot",
            "only one of spot or guaranteed may be set",
        ));
    }
    for (i, spec) in specs.iter().enumerate() {
        let sp = spec["parent"].as_str().unwrap_or("");
        super::split_parent(sp).map_err(|_| {
            ApiError::invalid_field(
                &format!("queued_resource.tpu.node_spec[{i}].parent"),
                format!("invalid parent \"{sp}\""),
            )
        })?;
        super::nodes::resolve_accel(&spec["node"], &format!("queued_resource.tpu.node_spec[{i}].node"))?;
        for nid in spec_node_ids(spec, i)?.0 {
            if tpu.nodes.contains_key(&format!("{sp}/nodes/{nid}")) {
                return Err(ApiError::already_exists(format!(
                    "Resource '{sp}/nodes/{nid}' already exists"
                )));
            }
        }
    }
    Ok(())
}

/// A queueing policy's window, `(validAfter, validUntil)` (`None`: unbounded). Each bound is the
/// first one set of its absolute time, its duration from `now` and its end of `validInterval`.
fn queueing_window(policy: &Value, now: DateTime<Utc>) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let bound = |time: &str, duration: &str, interval_end: &str| {
        policy[time]
            .as_str()
            .and_then(parse_ts)
            .or_else(|| {
                policy[duration]
                    .as_str()
                    .and_then(parse_duration)
                    .map(|d| now + d)
            })
            .or_else(|| policy["validInterval"][interval_end].as_str().and_then(parse_ts))
    };
    (
        bound("validAfterTime", "validAfterDuration", "startTime"),
        bound("validUntilTime", "validUntilDuration", "endTime"),
    )
}

pub fn create(
    w: &mut Cloud,
    tpu: &mut Tpu,
    project: &str,
    zone: &str,
    q: &Query,
    body: &Value,
) -> ApiResult<Reply> {
    let parent = format!("projects/{project}/locations/{zone}");
    if let Some(rid) = q.get("requestId") {
        if !request_id_ok(rid) {
            return Err(bad_request_id(rid));
        }
        if let Some(op) = w.request_ids.replay(&format!("tpu|{parent}|{rid}"), &w.ops) {
            return Ok(Reply::op(op.body.clone()));
        }
    }
    let id = q
        .get("queuedResourceId")
        .ok_or_else(|| ApiError::invalid_field("queued_resource_id", "queued_resource_id is required"))?;
    if !id_ok(id) {
        return Err(ApiError::invalid_field(
            "queued_resource_id",
            format!("Invalid value at 'queued_resource_id': \"{id}\" does not match ^[A-Za-z0-9_.~+%-]+$"),
        ));
    }
    let mut qr = schema::validate(Svc::Tpu, "QueuedResource", body, "queued_resource")?;
    check_node_specs(tpu, &qr)?;
    let name = format!("{parent}/queuedResources/{id}");
    if tpu.qrs.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Resource '{name}' already exists"
        )));
    }
    let now = w.now;
    let (valid_after, valid_until) = queueing_window(&qr["queueingPolicy"], now);
    qr["name"] = json!(name);
    qr["createTime"] = json!(ts(now));
    set_state(&mut qr, "CREATING", None);
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, &name, "create"),
    );
    if let Some(rid) = q.get("requestId") {
        w.request_ids.remember(format!("tpu|{parent}|{rid}"), &op_name);
    }
    let timer = w.schedule(
        Cloud::add(now, w.cfg.durations.qr_accept),
        TimerKind::QueuedResource,
        &name,
    );
    tpu.qrs.insert(
        name,
        QrRec {
            body: qr,
            op: Some(op_name),
            timer: Some(timer),
            nodes: vec![],
            valid_until,
            valid_after,
        },
    );
    Ok(Reply::op(op))
}

pub fn get(tpu: &Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.qrs.find(name, not_found)?;
    Ok(Reply::msg(Svc::Tpu, "QueuedResource", rec.body.clone()))
}

pub fn list(tpu: &Tpu, parent: &str, q: &Query) -> ApiResult<Reply> {
    let prefix = format!("{parent}/queuedResources/");
    let all: Vec<&QrRec> = tpu.qrs.under(&prefix).map(|(_, r)| r).collect();
    let (page, next) = super::PAGING.page(&all, q)?;
    let items = page.into_iter().map(|r| r.body.clone()).collect();
    Ok(Reply::list(
        "queuedResources",
        Svc::Tpu,
        "QueuedResource",
        list_body("queuedResources", items, next),
    ))
}

fn live_nodes(tpu: &Tpu, rec: &QrRec) -> Vec<String> {
    rec.nodes
        .iter()
        .filter(|n| tpu.nodes.contains_key(*n))
        .cloned()
        .collect()
}

pub fn delete(w: &mut Cloud, tpu: &mut Tpu, name: &str, q: &Query) -> ApiResult<Reply> {
    if let Some(rid) = q.get("requestId").filter(|rid| !request_id_ok(rid)) {
        return Err(bad_request_id(rid));
    }
    let rid_key = q.get("requestId").map(|rid| format!("tpu-delete|{name}|{rid}"));
    if let Some(op) = rid_key.as_ref().and_then(|k| w.request_ids.replay(k, &w.ops)) {
        return Ok(Reply::op(op.body.clone()));
    }
    let force = q.bool("force")?;
    let rec = tpu.qrs.find(name, not_found)?;
    let live = live_nodes(tpu, rec);
    let state = rec.state().to_string();
    if state == "DELETING" {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" is already being deleted"
        )));
    }
    if !force && !live.is_empty() && !["ACCEPTED", "FAILED", "SUSPENDED"].contains(&state.as_str()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {state} still has nodes ({}); delete them first or set force=true",
            live.join(", ")
        )));
    }
    let d = w.cfg.durations.qr_delete;
    for n in &live {
        super::nodes::delete_quietly(w, tpu, n, d);
    }
    let parent = name
        .split("/queuedResources/")
        .next()
        .unwrap_or_default()
        .to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "delete"),
    );
    if let Some(k) = rid_key {
        w.request_ids.remember(k, &op_name);
    }
    let timer = w.schedule(Cloud::add(w.now, d), TimerKind::QueuedResource, name);
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    let previous = rec.op.replace(op_name);
    set_state(&mut rec.body, "DELETING", Some("USER"));
    rec.timer = Some(timer);
    if let Some(prev) = previous {
        lro::finish_err(
            &mut w.ops,
            w.now,
            &prev,
            &ApiError::new(Code::Aborted, format!("QueuedResource \"{name}\" was deleted")),
        );
    }
    Ok(Reply::op(op))
}

pub fn reset(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.qrs.find(name, not_found)?;
    let state = rec.state().to_string();
    if !["FAILED", "SUSPENDED"].contains(&state.as_str()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {state} cannot be reset (only FAILED or SUSPENDED)"
        )));
    }
    let parent = name
        .split("/queuedResources/")
        .next()
        .unwrap_or_default()
        .to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "reset"),
    );
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_queue),
        TimerKind::QueuedResource,
        name,
    );
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    set_state(&mut rec.body, "ACCEPTED", Some("USER"));
    rec.timer = Some(timer);
    rec.nodes.clear();
    let resp = lro::any(QR_TYPE, &rec.body);
    lro::finish_ok(&mut w.ops, w.now, &op_name, resp);
    let done = w.ops.get(&op_name).map(|o| o.body.clone()).unwrap_or(op);
    Ok(Reply::op(done))
}

/// Fault: the capacity behind a queued resource is reclaimed now.
pub fn preempt(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<()> {
    let rec = tpu.qrs.find(name, not_found)?;
    if !["ACTIVE", "PROVISIONING"].contains(&rec.state()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {} has no capacity to preempt",
            rec.state()
        )));
    }
    let nodes = rec.nodes.clone();
    for n in &nodes {
        super::nodes::mark_preempted(w, tpu, n);
    }
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_suspend),
        TimerKind::QueuedResource,
        name,
    );
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    set_state(&mut rec.body, "SUSPENDING", Some("SERVICE"));
    rec.timer = Some(timer);
    Ok(())
}

/// Re-checks waiting queued resources now (after a stockout is lifted).
pub fn recheck_waiting(w: &mut Cloud, tpu: &mut Tpu) {
    let waiting: Vec<String> = tpu
        .qrs
        .iter()
        .filter(|(_, r)| r.state() == "WAITING_FOR_RESOURCES")
        .map(|(k, _)| k.clone())
        .collect();
    for name in waiting {
        let t = w.schedule(w.now, TimerKind::QueuedResource, &name);
        if let Some(r) = tpu.qrs.get_mut(&name) {
            r.timer = Some(t);
        }
    }
}

fn stocked_out(w: &Cloud, rec: &QrRec) -> bool {
    rec.body["tpu"]["nodeSpec"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|spec| {
            let zone = spec["parent"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .unwrap_or("");
            let accel = super::nodes::resolve_accel(&spec["node"], "node")
                .map(|a| a.accelerator_type)
                .unwrap_or_default();
            w.faults.stocked_out(zone, &accel)
        })
}

fn reschedule(w: &mut Cloud, tpu: &mut Tpu, name: &str, at: DateTime<Utc>) {
    let t = w.schedule(at, TimerKind::QueuedResource, name);
    if let Some(r) = tpu.qrs.get_mut(name) {
        r.timer = Some(t);
    }
}

/// State-machine step for a queued resource.
pub fn fire(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.qrs.get_mut(name) else { return };
    if rec.timer != Some(seq) {
        return;
    }
    rec.timer = None;
    let now = w.now;
    let d = w.cfg.durations.clone();
    match rec.state().to_string().as_str() {
        "CREATING" => {
            set_state(&mut rec.body, "ACCEPTED", None);
            let resp = lro::any(QR_TYPE, &rec.body);
            if let Some(op) = rec.op.take() {
                lro::finish_ok(&mut w.ops, w.now, &op, resp);
            }
            reschedule(w, tpu, name, Cloud::add(now, d.qr_queue));
        }
        "ACCEPTED" => {
            set_state(&mut rec.body, "WAITING_FOR_RESOURCES", None);
            let mut next = Cloud::add(now, d.qr_wait);
            if let Some(after) = rec.valid_after {
                next = next.max(after);
            }
            if let Some(until) = rec.valid_until {
                next = next.min(until);
            }
            reschedule(w, tpu, name, next);
        }
        "WAITING_FOR_RESOURCES" => {
            if rec.valid_until.is_some_and(|u| now >= u) {
                // FAILED is documented ("unavailability of resources within the constraints of
                // the request (e.g., the 'valid until' start timing constraint expired)", tpu v2
                // `QueuedResourceState.state`); the `failedData.error` code and message are not:
                // RESOURCE_EXHAUSTED is this emulator's choice, and the operator does not key on
                // it (docs/reliability.md, "Not verified against real GCP").
                let err = ApiError::new(
                    Code::ResourceExhausted,
                    "QueuedResource could not be provisioned before its valid_until time: insufficient capacity",
                );
                set_state(&mut rec.body, "FAILED", Some("SERVICE"));
                rec.body["state"]["failedData"] = json!({"error": err.rpc_status()});
                return;
            }
            let waiting_for_window = rec.valid_after.is_some_and(|a| now < a);
            let rec_snapshot = rec.clone();
            // A named reservation decides alone: missing -> FAILED, full -> wait (stockouts
            // do not touch reserved capacity). See tpu/reservations.rs for the sources.
            let held = match super::reservations::named(&rec_snapshot) {
                None => stocked_out(w, &rec_snapshot),
                Some(r) => match super::reservations::verdict(tpu, name, &rec_snapshot, r) {
                    super::reservations::Verdict::Provision => false,
                    super::reservations::Verdict::Wait => true,
                    super::reservations::Verdict::Fail(err) => {
                        let rec = tpu.qrs.get_mut(name).expect("present");
                        set_state(&mut rec.body, "FAILED", Some("SERVICE"));
                        rec.body["state"]["failedData"] = json!({"error": err.rpc_status()});
                        return;
                    }
                },
            };
            if waiting_for_window || held {
                let mut next = Cloud::add(now, d.qr_wait);
                if let Some(until) = rec_snapshot.valid_until {
                    next = next.min(until).max(now);
                }
                reschedule(w, tpu, name, next);
                return;
            }
            provision(w, tpu, name, &rec_snapshot);
        }
        "PROVISIONING" => {
            set_state(&mut rec.body, "ACTIVE", None);
        }
        "SUSPENDING" => {
            set_state(&mut rec.body, "SUSPENDED", Some("SERVICE"));
            let nodes = std::mem::take(&mut rec.nodes);
            for n in nodes {
                tpu.nodes.remove(&n);
            }
        }
        "DELETING" => {
            let rec = tpu.qrs.remove(name).expect("present");
            for n in &rec.nodes {
                tpu.nodes.remove(n);
            }
            if let Some(op) = rec.op {
                lro::finish_ok(&mut w.ops, w.now, &op, json!({"@type": lro::EMPTY}));
            }
        }
        _ => {}
    }
}

fn provision(w: &mut Cloud, tpu: &mut Tpu, name: &str, rec: &QrRec) {
    let mut created = Vec::new();
    let mut failure = None;
    for (i, spec) in rec.body["tpu"]["nodeSpec"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let parent = spec["parent"].as_str().unwrap_or_default();
        let (ids, multislice) = match spec_node_ids(spec, i) {
            Ok(v) => v,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        for id in ids {
            match super::nodes::insert_for_qr(w, tpu, parent, &id, &spec["node"], name, multislice) {
                Ok(n) => created.push(n),
                Err(e) => failure = Some(e),
            }
        }
    }
    let at = Cloud::add(w.now, w.cfg.durations.qr_provision);
    let t = w.schedule(at, TimerKind::QueuedResource, name);
    let Some(r) = tpu.qrs.get_mut(name) else { return };
    r.nodes = created;
    match failure {
        Some(e) => {
            set_state(&mut r.body, "FAILED", Some("SERVICE"));
            r.body["state"]["failedData"] = json!({"error": e.rpc_status()});
        }
        None => {
            set_state(&mut r.body, "PROVISIONING", None);
            r.timer = Some(t);
        }
    }
}
