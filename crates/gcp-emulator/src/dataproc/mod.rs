//! Dataproc API v1 (Serverless batches), served under `/dataproc/v1/...`.

pub mod batches;

use crate::api::{Reply, Req, list_body, no_route};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult};
use crate::lro;
use crate::store::{Paging, Store};
use crate::wire::schema::Svc;
use axum::http::Method;
use serde_json::json;

/// Dataproc pages batches by `pageSize` default 20 and operations default 100 (max 1000 both).
pub const BATCH_PAGING: Paging = Paging::page_size(20, 1000);
pub const OP_PAGING: Paging = Paging::page_size(100, 1000);

/// The Dataproc service's resources (its operations are in [`Cloud::ops`]).
#[derive(Default)]
pub struct Dataproc {
    pub batches: Store<batches::BatchRec>,
}

pub const BATCH_TYPE: &str = "type.googleapis.com/google.cloud.dataproc.v1.Batch";
pub const META_TYPE: &str = "type.googleapis.com/google.cloud.dataproc.v1.BatchOperationMetadata";

#[derive(Debug)]
pub enum Route {
    Batches {
        project: String,
        location: String,
    },
    Batch {
        project: String,
        location: String,
        id: String,
    },
    Operations {
        project: String,
        region: String,
    },
    Operation {
        project: String,
        region: String,
        id: String,
    },
}

pub fn route(req: &Req) -> Option<(Route, &'static str)> {
    let s: Vec<&str> = req.segs.iter().map(String::as_str).collect();
    let (m, verb) = (&req.method, req.verb.as_deref());
    Some(match s.as_slice() {
        ["projects", p, "locations", l, "batches"] if verb.is_none() => {
            let id = match *m {
                Method::GET => "batches.list",
                Method::POST => "batches.create",
                _ => return None,
            };
            (
                Route::Batches {
                    project: p.to_string(),
                    location: l.to_string(),
                },
                id,
            )
        }
        ["projects", p, "locations", l, "batches", b] => {
            let id = match (m.clone(), verb) {
                (Method::GET, None) => "batches.get",
                (Method::DELETE, None) => "batches.delete",
                (Method::POST, Some("analyze")) => "batches.analyze",
                _ => return None,
            };
            (
                Route::Batch {
                    project: p.to_string(),
                    location: l.to_string(),
                    id: b.to_string(),
                },
                id,
            )
        }
        ["projects", p, "regions" | "locations", r, "operations"] if *m == Method::GET && verb.is_none() => (
            Route::Operations {
                project: p.to_string(),
                region: r.to_string(),
            },
            "operations.list",
        ),
        ["projects", p, "regions" | "locations", r, "operations", o] => {
            let id = match (m.clone(), verb) {
                (Method::GET, None) => "operations.get",
                (Method::DELETE, None) => "operations.delete",
                (Method::POST, Some("cancel")) => "operations.cancel",
                _ => return None,
            };
            (
                Route::Operation {
                    project: p.to_string(),
                    region: r.to_string(),
                    id: o.to_string(),
                },
                id,
            )
        }
        _ => return None,
    })
}

/// Dataproc names operations `projects/p/regions/r/operations/id` and accepts `locations/` too.
pub fn op_name(project: &str, region: &str, id: &str) -> String {
    format!("projects/{project}/regions/{region}/operations/{id}")
}

pub fn handle(w: &mut Cloud, dp: &mut Dataproc, req: &Req, route: Route, method: &str) -> ApiResult<Reply> {
    match route {
        Route::Batches { project, location } => {
            w.project_number(&project);
            match method {
                "batches.create" => batches::create(w, dp, &project, &location, &req.query, &req.json()?),
                _ => batches::list(
                    dp,
                    &format!("projects/{project}/locations/{location}"),
                    &req.query,
                ),
            }
        }
        Route::Batch {
            project,
            location,
            id,
        } => {
            let name = format!("projects/{project}/locations/{location}/batches/{id}");
            match method {
                "batches.get" => batches::get(dp, &name),
                "batches.delete" => batches::delete(dp, &name),
                _ => Err(ApiError::new(
                    crate::errors::Code::Unimplemented,
                    "batches.analyze is not implemented by the emulator",
                )),
            }
        }
        Route::Operations { project, region } => {
            let parent = format!("projects/{project}/regions/{region}");
            let all = lro::list(&w.ops, Svc::Dataproc, &parent, req.query.get("filter"))?;
            let (items, next) = OP_PAGING.page(&all, &req.query)?;
            Ok(Reply::ops(list_body("operations", items, next)))
        }
        Route::Operation { project, region, id } => {
            let name = op_name(&project, &region, &id);
            match method {
                "operations.get" => Ok(Reply::op(lro::get(&w.ops, Svc::Dataproc, &name)?.body.clone())),
                "operations.delete" => lro::delete(&mut w.ops, Svc::Dataproc, &name).map(Reply::json),
                "operations.cancel" => batches::cancel_op(w, dp, &name).map(|_| Reply::json(json!({}))),
                _ => Err(no_route(&req.method, &name)),
            }
        }
    }
}
