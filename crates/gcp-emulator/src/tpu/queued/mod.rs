//! TPU queued resources: create (with `queuedResourceId` + idempotent `requestId`), get, list,
//! delete (`force`), reset, and the state machine CREATING -> ACCEPTED -> WAITING_FOR_RESOURCES ->
//! PROVISIONING -> ACTIVE, FAILED (validUntil passed), SUSPENDING -> SUSPENDED (preemption),
//! DELETING -> gone; and the v2alpha1 maintenance of its nodes (`maintenance.rs`).

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

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod actions;
mod create;
mod maintenance;
mod progress;

pub use actions::*;
pub use create::*;
pub use maintenance::perform_maintenance;
pub use progress::*;

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

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("QueuedResource \"{name}\" not found"))
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

/// `projects/{p}/locations/{l}` of the queued resource `name`.
fn parent_of(name: &str) -> &str {
    name.split("/queuedResources/").next().unwrap_or_default()
}
