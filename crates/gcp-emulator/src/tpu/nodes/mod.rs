//! TPU VM nodes: create / get / list / delete / stop / start / patch / getGuestAttributes, and
//! their state machine CREATING -> READY, STOPPING -> STOPPED, STARTING -> READY, DELETING -> gone,
//! PREEMPTED (spot / preemptible, by fault), plus the simulated workload: checkpoints under its
//! `CHECKPOINT_DIR` every `workloadCheckpoint` while it runs, then its `_SUCCESS` marker.

use super::Tpu;
use super::catalog::{self, Accel};
use super::{NODE_TYPE, op_metadata, tpu_op_name};
use crate::api::{Reply, list_body};
use crate::cloud::{Cloud, TimerKind};
use crate::errors::{ApiError, ApiResult, Code};
use crate::faults::name_matches;
use crate::logging::workloads::INFO;
use crate::lro;
use crate::outputs::{
    CHECKPOINT_REQUEST_KEY, DONE_URI_KEY, checkpoint_dir_in, committed_step, write_checkpoint_at,
};
use crate::training::{Cause, Progress, RunState};
use crate::wire::Query;
use crate::wire::schema::{self, Svc};
use crate::wire::time::ts;
use serde_json::{Value, json};

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod create;
mod interrupt;
mod lifecycle;
mod maintenance;
mod patch;
mod workload;

pub use create::*;
use interrupt::*;
pub use lifecycle::*;
pub use maintenance::*;
pub use patch::*;
pub use workload::*;

#[derive(Clone, Debug)]
pub struct NodeRec {
    /// The Node as `nodes.get` serves it (enum names).
    pub body: Value,
    /// Operation waiting for the current transition.
    pub op: Option<String>,
    /// Sequence number of the live state-machine timer.
    pub timer: Option<u64>,
    pub workload_timer: Option<u64>,
    pub workload_done: bool,
    /// When the simulated workload exits (set when it starts).
    pub workload_end: Option<chrono::DateTime<chrono::Utc>>,
    pub hosts: u32,
    /// The environment the startup script gave the workload container when it started (every
    /// host of the node runs the same script), see [`container_env`]; `None` until it started.
    pub workload_env: Option<std::collections::BTreeMap<String, String>>,
    /// The capacity it holds (the zone's stock counts it while it lives).
    pub kind: crate::capacity::CapacityKind,
    /// The running workload's step model and the node's maintenance event.
    pub run: RunState,
}

impl NodeRec {
    pub fn state(&self) -> &str {
        self.body["state"].as_str().unwrap_or("STATE_UNSPECIFIED")
    }
    fn is_spot(&self) -> bool {
        let s = &self.body["schedulingConfig"];
        s["spot"].as_bool().unwrap_or(false) || s["preemptible"].as_bool().unwrap_or(false)
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("TPU node \"{name}\" not found"))
}

/// The node with `health` only while READY (as on the real GET).
pub fn view(rec: &NodeRec) -> Value {
    rec.body.clone()
}

/// The copy placed in an operation's `response`: real GCP omits `health` there.
fn op_copy(rec: &NodeRec) -> Value {
    let mut b = rec.body.clone();
    if let Some(m) = b.as_object_mut() {
        m.remove("health");
    }
    lro::any(NODE_TYPE, &b)
}

pub fn get(tpu: &Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    Ok(Reply::msg(Svc::Tpu, "Node", view(rec)))
}

pub fn list(tpu: &Tpu, parent: &str, q: &Query) -> ApiResult<Reply> {
    let prefix = format!("{parent}/nodes/");
    let all: Vec<&NodeRec> = tpu.nodes.under(&prefix).map(|(_, r)| r).collect();
    let (page, next) = super::PAGING.page(&all, q)?;
    let items = page.into_iter().map(view).collect();
    Ok(Reply::list(
        "nodes",
        Svc::Tpu,
        "Node",
        list_body("nodes", items, next),
    ))
}

pub fn guest_attributes(tpu: &Tpu, name: &str, body: &Value) -> ApiResult<Reply> {
    let rec = tpu.nodes.find(name, not_found)?;
    let req = schema::validate(Svc::Tpu, "GetGuestAttributesRequest", body, "")?;
    let query_path = req["queryPath"].as_str().unwrap_or("").to_string();
    let workers: Vec<String> = match req["workerIds"].as_array() {
        Some(ids) => ids
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        None => (0..rec.hosts).map(|h| h.to_string()).collect(),
    };
    let attrs: Vec<Value> = workers
        .iter()
        .map(|wid| {
            json!({"queryPath": query_path, "workerId": wid,
                   "queryValue": {"items": [{"namespace": "tpu-emulator", "key": "state", "value": rec.state()}]}})
        })
        .collect();
    Ok(Reply::json(list_body("guestAttributes", attrs, None)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod env_tests {
    use serde_json::json;

    /// The operator's multislice script: static `-e 'K=V'` words, `-e K` from exported metadata
    /// attributes, and no container while an attribute is missing.
    #[test]
    fn container_env_reads_static_and_exported_variables() {
        let script = "#!/bin/bash\nattr() { curl; }\nuntil [ -n \"$(attr a-id)\" ]; do sleep 5; done\nexport SLICE=$(attr a-id)\ndocker run --rm -v /dev:/dev \\\n  -e 'MSG=it'\\''s' \\\n  -e SLICE \\\n  -e 'N=2' \\\n  'image:1' 'train.py'\nrc=$?\n";
        assert_eq!(super::container_env(script, &json!({})), None);
        let env = super::container_env(script, &json!({"a-id": "1"})).unwrap();
        assert_eq!(env["MSG"], "it's");
        assert_eq!(env["SLICE"], "1");
        assert_eq!(env["N"], "2");
        assert_eq!(env.len(), 3);
    }
}
