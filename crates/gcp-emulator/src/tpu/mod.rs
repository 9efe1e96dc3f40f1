//! Cloud TPU API v2, served under `/tpu/v2/...`.

pub mod catalog;
pub mod nodes;
pub mod queued;
pub mod reservations;
pub mod stock;

use crate::api::{Reply, Req, list_body, no_route};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult};
use crate::lro;
use crate::store::{Paging, Store};
use crate::wire::schema::Svc;
use crate::wire::time::ts;
use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The TPU service's resources (its operations are in [`Cloud::ops`]).
#[derive(Default)]
pub struct Tpu {
    pub nodes: Store<nodes::NodeRec>,
    pub qrs: Store<queued::QrRec>,
    /// TPU reservations: full name -> chips (`reservations.rs`).
    pub reservations: BTreeMap<String, u64>,
}

/// Every TPU list pages by `pageSize`, default and max 1000.
pub const PAGING: Paging = Paging::page_size(1000, 1000);

pub const NODE_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.Node";
pub const QR_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource";
/// Real TPU operations carry this metadata type (not `google.cloud.tpu.v2.OperationMetadata`).
pub const OP_META_TYPE: &str = "type.googleapis.com/google.cloud.common.OperationMetadata";

/// `projects/p/locations/zone` -> (p, zone).
pub fn split_parent(parent: &str) -> ApiResult<(String, String)> {
    let parts: Vec<&str> = parent.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "locations", z] if !p.is_empty() && !z.is_empty() => {
            Ok((p.to_string(), z.to_string()))
        }
        _ => Err(ApiError::invalid_field(
            "parent",
            format!("Invalid parent \"{parent}\""),
        )),
    }
}

pub fn tpu_op_name(w: &mut Cloud, parent: &str) -> String {
    let millis = w.now.timestamp_millis();
    let id = w.uuid().replace('-', "");
    format!("{parent}/operations/operation-{millis}-{}", &id[..24])
}

pub fn op_metadata(now: DateTime<Utc>, target: &str, verb: &str) -> Value {
    json!({"@type": OP_META_TYPE, "apiVersion": "v2", "createTime": ts(now), "target": target, "verb": verb})
}

/// A parsed TPU request.
#[derive(Debug)]
pub enum Route {
    LocationsList {
        project: String,
    },
    LocationsGet {
        project: String,
        zone: String,
    },
    Collection {
        project: String,
        zone: String,
        coll: String,
    },
    Item {
        project: String,
        zone: String,
        coll: String,
        id: String,
    },
}

pub fn route(req: &Req) -> Option<(Route, &'static str)> {
    let s: Vec<&str> = req.segs.iter().map(String::as_str).collect();
    let verb = req.verb.as_deref();
    let m = &req.method;
    let r = match s.as_slice() {
        ["projects", p, "locations"] if *m == Method::GET => (
            Route::LocationsList {
                project: p.to_string(),
            },
            "locations.list",
        ),
        ["projects", p, "locations", z] if verb == Some("generateServiceIdentity") && *m == Method::POST => (
            Route::LocationsGet {
                project: p.to_string(),
                zone: z.to_string(),
            },
            "locations.generateServiceIdentity",
        ),
        ["projects", p, "locations", z] if *m == Method::GET && verb.is_none() => (
            Route::LocationsGet {
                project: p.to_string(),
                zone: z.to_string(),
            },
            "locations.get",
        ),
        ["projects", p, "locations", z, coll] if verb.is_none() => {
            let id = collection_method(coll, m)?;
            (
                Route::Collection {
                    project: p.to_string(),
                    zone: z.to_string(),
                    coll: coll.to_string(),
                },
                id,
            )
        }
        ["projects", p, "locations", z, coll, id] => {
            let mid = item_method(coll, m, verb).or_else(|| {
                (req.version == "v2alpha1")
                    .then(|| alpha_method(coll, m, verb))
                    .flatten()
            })?;
            let r = Route::Item {
                project: p.to_string(),
                zone: z.to_string(),
                coll: coll.to_string(),
                id: id.to_string(),
            };
            (r, mid)
        }
        _ => return None,
    };
    Some(r)
}

