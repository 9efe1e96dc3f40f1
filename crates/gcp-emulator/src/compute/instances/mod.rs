//! Zonal `instances`: insert / get / delete / list, the PROVISIONING -> STAGING -> RUNNING and
//! STOPPING -> gone | TERMINATED lifecycle, capacity, Spot preemption, and `maxRunDuration`.
//!
//! Sources: instance states PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED
//! (https://cloud.google.com/compute/docs/instances/instance-life-cycle); the `Scheduling`
//! schema of the discovery document (`provisioningModel`, `instanceTerminationAction`,
//! `maxRunDuration`, `onHostMaintenance`); Spot preemption stops or deletes the VM per
//! `instanceTerminationAction` (https://cloud.google.com/compute/docs/instances/spot);
//! flex-start VMs need `instanceTerminationAction: DELETE` and a `maxRunDuration`
//! (https://cloud.google.com/compute/docs/instances/provisioning-models and
//! https://cloud.google.com/compute/docs/instances/create-flex-start-vms); a stocked-out zone
//! fails the insert operation with `ZONE_RESOURCE_POOL_EXHAUSTED` ("The zone '...' does not have
//! enough resources available to fulfill the request. Try a different zone, or try again
//! later.", https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability).

use super::ComputeState;
use super::machines::{self, Machine};
use super::{BASE, Loc, errors, operations};
use crate::api::Req;
use crate::capacity::CapacityKind;
use crate::cloud::{Cloud, TimerKind};
use crate::errors::{ApiError, ApiResult};
use crate::wire::time::ts;
use serde_json::{Value, json};

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod lifecycle;

pub use lifecycle::*;

pub const STOCKOUT_CODE: &str = "ZONE_RESOURCE_POOL_EXHAUSTED";
/// The HTTP status fields of a stocked-out insert operation (assumed).
pub const STOCKOUT_HTTP: (u16, &str) = (503, "SERVICE UNAVAILABLE");

pub fn stockout_message(project: &str, zone: &str) -> String {
    format!(
        "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."
    )
}

#[derive(Debug)]
pub struct InstanceRec {
    pub body: Value,
    /// The pending lifecycle timer (superseded timers are ignored).
    pub seq: u64,
    /// The pending `maxRunDuration` timer.
    pub end_seq: u64,
    /// The insert operation, until RUNNING (or failure).
    pub insert_op: Option<String>,
    /// Delete operations, done when the instance is gone.
    pub delete_ops: Vec<String>,
    /// The MIG that manages it, and the resize request that created it.
    pub igm: Option<String>,
    pub resize: Option<String>,
    pub machine: &'static Machine,
    pub project: String,
    pub zone: String,
    /// No capacity: the insert fails when PROVISIONING would end.
    pub doomed: bool,
    /// STOPPING ends in TERMINATED (Spot STOP) instead of deletion.
    pub to_terminated: bool,
    /// The simulated workload's pending timer and end (`compute::workload`).
    pub workload_seq: u64,
    pub workload_end: Option<chrono::DateTime<chrono::Utc>>,
    /// The workload's step model and the VM's maintenance event (`compute::maintenance`).
    pub run: crate::training::RunState,
}

impl InstanceRec {
    pub fn status(&self) -> &str {
        self.body["status"].as_str().unwrap_or("")
    }
    /// Holds capacity (TERMINATED and doomed instances do not).
    pub fn holds_capacity(&self) -> bool {
        !self.doomed && self.status() != "TERMINATED"
    }
}

