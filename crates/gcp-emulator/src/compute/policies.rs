//! Regional resource policies (`resourcePolicies` insert / get / delete / list), of which the
//! emulator gives meaning to `workloadPolicy {type, acceleratorTopology}`.
//!
//! Sources: the discovery document's `ResourcePolicyWorkloadPolicy` (`type` HIGH_AVAILABILITY |
//! HIGH_THROUGHPUT, `acceleratorTopology`); "About workload policies" (a MIG with a multi-host
//! TPU slice needs one, https://docs.cloud.google.com/compute/docs/instance-groups/about-workload-policies)
//! and "Create a MIG with a multi-host TPU slice"
//! (https://docs.cloud.google.com/compute/docs/tpus/create-tpu-mig-multi-host-slice): the
//! `--accelerator-topology` of the slice, e.g. `2x4` for two `ct6e-standard-4t` hosts.

use super::ComputeState;
use super::{BASE, Loc, errors, machines, operations};
use crate::api::Req;
use crate::cloud::Cloud;
use crate::errors::ApiResult;
use crate::wire::time::ts;
use serde_json::{Value, json};

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
    let mut v = super::validate("ResourcePolicy", req)?;
    let name = super::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{scope}/resourcePolicies/{name}");
    if ce.policies.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let wp = &v["workloadPolicy"];
    if !wp.is_null() {
        if wp["type"].is_null() {
            return Err(errors::required("resource.workloadPolicy.type"));
        }
        if let Some(t) = wp["acceleratorTopology"].as_str()
            && machines::topology_chips(t).is_none()
        {
            return Err(errors::invalid_field(
                "resource.workloadPolicy.acceleratorTopology",
                t,
                "Expected a topology like 2x4 or 2x2x2.",
            ));
        }
    }
    let region = scope.rsplit('/').next().unwrap_or_default().to_string();
    v["kind"] = json!("compute#resourcePolicy");
    v["id"] = json!(super::numeric_id(w));
    v["creationTimestamp"] = json!(ts(w.now));
    v["selfLink"] = json!(format!("{BASE}{key}"));
    v["region"] = json!(format!("{BASE}{scope}"));
    v["status"] = json!("READY");
    ce.policies.insert(key.clone(), v);
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Region(region),
        "compute.resourcePolicies.insert",
        &key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    ce.policies.find(key, errors::not_found).cloned()
}

pub fn list(ce: &ComputeState, scope: &str, req: &Req) -> ApiResult<Value> {
    super::list_collection(
        &ce.policies,
        &format!("{scope}/resourcePolicies"),
        "compute#resourcePolicyList",
        &["name", "id", "status"],
        req,
        |_, p| Some(p.clone()),
    )
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
    if !ce.policies.contains_key(key) {
        return Err(errors::not_found(key));
    }
    if let Some((user, _)) = ce.igms.iter().find(|(_, g)| g.policy.as_deref() == Some(key)) {
        return Err(errors::in_use("resource_policy", key, user));
    }
    ce.policies.remove(key);
    let region = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Region(region),
        "compute.resourcePolicies.delete",
        key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}