pub fn handle(w: &mut Cloud, tpu: &mut Tpu, req: &Req, route: Route, method: &str) -> ApiResult<Reply> {
    match route {
        Route::LocationsList { project } => {
            let locs: Vec<Value> = catalog::ZONES
                .iter()
                .map(|z| json!({"name": format!("projects/{project}/locations/{z}"), "locationId": z}))
                .collect();
            Ok(Reply::json(list_body("locations", locs, None)))
        }
        Route::LocationsGet { project, zone } => location_get(w, &project, &zone, method),
        Route::Collection { project, zone, coll } => {
            w.project_number(&project);
            collection(w, tpu, req, &project, &zone, &coll, method)
        }
        Route::Item {
            project,
            zone,
            coll,
            id,
        } => {
            let name = format!("projects/{project}/locations/{zone}/{coll}/{id}");
            let parent = format!("projects/{project}/locations/{zone}");
            item(w, tpu, req, &name, &parent, method)
        }
    }
}

/// The method id of a call on a collection (`None`: no such method).
fn collection_method(coll: &str, m: &Method) -> Option<&'static str> {
    Some(match (coll, m.clone()) {
        ("nodes", Method::GET) => "nodes.list",
        ("nodes", Method::POST) => "nodes.create",
        ("queuedResources", Method::GET) => "queuedResources.list",
        ("queuedResources", Method::POST) => "queuedResources.create",
        ("operations", Method::GET) => "operations.list",
        ("acceleratorTypes", Method::GET) => "acceleratorTypes.list",
        ("runtimeVersions", Method::GET) => "runtimeVersions.list",
        _ => return None,
    })
}

/// The method id of a call on one item, custom verbs included (`None`: no such method).
fn item_method(coll: &str, m: &Method, verb: Option<&str>) -> Option<&'static str> {
    Some(match (coll, m.clone(), verb) {
        ("nodes", Method::GET, None) => "nodes.get",
        ("nodes", Method::DELETE, None) => "nodes.delete",
        ("nodes", Method::PATCH, None) => "nodes.patch",
        ("nodes", Method::POST, Some("stop")) => "nodes.stop",
        ("nodes", Method::POST, Some("start")) => "nodes.start",
        ("nodes", Method::POST, Some("getGuestAttributes")) => "nodes.getGuestAttributes",
        ("queuedResources", Method::GET, None) => "queuedResources.get",
        ("queuedResources", Method::DELETE, None) => "queuedResources.delete",
        ("queuedResources", Method::POST, Some("reset")) => "queuedResources.reset",
        ("operations", Method::GET, None) => "operations.get",
        ("operations", Method::DELETE, None) => "operations.delete",
        ("operations", Method::POST, Some("cancel")) => "operations.cancel",
        ("acceleratorTypes", Method::GET, None) => "acceleratorTypes.get",
        ("runtimeVersions", Method::GET, None) => "runtimeVersions.get",
        _ => return None,
    })
}

/// The v2alpha1-only methods on one item (the maintenance methods; v2alpha1 serves the v2
/// methods too, on the same resources).
fn alpha_method(coll: &str, m: &Method, verb: Option<&str>) -> Option<&'static str> {
    Some(match (coll, m.clone(), verb) {
        ("nodes", Method::POST, Some("performMaintenance")) => "nodes.performMaintenance",
        ("nodes", Method::POST, Some("simulateMaintenanceEvent")) => "nodes.simulateMaintenanceEvent",
        ("queuedResources", Method::POST, Some("performMaintenanceQueuedResource")) => {
            "queuedResources.performMaintenanceQueuedResource"
        }
        _ => return None,
    })
}

/// locations.get and locations.generateServiceIdentity.
fn location_get(w: &mut Cloud, project: &str, zone: &str, method: &str) -> ApiResult<Reply> {
    if method == "locations.generateServiceIdentity" {
        let n = w.project_number(project);
        return Ok(Reply::json(json!({"identity": {
            "email": format!("service-{n}@cloud-tpu.iam.gserviceaccount.com"),
            "uniqueId": (n * 1000 + 1).to_string()}})));
    }
    if !catalog::ZONES.contains(&zone) {
        return Err(ApiError::not_found(format!(
            "Location projects/{project}/locations/{zone} not found"
        )));
    }
    Ok(Reply::json(
        json!({"name": format!("projects/{project}/locations/{zone}"), "locationId": zone}),
    ))
}

