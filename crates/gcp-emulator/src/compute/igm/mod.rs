//! Zonal managed instance groups (`instanceGroupManagers` insert / get / delete / list,
//! `listManagedInstances`).
//!
//! Sources: the discovery document's `InstanceGroupManager` (`instanceTemplate`,
//! `baseInstanceName`, `targetSize`, `resourcePolicies.workloadPolicy`, `status.isStable`,
//! `currentActions`) and `ManagedInstance` (`instance`, `instanceStatus`, `currentAction`,
//! `lastAttempt`); MIG VM names are `baseInstanceName` plus a hyphen and four random characters
//! and carry the `created-by` metadata key naming the MIG
//! (https://cloud.google.com/compute/docs/instance-groups/working-with-managed-instances and
//! https://cloud.google.com/compute/docs/instance-groups/getting-info-about-migs); MIGs keep
//! trying to create missing VMs and report them in `currentActions.creating`
//! (https://cloud.google.com/compute/docs/instance-groups/about-instance-groups); TPU VMs in MIGs,
//! single-host or one multi-host slice with a workload policy
//! (https://docs.cloud.google.com/tpu/docs/tpus-and-migs); a MIG recreates a preempted Spot VM
//! when capacity allows (https://cloud.google.com/compute/docs/instances/spot).

use super::ComputeState;
use super::instances::{self, NewInstance};
use super::machines::Machine;
use super::{BASE, Loc, errors, operations, templates};
use crate::api::Req;
use crate::cloud::Cloud;
use crate::errors::ApiResult;
use crate::wire::time::ts;
use serde_json::{Value, json};

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod insert;
mod members;

pub use insert::*;
pub use members::*;

#[derive(Debug)]
pub struct IgmRec {
    /// The stored body; `status`, `currentActions` and `targetSize` are computed by [`view`].
    pub body: Value,
    pub project: String,
    pub zone: String,
    /// Template key (`projects/p/regions/r/instanceTemplates/t`) and workload policy key.
    pub template: String,
    pub policy: Option<String>,
    pub machine: &'static Machine,
    pub target_size: i64,
    /// Names reserved for VMs still waiting for capacity.
    pub pending: Vec<String>,
    /// The delete operation, once deletion began.
    pub deleting: Option<String>,
}

/// The capacity kind its members take, from its template's scheduling.
pub fn kind(ce: &ComputeState, g: &IgmRec) -> crate::capacity::CapacityKind {
    let props = ce.templates.get(&g.template).map(|t| &t["properties"]);
    props.map_or(
        crate::capacity::CapacityKind::OnDemand,
        crate::capacity::CapacityKind::of_instance,
    )
}

/// Refuses a TPU slice whose workload policy topology does not hold `hosts` VMs of `m`.
pub fn check_topology(ce: &ComputeState, policy: Option<&str>, m: &Machine, hosts: i64) -> ApiResult<()> {
    let topo = policy
        .and_then(|p| ce.policies.get(p))
        .and_then(|p| p["workloadPolicy"]["acceleratorTopology"].as_str());
    let Some(topo) = topo else {
        return Ok(());
    };
    let chips = super::machines::topology_chips(topo).unwrap_or(0);
    if m.single_host_only && chips > m.chips {
        return Err(errors::invalid(format!(
            "Machine type {} supports single-host TPU slices only; accelerator topology {topo} has {chips} chips.",
            m.name
        )));
    }
    if hosts > 0 && chips != m.chips * hosts as u64 {
        return Err(errors::invalid(format!(
            "Accelerator topology {topo} ({chips} chips) does not match {hosts} VMs of machine type {} ({} chips each).",
            m.name, m.chips
        )));
    }
    Ok(())
}

/// The MIG as `get` serves it, with `targetSize`, `status` and `currentActions` computed now.
pub fn view(ce: &ComputeState, key: &str) -> Option<Value> {
    let g = ce.igms.get(key)?;
    let mut creating = g.pending.len() as i64;
    let (mut deleting, mut none) = (0i64, 0i64);
    for r in ce.instances.values().filter(|r| r.igm.as_deref() == Some(key)) {
        match r.status() {
            "PROVISIONING" | "STAGING" => creating += 1,
            "STOPPING" => deleting += 1,
            _ => none += 1,
        }
    }
    let mut v = g.body.clone();
    v["targetSize"] = json!(g.target_size);
    v["status"] = json!({"isStable": creating == 0 && deleting == 0 && g.deleting.is_none()});
    v["currentActions"] = json!({
        "abandoning": 0, "creating": creating, "creatingWithoutRetries": 0, "deleting": deleting,
        "none": none, "recreating": 0, "refreshing": 0, "restarting": 0, "resuming": 0,
        "starting": 0, "stopping": 0, "suspending": 0, "verifying": 0,
    });
    Some(v)
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    view(ce, key).ok_or_else(|| errors::not_found(key))
}

pub fn list(ce: &ComputeState, scope: &str, req: &Req) -> ApiResult<Value> {
    super::list_collection(
        &ce.igms,
        &format!("{scope}/instanceGroupManagers"),
        "compute#instanceGroupManagerList",
        &["name", "id"],
        req,
        |k, _| view(ce, k),
    )
}

/// `listManagedInstances`: members with `instanceStatus` / `currentAction`, and VMs still
/// waiting for capacity (`currentAction` CREATING, `lastAttempt.errors` naming the stockout).
pub fn list_managed(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    let g = ce.igms.find(key, errors::not_found)?;
    let version = json!({"instanceTemplate": format!("{BASE}{}", g.template)});
    let mut out = Vec::new();
    for (k, r) in ce.instances.iter().filter(|(_, r)| r.igm.as_deref() == Some(key)) {
        let action = match r.status() {
            "PROVISIONING" | "STAGING" => "CREATING",
            "STOPPING" => "DELETING",
            _ => "NONE",
        };
        out.push(json!({
            "instance": format!("{BASE}{k}"),
            "name": r.body["name"],
            "id": r.body["id"],
            "instanceStatus": r.status(),
            "currentAction": action,
            "version": version,
        }));
    }
    for n in &g.pending {
        let msg = instances::stockout_message(&g.project, &g.zone);
        out.push(json!({
            "instance": format!("{BASE}projects/{}/zones/{}/instances/{n}", g.project, g.zone),
            "name": n,
            "currentAction": "CREATING",
            "version": version,
            "lastAttempt": {"errors": {"errors": [{"code": instances::STOCKOUT_CODE, "message": msg}]}},
        }));
    }
    Ok(json!({"managedInstances": out}))
}

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
    if !ce.igms.contains_key(key) {
        return Err(errors::not_found(key));
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagers.delete",
        key,
    );
    if ce.igms[key].deleting.is_some() {
        // Already being deleted: this operation ends with the first one.
        operations::finish_later(w, &op);
        return Ok(operations::remember(w, ce, scope, req, &op));
    }
    {
        let g = ce.igms.get_mut(key).expect("present");
        g.deleting = Some(op.clone());
        g.pending.clear();
    }
    for m in members(ce, key) {
        instances::begin_delete(w, ce, &m, None);
    }
    member_gone(w, ce, key);
    Ok(operations::remember(w, ce, scope, req, &op))
}
