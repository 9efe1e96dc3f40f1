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
use crate::outputs::{DONE_URI_KEY, checkpoint_dir_in, write_checkpoint_to};
use crate::wire::Query;
use crate::wire::schema::{self, Svc};
use crate::wire::time::ts;
use serde_json::{Value, json};

const DEFAULT_SCOPES: [&str; 6] = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/service.management",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/pubsub",
];

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

fn node_id_ok(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !id.ends_with('-')
}

/// Resolves the accelerator from `acceleratorType` and/or `acceleratorConfig`.
pub fn resolve_accel(node: &Value, field: &str) -> ApiResult<Accel> {
    let by_type = node["acceleratorType"].as_str();
    let cfg = node.get("acceleratorConfig");
    match (by_type, cfg) {
        (Some(t), _) => catalog::by_type(t).ok_or_else(|| {
            ApiError::invalid_field(
                &format!("{field}.accelerator_type"),
                format!("Invalid value at '{field}.accelerator_type': unknown accelerator type \"{t}\""),
            )
        }),
        (None, Some(c)) => {
            let (ty, topo) = (
                c["type"].as_str().unwrap_or(""),
                c["topology"].as_str().unwrap_or(""),
            );
            catalog::by_config(ty, topo).ok_or_else(|| {
                ApiError::invalid_field(
                    &format!("{field}.accelerator_config"),
                    format!("Invalid value at '{field}.accelerator_config': unsupported topology \"{topo}\" for type {ty}"),
                )
            })
        }
        (None, None) => Err(ApiError::invalid_field(
            &format!("{field}.accelerator_type"),
            format!("Invalid value at '{field}': one of accelerator_type or accelerator_config is required"),
        )),
    }
}

