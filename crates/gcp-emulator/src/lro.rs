//! `google.longrunning.Operation` records shared by the TPU, Dataproc and Vertex services, and the
//! per-service operations sub-API (get, list, cancel, delete, wait). The operations live in one
//! [`Store`] (`Cloud::ops`); every function here takes that store, so a service can start or end
//! an operation while it holds its own resources.

use crate::errors::{ApiError, ApiResult};
use crate::store::Store;
use crate::wire::schema::Svc;
use crate::wire::time::ts;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

pub const EMPTY: &str = "type.googleapis.com/google.protobuf.Empty";

#[derive(Clone, Debug)]
pub struct OpRec {
    pub svc: Svc,
    /// The Operation exactly as served (`name`, `metadata`, `done`, `response` | `error`).
    pub body: Value,
}

impl OpRec {
    pub fn done(&self) -> bool {
        self.body.get("done").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// Stores a new pending operation and returns its body.
pub fn start(ops: &mut Store<OpRec>, svc: Svc, name: String, metadata: Value) -> Value {
    let body = json!({"name": name, "metadata": metadata});
    ops.insert(
        name,
        OpRec {
            svc,
            body: body.clone(),
        },
    );
    body
}

/// The time field each service sets in its metadata when an operation ends.
fn mark_end(op: &mut Value, svc: Svc, at: &str) {
    let meta = &mut op["metadata"];
    match svc {
        Svc::Tpu => meta["endTime"] = json!(at),
        Svc::Dataproc => meta["doneTime"] = json!(at),
        Svc::Vertex => meta["genericMetadata"]["updateTime"] = json!(at),
        Svc::Storage | Svc::Compute | Svc::Logging | Svc::IamCredentials => {}
    }
}

/// Completes an operation successfully with `response` (which carries its `@type`).
pub fn finish_ok(ops: &mut Store<OpRec>, now: DateTime<Utc>, name: &str, response: Value) {
    let at = ts(now);
    if let Some(op) = ops.get_mut(name) {
        mark_end(&mut op.body, op.svc, &at);
        op.body["done"] = json!(true);
        op.body["response"] = response;
    }
}

/// Completes an operation with an error (`google.rpc.Status`).
pub fn finish_err(ops: &mut Store<OpRec>, now: DateTime<Utc>, name: &str, err: &ApiError) {
    let at = ts(now);
    if let Some(op) = ops.get_mut(name) {
        mark_end(&mut op.body, op.svc, &at);
        op.body["done"] = json!(true);
        op.body["error"] = err.rpc_status();
    }
}

/// `response` for a finished operation: the message with its `@type` first.
pub fn any(type_url: &str, msg: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("@type".into(), json!(type_url));
    if let Value::Object(m) = msg {
        for (k, v) in m {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// Looks up an operation of `svc` by name (`alias` handles Dataproc's locations/regions).
pub fn get<'a>(ops: &'a Store<OpRec>, svc: Svc, name: &str) -> ApiResult<&'a OpRec> {
    ops.get(name)
        .filter(|o| o.svc == svc)
        .ok_or_else(|| not_found(name))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("Operation not found: {name}"))
}

/// Operations under `parent` (`projects/p/locations/l`), filtered by `done=true|false` if asked.
pub fn list(ops: &Store<OpRec>, svc: Svc, parent: &str, filter: Option<&str>) -> ApiResult<Vec<Value>> {
    let prefix = format!("{parent}/operations/");
    let want_done = match filter.map(|f| f.replace(' ', "")) {
        None => None,
        Some(f) if f == "done=true" => Some(true),
        Some(f) if f == "done=false" => Some(false),
        Some(f) => {
            return Err(ApiError::invalid_field(
                "filter",
                format!("Unsupported operations filter \"{f}\""),
            ));
        }
    };
    Ok(ops
        .under(&prefix)
        .filter(|(_, o)| o.svc == svc && want_done.is_none_or(|d| o.done() == d))
        .map(|(_, o)| o.body.clone())
        .collect())
}

pub fn delete(ops: &mut Store<OpRec>, svc: Svc, name: &str) -> ApiResult<Value> {
    get(ops, svc, name)?;
    ops.remove(name);
    Ok(json!({}))
}
