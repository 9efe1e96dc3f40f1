//! Compute Engine `Operation`s (`zoneOperations.get`, `regionOperations.get`): every mutation
//! returns one. Fields as the discovery document's `Operation` schema defines them
//! (/work/shared/gcp-api/compute.v1.json, also
//! https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations): `kind`
//! `compute#operation`, `status` PENDING | RUNNING | DONE, `error.errors[{code, message}]` and
//! `httpErrorStatusCode` / `httpErrorMessage` on failure, `insertTime` / `startTime` / `endTime`,
//! `zone` or `region`, `targetLink`, `selfLink`.

use super::ComputeState;
use super::{BASE, Loc, errors, numeric_id};
use crate::api::Req;
use crate::cloud::{Cloud, TimerKind};
use crate::errors::ApiResult;
use crate::wire::time::ts;
use serde_json::{Value, json};

/// Starts a RUNNING operation on `target_key` and returns its key
/// (`projects/p/zones/z/operations/operation-...`).
pub fn start(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    loc: &Loc,
    op_type: &str,
    target_key: &str,
) -> String {
    let millis = w.now.timestamp_millis();
    let hex = w.uuid().replace('-', "");
    let name = format!(
        "operation-{millis}-{}-{}-{}",
        &hex[..13],
        &hex[13..21],
        &hex[21..29]
    );
    let scope = loc.scope(project);
    let key = format!("{scope}/operations/{name}");
    let mut body = json!({
        "kind": "compute#operation",
        "id": numeric_id(w),
        "name": name,
        "operationType": op_type,
        "targetLink": format!("{BASE}{target_key}"),
        "status": "RUNNING",
        "user": w.cfg.creator,
        "progress": 0,
        "insertTime": ts(w.now),
        "startTime": ts(w.now),
        "selfLink": format!("{BASE}{key}"),
    });
    match loc {
        Loc::Zone(_) => body["zone"] = json!(format!("{BASE}{scope}")),
        Loc::Region(_) => body["region"] = json!(format!("{BASE}{scope}")),
    }
    ce.ops.insert(key.clone(), body);
    key
}

/// Completes the operation after `durations.computeOp` (configuration-only changes).
pub fn finish_later(w: &mut Cloud, key: &str) {
    let at = Cloud::add(w.now, w.cfg.durations.compute_op);
    w.schedule(at, TimerKind::Compute, &format!("op|{key}"));
}

pub fn done(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let now = ts(w.now);
    if let Some(op) = ce.ops.get_mut(key)
        && op["status"] != "DONE"
    {
        op["status"] = json!("DONE");
        op["progress"] = json!(100);
        op["endTime"] = json!(now);
    }
}

/// Ends the operation DONE with `error.errors[{code, message}]` and the HTTP status fields.
pub fn fail(w: &mut Cloud, ce: &mut ComputeState, key: &str, code: &str, message: &str, http: (u16, &str)) {
    done(w, ce, key);
    if let Some(op) = ce.ops.get_mut(key) {
        op["error"] = json!({"errors": [{"code": code, "message": message}]});
        op["httpErrorStatusCode"] = json!(http.0);
        op["httpErrorMessage"] = json!(http.1);
    }
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    ce.ops.find(key, errors::not_found).cloned()
}

fn rid_key(scope: &str, req: &Req) -> Option<String> {
    req.query.get("requestId").map(|r| format!("compute|{scope}|{r}"))
}

/// The operation a previous call with the same `requestId` returned (its current state).
/// `requestId` "must be a valid UUID with the exception that zero UUID is not supported"
/// (https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert); anything else
/// -> 400 `invalid` (the refusal itself is assumed).
pub fn replay(w: &Cloud, ce: &ComputeState, scope: &str, req: &Req) -> ApiResult<Option<Value>> {
    if let Some(rid) = req.query.get("requestId")
        && uuid::Uuid::try_parse(rid).map_or(true, |u| u.is_nil())
    {
        return Err(errors::invalid_field(
            "requestId",
            rid,
            "The request ID must be a valid UUID with the exception that zero UUID is not supported.",
        ));
    }
    let Some(k) = rid_key(scope, req) else {
        return Ok(None);
    };
    Ok(w.request_ids.replay(&k, &ce.ops).cloned())
}

/// Remembers `op` for `requestId` replays and returns its body.
pub fn remember(w: &mut Cloud, ce: &mut ComputeState, scope: &str, req: &Req, op: &str) -> Value {
    if let Some(k) = rid_key(scope, req) {
        w.request_ids.remember(k, op);
    }
    ce.ops.get(op).cloned().unwrap_or_default()
}
