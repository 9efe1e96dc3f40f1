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
    let mut v = super::validate("InstanceGroupManager", req)?;
    let name = super::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{scope}/instanceGroupManagers/{name}");
    if ce.igms.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let region = super::region_of(&zone).to_string();
    let base = v["baseInstanceName"]
        .as_str()
        .ok_or_else(|| errors::required("resource.baseInstanceName"))?
        .to_string();
    let t_url = v["instanceTemplate"]
        .as_str()
        .ok_or_else(|| errors::required("resource.instanceTemplate"))?;
    let template = super::rel(t_url).to_string();
    let tpl = ce.templates.find(&template, errors::not_found)?;
    if !template.starts_with(&format!("projects/{project}/regions/{region}/")) {
        return Err(errors::invalid_field(
            "resource.instanceTemplate",
            t_url,
            &format!("The instance template must be in region {region} or global."),
        ));
    }
    let machine = templates::machine(tpl).expect("validated at template insert");
    let flex = templates::is_flex_start(tpl);
    let policy = match v["resourcePolicies"]["workloadPolicy"].as_str() {
        None => None,
        Some(p) => {
            let k = super::rel(p).to_string();
            if !ce.policies.contains_key(&k) {
                return Err(errors::not_found(&k));
            }
            Some(k)
        }
    };
    let target = v["targetSize"].as_i64().unwrap_or(0);
    if target < 0 {
        return Err(errors::invalid_field(
            "resource.targetSize",
            &target.to_string(),
            "Must be >= 0.",
        ));
    }
    if flex && target > 0 {
        // Assumed: flex-start MIGs are created empty and grow by resize requests only
        // (https://cloud.google.com/compute/docs/instance-groups/create-resize-requests-mig).
        return Err(errors::invalid_field(
            "resource.targetSize",
            &target.to_string(),
            "A MIG whose template uses the FLEX_START provisioning model must be created with targetSize 0; add VMs with resize requests.",
        ));
    }
    check_topology(ce, policy.as_deref(), machine, target)?;
    v["kind"] = json!("compute#instanceGroupManager");
    v["id"] = json!(super::numeric_id(w));
    v["creationTimestamp"] = json!(ts(w.now));
    v["selfLink"] = json!(format!("{BASE}{key}"));
    v["zone"] = json!(format!("{BASE}{scope}"));
    v["instanceGroup"] = json!(format!("{BASE}{scope}/instanceGroups/{name}"));
    v["instanceTemplate"] = json!(format!("{BASE}{template}"));
    if let Some(p) = &policy {
        v["resourcePolicies"]["workloadPolicy"] = json!(format!("{BASE}{p}"));
    }
    v["baseInstanceName"] = json!(base);
    v["fingerprint"] = json!("AAAAAAAAAAA=");
    ce.igms.insert(
        key.clone(),
        IgmRec {
            body: v,
            project: project.to_string(),
            zone: zone.clone(),
            template,
            policy,
            machine,
            target_size: target,
            pending: Vec::new(),
            deleting: None,
        },
    );
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Zone(zone),
        "compute.instanceGroupManagers.insert",
        &key,
    );
    operations::finish_later(w, &op);
    reconcile(w, ce, &key);
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// Member instance keys (including those being deleted).
pub fn members(ce: &ComputeState, key: &str) -> Vec<String> {
    ce.instances
        .iter()
        .filter(|(_, r)| r.igm.as_deref() == Some(key))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Creates VMs `names` from the MIG's template (tagged with resize request `rr`).
pub fn create_members(w: &mut Cloud, ce: &mut ComputeState, key: &str, names: Vec<String>, rr: Option<&str>) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    let Some(tpl) = ce.templates.get(&g.template) else {
        return;
    };
    let (project, zone, machine) = (g.project.clone(), g.zone.clone(), g.machine);
    let mut props = tpl["properties"].clone();
    if let Some(m) = props.as_object_mut() {
        m.remove("machineType");
    }
    let number = w.project_number(&project);
    let mig_name = key.rsplit('/').next().unwrap_or_default();
    let mut items = props["metadata"]["items"].as_array().cloned().unwrap_or_default();
    items.push(json!({"key": "created-by", "value": format!("projects/{number}/zones/{zone}/instanceGroupManagers/{mig_name}")}));
    props["metadata"]["items"] = Value::Array(items);
    for name in names {
        let mut body = props.clone();
        body["name"] = json!(name);
        instances::create(
            w,
            ce,
            NewInstance {
                project: project.clone(),
                zone: zone.clone(),
                name,
                body,
                machine,
                igm: Some(key.to_string()),
                resize: rr.map(str::to_string),
                insert_op: None,
            },
        );
    }
}

/// A fresh VM name `{baseInstanceName}-{4 chars}`, unique in the zone.
pub fn new_name(w: &mut Cloud, ce: &mut ComputeState, key: &str) -> String {
    let (base, zone_prefix) = {
        let g = &ce.igms[key];
        (
            g.body["baseInstanceName"].as_str().unwrap_or("vm").to_string(),
            format!("projects/{}/zones/{}/instances/", g.project, g.zone),
        )
    };
    loop {
        let n = format!("{base}-{}", super::suffix(w));
        if !ce.instances.contains_key(&format!("{zone_prefix}{n}")) {
            return n;
        }
    }
}

/// Brings the MIG toward `targetSize`: creates all missing VMs at once when capacity allows,
/// else keeps their names pending (reported as `currentActions.creating`).
pub fn reconcile(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    if g.deleting.is_some() {
        return;
    }
    let live = ce
        .instances
        .values()
        .filter(|r| r.igm.as_deref() == Some(key) && r.status() != "STOPPING")
        .count() as i64;
    let missing = g.target_size - live;
    let (zone, machine) = (g.zone.clone(), g.machine);
    if missing <= 0 {
        ce.igms.get_mut(key).expect("present").pending.clear();
        return;
    }
    let mut names = std::mem::take(&mut ce.igms.get_mut(key).expect("present").pending);
    // A reserved name someone took meanwhile (instances.insert) is replaced.
    let prefix = format!("projects/{}/zones/{zone}/instances/", ce.igms[key].project);
    names.retain(|n| !ce.instances.contains_key(&format!("{prefix}{n}")));
    names.truncate(missing as usize);
    while names.len() < missing as usize {
        names.push(new_name(w, ce, key));
    }
    if instances::has_capacity(w, ce, &zone, machine, missing as u64) {
        create_members(w, ce, key, names, None);
    } else {
        ce.igms.get_mut(key).expect("present").pending = names;
    }
}

/// A member is gone: finish a deletion, or replace it.
pub fn member_gone(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let Some(g) = ce.igms.get(key) else {
        return;
    };
    match g.deleting.clone() {
        Some(op) if members(ce, key).is_empty() => {
            ce.igms.remove(key);
            let prefix = format!("{key}/resizeRequests/");
            ce.resize.retain(|k, _| !k.starts_with(&prefix));
            operations::done(w, ce, &op);
        }
        Some(_) => {}
        None => reconcile(w, ce, key),
    }
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