/// Capacity for `hosts` more VMs of `m` in `zone`: no stockout fault (TPU `Stockout` /
/// `CapacityError` naming the machine type or its family) and within `ComputeCapacity`.
/// Also within the zone's stock of `kind` for `m` ([`crate::capacity::stock`]), counting the
/// chips of the live VMs of that kind.
pub fn has_capacity(
    w: &Cloud,
    ce: &ComputeState,
    zone: &str,
    m: &Machine,
    hosts: u64,
    kind: CapacityKind,
) -> bool {
    let f = &w.faults;
    let blocked = f
        .stockouts
        .iter()
        .any(|(z, a)| z == zone && machines::matches(a, m))
        || f.capacity_errors
            .iter()
            .any(|c| c.zone == zone && machines::matches(&c.accelerator, m));
    if blocked || !within_stock(w, ce, zone, m, hosts, kind) {
        return false;
    }
    match f.compute_capacity.get(&format!("{zone}/{}", m.name)) {
        None => true,
        Some(limit) => {
            let used = ce
                .instances
                .values()
                .filter(|r| r.zone == zone && r.machine.name == m.name && r.holds_capacity())
                .count() as u64;
            used + hosts <= *limit
        }
    }
}

fn within_stock(
    w: &Cloud,
    ce: &ComputeState,
    zone: &str,
    m: &Machine,
    hosts: u64,
    kind: CapacityKind,
) -> bool {
    let Some(entry) = w.capacity.stock.entry(zone, kind, |p| machines::matches(p, m)) else {
        return true;
    };
    let held: u64 = ce
        .instances
        .values()
        .filter(|r| {
            r.zone == zone && r.holds_capacity() && machines::matches(&entry.spec.accelerator, r.machine)
        })
        .filter(|r| CapacityKind::of_instance(&r.body) == kind)
        .map(|r| r.machine.chips)
        .sum();
    entry.admits(held, hosts * m.chips, w.now)
}

/// Checks the scheduling block shared by instances and templates.
pub fn check_scheduling(v: &Value, m: &Machine, prefix: &str, need_run_duration: bool) -> ApiResult<()> {
    let s = &v["scheduling"];
    if s["onHostMaintenance"] == "MIGRATE" {
        // TPU VMs cannot live-migrate (assumed from "TPU machine types": TPU VMs are terminated
        // for host maintenance).
        return Err(errors::invalid_field(
            &format!("{prefix}scheduling.onHostMaintenance"),
            "MIGRATE",
            &format!(
                "Machine type {} does not support live migration; use TERMINATE.",
                m.name
            ),
        ));
    }
    if s["provisioningModel"] == "FLEX_START" {
        if s["instanceTerminationAction"] != "DELETE" {
            return Err(errors::invalid_field(
                &format!("{prefix}scheduling.instanceTerminationAction"),
                s["instanceTerminationAction"].as_str().unwrap_or(""),
                "Flex-start VMs require instanceTerminationAction DELETE.",
            ));
        }
        if need_run_duration && s["maxRunDuration"].is_null() {
            return Err(errors::required(&format!("{prefix}scheduling.maxRunDuration")));
        }
    }
    Ok(())
}

/// What to create (from `instances.insert` or a MIG's template).
pub struct NewInstance {
    pub project: String,
    pub zone: String,
    pub name: String,
    /// The validated input body (`machineType` as given).
    pub body: Value,
    pub machine: &'static Machine,
    pub igm: Option<String>,
    pub resize: Option<String>,
    pub insert_op: Option<String>,
}