/// Fills the server defaults of a Node the way Cloud TPU does.
pub fn fill_defaults(w: &mut Cloud, project: &str, zone: &str, name: &str, node: &mut Value, accel: &Accel) {
    let number = w.project_number(project);
    let region = zone.rsplit_once('-').map(|(r, _)| r).unwrap_or(zone).to_string();
    node["name"] = json!(name);
    node["acceleratorType"] = json!(accel.accelerator_type);
    node["acceleratorConfig"] = json!({"topology": accel.topology, "type": accel.config_type});
    node["apiVersion"] = json!("V2");
    node["createTime"] = json!(ts(w.now));
    let seq = w.next_seq();
    node["id"] = json!((1_700_000_000_000_000_000u64 + seq * 7_919).to_string());
    if node.get("cidrBlock").is_none() {
        node["cidrBlock"] = json!(format!("10.{}.{}.0/24", 100 + seq % 100, seq % 250));
    }
    if node.get("networkConfigs").is_none() {
        let nc = node.get("networkConfig").cloned().unwrap_or_else(|| json!({}));
        let mut nc = nc.as_object().cloned().unwrap_or_default();
        let net = nc
            .get("network")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let net = if net.contains('/') {
            net
        } else {
            format!("projects/{project}/global/networks/{net}")
        };
        let sub = nc
            .get("subnetwork")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let sub = if sub.contains('/') {
            sub
        } else {
            format!("projects/{project}/regions/{region}/subnetworks/{sub}")
        };
        nc.insert("network".into(), json!(net));
        nc.insert("subnetwork".into(), json!(sub));
        node["networkConfig"] = Value::Object(nc);
    }
    let sa = node.get("serviceAccount").cloned().unwrap_or_else(|| json!({}));
    let email = sa["email"].as_str().map(str::to_string);
    node["serviceAccount"] = match email {
        None => {
            json!({"email": format!("{number}-compute@developer.gserviceaccount.com"), "scope": DEFAULT_SCOPES})
        }
        Some(e) => {
            let scope = sa
                .get("scope")
                .cloned()
                .unwrap_or_else(|| json!(["https://www.googleapis.com/auth/cloud-platform"]));
            json!({"email": e, "scope": scope})
        }
    };
    let external = node["networkConfig"]["enableExternalIps"]
        .as_bool()
        .unwrap_or(false);
    let endpoints: Vec<Value> = (0..accel.hosts)
        .map(|h| {
            let mut ep =
                json!({"ipAddress": format!("10.{}.{}.{}", 100 + seq % 100, seq % 250, 2 + h), "port": 8470});
            if external {
                ep["accessConfig"] =
                    json!({"externalIp": format!("34.{}.{}.{}", 16 + seq % 200, seq % 250, 2 + h)});
            }
            ep
        })
        .collect();
    node["networkEndpoints"] = Value::Array(endpoints);
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
    let node_id = q
        .get("nodeId")
        .ok_or_else(|| ApiError::invalid_field("node_id", "node_id is required"))?;
    if !node_id_ok(node_id) {
        return Err(ApiError::invalid_field(
            "node_id",
            format!(
                "Invalid value at 'node_id': \"{node_id}\" must be 1-63 characters of lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen"
            ),
        ));
    }
    let mut node = schema::validate(Svc::Tpu, "Node", body, "node")?;
    if node.get("networkConfig").is_some() && node.get("networkConfigs").is_some() {
        return Err(ApiError::invalid_field(
            "node.network_configs",
            "network_config and network_configs are mutually exclusive",
        ));
    }
    let accel = resolve_accel(&node, "node")?;
    let name = format!("{parent}/nodes/{node_id}");
    if tpu.nodes.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Resource '{name}' already exists"
        )));
    }
    if w.faults.stocked_out(zone, &accel.accelerator_type) {
        return Err(ApiError::new(
            Code::ResourceExhausted,
            format!(
                "There is no more capacity in the zone \"{zone}\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x{:x}]",
                w.next_seq()
            ),
        ));
    }
    // Issue 21 item 4: capacity errors in both shapes (faults.rs `CapacityError`).
    w.faults.doomed_creates.remove(&name);
    if let Some(c) = w.faults.capacity_error(zone, &accel.accelerator_type) {
        let err = c.error(project, &accel.accelerator_type);
        match c.shape {
            crate::faults::ErrorShape::Call => return Err(err),
            crate::faults::ErrorShape::Operation => {
                w.faults.doomed_creates.insert(name.clone(), err);
            }
        }
    }
    fill_defaults(w, project, zone, &name, &mut node, &accel);
    node["state"] = json!("CREATING");
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, &name, "create"),
    );
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.tpu_create),
        TimerKind::Node,
        &name,
    );
    tpu.nodes.insert(
        name,
        NodeRec {
            body: node,
            op: Some(op_name),
            timer: Some(timer),
            workload_timer: None,
            workload_done: false,
            workload_end: None,
            workload_env: None,
            hosts: accel.hosts,
        },
    );
    Ok(Reply::op(op))
}

/// Inserts a node created by a queued resource (no operation of its own).
pub fn insert_for_qr(
    w: &mut Cloud,
    tpu: &mut Tpu,
    spec_parent: &str,
    node_id: &str,
    node: &Value,
    qr: &str,
    multislice: bool,
) -> ApiResult<String> {
    let (project, zone) = super::split_parent(spec_parent)?;
    let accel = resolve_accel(node, "queued_resource.tpu.node_spec.node")?;
    let name = format!("{spec_parent}/nodes/{node_id}");
    let mut body = node.clone();
    fill_defaults(w, &project, &zone, &name, &mut body, &accel);
    body["state"] = json!("CREATING");
    body["queuedResource"] = json!(qr);
    if multislice {
        body["multisliceNode"] = json!(true);
    }
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_provision),
        TimerKind::Node,
        &name,
    );
    tpu.nodes.insert(
        name.clone(),
        NodeRec {
            body,
            op: None,
            timer: Some(timer),
            workload_timer: None,
            workload_done: false,
            workload_end: None,
            workload_env: None,
            hosts: accel.hosts,
        },
    );
    Ok(name)
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