/// The calls on a collection: create and list.
fn collection(
    w: &mut Cloud,
    tpu: &mut Tpu,
    req: &Req,
    project: &str,
    zone: &str,
    coll: &str,
    method: &str,
) -> ApiResult<Reply> {
    let parent = format!("projects/{project}/locations/{zone}");
    match method {
        "nodes.create" => nodes::create(w, tpu, project, zone, &req.query, &req.json()?),
        "nodes.list" => nodes::list(tpu, &parent, &req.query),
        "queuedResources.create" => queued::create(w, tpu, project, zone, &req.query, &req.json()?),
        "queuedResources.list" => queued::list(tpu, &parent, &req.query),
        "operations.list" => {
            let all = lro::list(&w.ops, Svc::Tpu, &parent, req.query.get("filter"))?;
            let (items, next) = PAGING.page(&all, &req.query)?;
            Ok(Reply::ops(list_body("operations", items, next)))
        }
        "acceleratorTypes.list" => catalog_list(catalog::accelerator_types(&parent), "acceleratorTypes", req),
        "runtimeVersions.list" => catalog_list(catalog::runtime_versions(&parent), "runtimeVersions", req),
        _ => Err(no_route(&req.method, coll)),
    }
}

/// The calls on one item (`name`, in the location `parent`).
fn item(w: &mut Cloud, tpu: &mut Tpu, req: &Req, name: &str, parent: &str, method: &str) -> ApiResult<Reply> {
    match method {
        "nodes.get" => nodes::get(tpu, name),
        "nodes.delete" => nodes::delete(w, tpu, name),
        "nodes.patch" => nodes::patch(w, tpu, name, &req.query, &req.json()?),
        "nodes.stop" => nodes::stop(w, tpu, name),
        "nodes.start" => nodes::start(w, tpu, name),
        "nodes.getGuestAttributes" => nodes::guest_attributes(tpu, name, &req.json()?),
        "nodes.performMaintenance" => nodes::perform_maintenance(w, tpu, name, &req.json()?),
        "nodes.simulateMaintenanceEvent" => nodes::simulate_maintenance(w, tpu, name, &req.json()?),
        "queuedResources.get" => queued::get(tpu, name),
        "queuedResources.delete" => queued::delete(w, tpu, name, &req.query),
        "queuedResources.reset" => queued::reset(w, tpu, name),
        "queuedResources.performMaintenanceQueuedResource" => {
            queued::perform_maintenance(w, tpu, name, &req.json()?)
        }
        "operations.get" => Ok(Reply::op(lro::get(&w.ops, Svc::Tpu, name)?.body.clone())),
        "operations.delete" => lro::delete(&mut w.ops, Svc::Tpu, name).map(Reply::json),
        "operations.cancel" => cancel_operation(w, name),
        "acceleratorTypes.get" => catalog_get(catalog::accelerator_types(parent), name),
        "runtimeVersions.get" => catalog_get(catalog::runtime_versions(parent), name),
        _ => Err(no_route(&req.method, name)),
    }
}

/// operations.cancel: TPU operations are not cancellable in practice; the request is recorded.
fn cancel_operation(w: &mut Cloud, name: &str) -> ApiResult<Reply> {
    lro::get(&w.ops, Svc::Tpu, name)?;
    if let Some(op) = w.ops.get_mut(name)
        && !op.done()
    {
        op.body["metadata"]["cancelRequested"] = json!(true);
    }
    Ok(Reply::json(json!({})))
}

fn catalog_list(all: Vec<Value>, key: &'static str, req: &Req) -> ApiResult<Reply> {
    // `filter` supports `type=v5p-8` / `version=...` style equality on the item's fields.
    let filtered: Vec<Value> = match req.query.get("filter") {
        None => all,
        Some(f) => {
            let (k, v) = f
                .split_once('=')
                .ok_or_else(|| ApiError::invalid_field("filter", format!("Unsupported filter \"{f}\"")))?;
            let (k, v) = (k.trim(), v.trim().trim_matches('"'));
            all.into_iter().filter(|it| it[k].as_str() == Some(v)).collect()
        }
    };
    let (items, next) = PAGING.page(&filtered, &req.query)?;
    Ok(Reply::list(
        key,
        Svc::Tpu,
        if key == "acceleratorTypes" {
            "AcceleratorType"
        } else {
            "RuntimeVersion"
        },
        list_body(key, items, next),
    ))
}

fn catalog_get(all: Vec<Value>, name: &str) -> ApiResult<Reply> {
    all.into_iter()
        .find(|v| v["name"].as_str() == Some(name))
        .map(Reply::json)
        .ok_or_else(|| ApiError::not_found(format!("Resource \"{name}\" not found")))
}