/// Creates the instance (PROVISIONING) and schedules its lifecycle; returns its key.
pub fn create(w: &mut Cloud, ce: &mut ComputeState, n: NewInstance) -> String {
    let key = format!("projects/{}/zones/{}/instances/{}", n.project, n.zone, n.name);
    let doomed = !has_capacity(w, ce, &n.zone, n.machine, 1, CapacityKind::of_instance(&n.body));
    let mut body = n.body;
    body["kind"] = json!("compute#instance");
    body["id"] = json!(super::numeric_id(w));
    body["name"] = json!(n.name);
    body["creationTimestamp"] = json!(ts(w.now));
    body["selfLink"] = json!(format!("{BASE}{key}"));
    body["zone"] = json!(format!("{BASE}projects/{}/zones/{}", n.project, n.zone));
    body["machineType"] = json!(format!(
        "{BASE}projects/{}/zones/{}/machineTypes/{}",
        n.project, n.zone, n.machine.name
    ));
    body["status"] = json!("PROVISIONING");
    body["metadata"]["fingerprint"] = json!(metadata_fingerprint(w));
    let mut nics = body["networkInterfaces"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    for (i, nic) in nics.iter_mut().enumerate() {
        ce.next_ip += 1;
        let ip = ce.next_ip;
        nic["kind"] = json!("compute#networkInterface");
        nic["name"] = json!(format!("nic{i}"));
        nic["networkIP"] = json!(format!("10.128.{}.{}", (ip >> 8) & 255, ip & 255));
        if nic["network"].is_null() {
            nic["network"] = json!(format!("{BASE}projects/{}/global/networks/default", n.project));
        }
    }
    body["networkInterfaces"] = Value::Array(nics);
    let at = Cloud::add(w.now, w.cfg.durations.instance_provision);
    let seq = w.schedule(at, TimerKind::Compute, &format!("i|{key}"));
    ce.instances.insert(
        key.clone(),
        InstanceRec {
            body,
            seq,
            end_seq: 0,
            insert_op: n.insert_op,
            delete_ops: Vec::new(),
            igm: n.igm,
            resize: n.resize,
            machine: n.machine,
            project: n.project,
            zone: n.zone,
            doomed,
            to_terminated: false,
            workload_seq: 0,
            workload_end: None,
            run: Default::default(),
        },
    );
    key
}

pub fn insert(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let v = super::validate("Instance", req)?;
    let name = super::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{scope}/instances/{name}");
    if ce.instances.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let mt = v["machineType"]
        .as_str()
        .ok_or_else(|| errors::required("resource.machineType"))?;
    let machine = match machines::parse_url(mt) {
        Some((z, t)) if z == zone => machines::find(&t).ok_or_else(|| {
            errors::invalid_field(
                "resource.machineType",
                mt,
                &format!("Machine type with name '{t}' does not exist in zone '{zone}'."),
            )
        })?,
        _ => {
            return Err(errors::invalid_field(
                "resource.machineType",
                mt,
                &format!("Expected a machine type URL of zone '{zone}' (zones/{zone}/machineTypes/TYPE)."),
            ));
        }
    };
    check_scheduling(&v, machine, "resource.", true)?;
    let op = operations::start(w, ce, project, &Loc::Zone(zone.clone()), "insert", &key);
    create(
        w,
        ce,
        NewInstance {
            project: project.to_string(),
            zone,
            name,
            body: v,
            machine,
            igm: None,
            resize: None,
            insert_op: Some(op.clone()),
        },
    );
    Ok(operations::remember(w, ce, scope, req, &op))
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    ce.instances.find(key, errors::not_found).map(|r| r.body.clone())
}

pub fn list(ce: &ComputeState, scope: &str, req: &Req) -> ApiResult<Value> {
    super::list_collection(
        &ce.instances,
        &format!("{scope}/instances"),
        "compute#instanceList",
        &["name", "status", "labels", "machineType", "zone", "id"],
        req,
        |_, r| Some(r.body.clone()),
    )
}

/// Finds an instance by key or (unique) bare name.
pub(crate) fn find_key(ce: &ComputeState, name: &str) -> Option<String> {
    if ce.instances.contains_key(name) {
        return Some(name.to_string());
    }
    let mut hits = ce.instances.keys().filter(|k| k.rsplit('/').next() == Some(name));
    let first = hits.next()?.clone();
    hits.next().is_none().then_some(first)
}

/// A new metadata fingerprint: Compute's are opaque base64 strings that change with every
/// change of the metadata (16 hex digits are valid base64).
pub fn metadata_fingerprint(w: &mut Cloud) -> String {
    format!("{:016x}", w.next_seq())
}