fn transition(
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
    let rec = tpu.nodes.find_mut(name, not_found)?;
    // An operation still waiting on the previous transition is superseded: it fails ABORTED.
    let previous = rec.op.replace(op_name);
    rec.body["state"] = json!(to);
    if let Some(m) = rec.body.as_object_mut() {
        m.remove("health");
    }
    rec.timer = Some(timer);
    rec.workload_timer = None;
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

const PATCHABLE: [(&str, &str); 5] = [
    ("description", "description"),
    ("tags", "tags"),
    ("labels", "labels"),
    ("metadata", "metadata"),
    (
        "network_config.enable_external_ips",
        "networkConfig.enableExternalIps",
    ),
];

pub fn patch(w: &mut Cloud, tpu: &mut Tpu, name: &str, q: &Query, body: &Value) -> ApiResult<Reply> {
    if !tpu.nodes.contains_key(name) {
        return Err(not_found(name));
    }
    let mask = q
        .get("updateMask")
        .ok_or_else(|| ApiError::invalid_field("update_mask", "update_mask is required"))?;
    let patch = schema::validate_partial(Svc::Tpu, "Node", body, "node")?;
    let mut paths = Vec::new();
    for m in mask.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let snake = schema::snake(m);
        let Some((_, json_path)) = PATCHABLE.iter().find(|(s, _)| *s == snake) else {
            return Err(ApiError::invalid_field(
                "update_mask",
                format!(
                    "Invalid value at 'update_mask': field \"{m}\" cannot be updated (supported: description, tags, labels, metadata, network_config.enable_external_ips)"
                ),
            ));
        };
        paths.push(*json_path);
    }
    if let Some(op) = operation_in_flight(w, name) {
        // Issue 21 item 8: a node takes one operation at a time; a valid patch while another runs
        // (the create, a start/stop, an earlier patch, `gcloud ... tpu-vm ssh` adding its key)
        // is refused with 409, which gcloud retries. The code (ABORTED rather than
        // FAILED_PRECONDITION) and text are not documented (docs/reliability.md, "Not verified
        // against real GCP"); ABORTED, the canonical code for a concurrency conflict, is chosen.
        return Err(ApiError::new(
            Code::Aborted,
            format!(
                "The node {name} has an operation in progress ({op}); retry once it is done. (simulated by gcp-emulator)"
            ),
        ));
    }
    let now_ready = {
        let rec = tpu.nodes.get_mut(name).expect("checked above");
        // A masked field is replaced whole, maps included (AIP-134, "Update":
        // <https://google.aip.dev/134>): `metadata` in the mask replaces the node's metadata map,
        // so a client that adds one key (gcloud `tpu-vm ssh` adding `ssh-keys`) sends the rest.
        for p in &paths {
            set_path(&mut rec.body, &patch, p);
        }
        rec.state() == "READY"
    };
    if now_ready {
        maybe_schedule_workload(w, tpu, name);
    }
    let parent = name.split("/nodes/").next().unwrap_or_default().to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "update"),
    );
    w.schedule(
        Cloud::add(w.now, w.cfg.durations.tpu_update),
        TimerKind::NodeUpdateOp,
        &op_name,
    );
    Ok(Reply::op(op))
}

/// A pending TPU operation whose `metadata.target` is the node.
fn operation_in_flight(w: &Cloud, node: &str) -> Option<String> {
    w.ops
        .iter()
        .find(|(_, o)| o.svc == Svc::Tpu && !o.done() && o.body["metadata"]["target"] == json!(node))
        .map(|(n, _)| n.clone())
}

fn set_path(target: &mut Value, src: &Value, path: &str) {
    let parts: Vec<&str> = path.split('.').collect();
    let mut s = Some(src);
    for p in &parts {
        s = s.and_then(|v| v.get(*p));
    }
    let mut t = target;
    for p in &parts[..parts.len() - 1] {
        if t.get(*p).is_none() {
            t[*p] = json!({});
        }
        t = &mut t[*p];
    }
    let last = parts[parts.len() - 1];
    match (s, t.as_object_mut()) {
        (Some(v), Some(m)) => {
            m.insert(last.to_string(), v.clone());
        }
        (None, Some(m)) => {
            m.remove(last);
        }
        _ => {}
    }
}

