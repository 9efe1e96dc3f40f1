//! Regional instance templates (`regionInstanceTemplates` insert / get / delete / list).
//!
//! Sources: the discovery document's `InstanceTemplate` / `InstanceProperties` (in templates
//! `properties.machineType` is the machine type name, e.g. `ct6e-standard-4t`, not a URL:
//! https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceTemplates); deleting a
//! template a MIG uses is refused with `resourceInUseByAnotherResource`
//! (https://cloud.google.com/compute/docs/instance-templates/delete-instance-templates: "you can't
//! delete an instance template that is referenced by a MIG").

use super::ComputeState;
use super::{BASE, Loc, errors, machines, operations};
use crate::api::Req;
use crate::cloud::Cloud;
use crate::errors::ApiResult;
use crate::wire::time::ts;
use serde_json::{Value, json};

/// The machine type of a template (validated at insert).
pub fn machine(t: &Value) -> Option<&'static machines::Machine> {
    machines::find(t["properties"]["machineType"].as_str()?)
}

pub fn is_flex_start(t: &Value) -> bool {
    t["properties"]["scheduling"]["provisioningModel"] == "FLEX_START"
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
    let mut v = super::validate("InstanceTemplate", req)?;
    let name = super::check_name(v["name"].as_str(), "resource.name")?;
    let key = format!("{scope}/instanceTemplates/{name}");
    if ce.templates.contains_key(&key) {
        return Err(errors::already_exists(&key));
    }
    let field = "resource.properties.machineType";
    let mt = v["properties"]["machineType"]
        .as_str()
        .ok_or_else(|| errors::required(field))?;
    let m = machines::find(mt).ok_or_else(|| {
        errors::invalid_field(
            field,
            mt,
            &format!("Machine type with name '{mt}' does not exist."),
        )
    })?;
    super::instances::check_scheduling(&v["properties"], m, "resource.properties.", false)?;
    let region = scope.rsplit('/').next().unwrap_or_default().to_string();
    v["kind"] = json!("compute#instanceTemplate");
    v["id"] = json!(super::numeric_id(w));
    v["creationTimestamp"] = json!(ts(w.now));
    v["selfLink"] = json!(format!("{BASE}{key}"));
    v["region"] = json!(format!("{BASE}{scope}"));
    ce.templates.insert(key.clone(), v);
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Region(region),
        "compute.regionInstanceTemplates.insert",
        &key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}

pub fn get(ce: &ComputeState, key: &str) -> ApiResult<Value> {
    ce.templates.find(key, errors::not_found).cloned()
}

pub fn list(ce: &ComputeState, scope: &str, req: &Req) -> ApiResult<Value> {
    super::list_collection(
        &ce.templates,
        &format!("{scope}/instanceTemplates"),
        "compute#instanceTemplateList",
        &["name", "id"],
        req,
        |_, t| Some(t.clone()),
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
    if !ce.templates.contains_key(key) {
        return Err(errors::not_found(key));
    }
    if let Some((user, _)) = ce.igms.iter().find(|(_, g)| g.template == key) {
        return Err(errors::in_use("instance_template", key, user));
    }
    ce.templates.remove(key);
    let region = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(
        w,
        ce,
        project,
        &Loc::Region(region),
        "compute.regionInstanceTemplates.delete",
        key,
    );
    operations::finish_later(w, &op);
    Ok(operations::remember(w, ce, scope, req, &op))
}