/// `response` of a finished update: the node as it is when the operation ends.
pub fn fire_update_op(w: &mut Cloud, tpu: &mut Tpu, op_name: &str) {
    let target = w
        .ops
        .get(op_name)
        .and_then(|o| o.body["metadata"]["target"].as_str().map(str::to_string));
    match target.and_then(|t| tpu.nodes.get(&t)) {
        Some(rec) => {
            // Unlike create's, the update operation's copy keeps `health` (golden log).
            let resp = lro::any(NODE_TYPE, &view(rec));
            lro::finish_ok(&mut w.ops, w.now, op_name, resp);
        }
        None => lro::finish_err(
            &mut w.ops,
            w.now,
            op_name,
            &ApiError::not_found("TPU node was deleted during the update"),
        ),
    }
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
            rec.body["health"] = json!("HEALTHY");
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
            tpu.nodes.remove(name);
            if let Some(op) = op {
                lro::finish_ok(&mut w.ops, w.now, &op, json!({"@type": lro::EMPTY}));
            }
        }
        _ => {}
    }
}

fn maybe_schedule_workload(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(rec) = tpu.nodes.get(name) else { return };
    if rec.workload_done
        || rec.workload_timer.is_some()
        || rec.body["metadata"][DONE_URI_KEY].as_str().is_none()
    {
        return;
    }
    let script = rec.body["metadata"]["startup-script"]
        .as_str()
        .unwrap_or_default();
    let Some(env) = container_env(script, &rec.body["metadata"]) else {
        // The script still waits for a metadata attribute (a multislice node before the
        // operator told it its slice id): the container has not started.
        return;
    };
    let end = Cloud::add(w.now, w.cfg.durations.tpu_workload);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.workload_end = Some(end);
        rec.workload_env = Some(env);
    }
    workload_log(w, tpu, name, INFO, "Workload container started");
    schedule_workload_step(w, tpu, name);
}

/// A line of the node's workload container on every host, as docker's `gcplogs` driver writes
/// it (when the startup script uses it: `logging::workloads`).
fn workload_log(w: &mut Cloud, tpu: &Tpu, name: &str, severity: i32, text: &str) {
    if !w.cfg.simulate_outputs {
        return;
    }
    let Some(rec) = tpu.nodes.get(name) else { return };
    let Some(script) = rec.body["metadata"]["startup-script"].as_str() else {
        return;
    };
    let hosts = rec.body["networkEndpoints"].as_array().map_or(1, Vec::len);
    let script = script.to_string();
    crate::logging::workloads::workload(w, name, &script, hosts, severity, text);
}

/// The workload's next event: its next checkpoint, or its exit when that comes first (or when
/// it writes no checkpoints).
fn schedule_workload_step(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    let Some(end) = tpu.nodes.get(name).and_then(|r| r.workload_end) else {
        return;
    };
    let every = w.cfg.durations.workload_checkpoint;
    let at = if every.is_zero() || checkpoint_dir(tpu, name).is_none() {
        end
    } else {
        Cloud::add(w.now, every).min(end)
    };
    let t = w.schedule(at, TimerKind::NodeWorkload, name);
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.workload_timer = Some(t);
    }
}

/// The environment a startup script in the operator's format (`docker run ... -e 'K=V' ...`)
/// gives its container, read the way the shell would run it on the VM: `-e 'K=V'` words
/// (single-quoted, `'\''` for a quote), and `-e K` words passing through a variable the script
/// exported from instance metadata (`export K=$(attr KEY)`, the metadata server's
/// `instance/attributes/KEY`). `None` while an exported attribute is missing: the script waits
/// for it (`until [ -n "$(attr KEY)" ] ...`) before it starts the container. A script
/// without `docker run` gives an empty environment.
pub(crate) fn container_env(
    script: &str,
    metadata: &Value,
) -> Option<std::collections::BTreeMap<String, String>> {
    let mut exported = std::collections::BTreeMap::new();
    for line in script.lines() {
        let Some(rest) = line.trim().strip_prefix("export ") else {
            continue;
        };
        let Some((var, value)) = rest.split_once('=') else {
            continue;
        };
        let Some(key) = value.strip_prefix("$(attr ").and_then(|v| v.strip_suffix(')')) else {
            continue;
        };
        exported.insert(var.to_string(), metadata[key].as_str()?.to_string());
    }
    let mut env = std::collections::BTreeMap::new();
    let Some(run) = script.find("docker run ") else {
        return Some(env);
    };
    let words = shell_words(&script[run..]);
    let mut it = words.iter();
    while let Some(word) = it.next() {
        if word != "-e" {
            continue;
        }
        let Some(arg) = it.next() else { break };
        match arg.split_once('=') {
            Some((k, v)) => env.insert(k.to_string(), v.to_string()),
            None => env.insert(arg.clone(), exported.get(arg).cloned().unwrap_or_default()),
        };
    }
    Some(env)
}

/// The words of a shell command line up to its end (`\` line continuations joined), with
/// single quotes removed as the shell does.
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(escaped) => {
                    in_word = true;
                    word.push(escaped);
                }
            },
            '\n' => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The `CHECKPOINT_DIR` the node's startup script passes to its container (`-e
/// 'CHECKPOINT_DIR=gs://…'`, the operator's `docker run` line), ending in `/`.
fn checkpoint_dir(tpu: &Tpu, name: &str) -> Option<String> {
    checkpoint_dir_in(tpu.nodes.get(name)?.body["metadata"]["startup-script"].as_str()?)
}

fn write_checkpoint(w: &mut Cloud, tpu: &mut Tpu, name: &str) {
    if let Some(dir) = checkpoint_dir(tpu, name)
        && let Some(step) = write_checkpoint_to(w, &dir)
    {
        let line = format!("step {step}: checkpoint saved to {dir}{step}/");
        workload_log(w, tpu, name, INFO, &line);
    }
}

/// The simulated training container: a checkpoint while it runs, then its exit, `_SUCCESS` (or
/// `_FAILED` with exit code 1).
pub fn fire_workload(w: &mut Cloud, tpu: &mut Tpu, seq: u64, name: &str) {
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
    if rec.workload_timer != Some(seq) || rec.state() != "READY" {
        return;
    }
    rec.workload_timer = None;
    let ended = rec.workload_end.is_none_or(|end| w.now >= end);
    if !ended {
        if w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name) {
            write_checkpoint(w, tpu, name);
        }
        schedule_workload_step(w, tpu, name);
        return;
    }
    rec.workload_done = true;
    let uri = rec.body["metadata"][DONE_URI_KEY]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let failed = crate::faults::matching(&w.faults.failing_workloads, name).copied();
    for (severity, line) in crate::logging::workloads::exit_lines(failed) {
        workload_log(w, tpu, name, severity, &line);
    }
    if name_matches(&w.faults.suppressed_outputs, name) || !w.cfg.simulate_outputs {
        return;
    }
    crate::outputs::tpu_workload_done(w, &uri, failed);
}

/// Fault: preempt a spot / preemptible node now.
pub fn preempt(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<()> {
    let rec = tpu.nodes.find_mut(name, not_found)?;
    let qr = rec.body["queuedResource"].as_str().map(str::to_string);
    if let Some(qr) = qr {
        return super::queued::preempt(w, tpu, &qr);
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
    let Some(rec) = tpu.nodes.get_mut(name) else {
        return;
    };
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
    if let Some(rec) = tpu.nodes.get_mut(name) {
        rec.body["state"] = json!("DELETING");
        if let Some(m) = rec.body.as_object_mut() {
            m.remove("health");
        }
        rec.timer = Some(t);
        rec.workload_timer = None;
    }
}

#[cfg(test)]
mod tests {
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
