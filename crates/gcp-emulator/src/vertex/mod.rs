//! Vertex AI v1 custom jobs and operations, served under `/vertex/v1/...`.

pub mod jobs;

use crate::api::{Reply, Req, list_body, no_route};
use crate::cloud::Cloud;
use crate::errors::ApiResult;
use crate::lro;
use crate::store::{Paging, Store};
use crate::wire::schema::Svc;
use axum::http::Method;
use serde_json::json;

/// Vertex lists (custom jobs, operations) page by `pageSize`, default 100, max 1000.
pub const PAGING: Paging = Paging::page_size(100, 1000);

/// The Vertex AI service's resources (its operations are in [`Cloud::ops`]).
#[derive(Default)]
pub struct Vertex {
    pub jobs: Store<jobs::JobRec>,
}

#[derive(Debug)]
pub enum Route {
    Jobs {
        project: String,
        location: String,
    },
    Job {
        project: String,
        location: String,
        id: String,
    },
    Operations {
        project: String,
        location: String,
    },
    Operation {
        name_parts: Vec<String>,
    },
}

pub fn route(req: &Req) -> Option<(Route, &'static str)> {
    let s: Vec<&str> = req.segs.iter().map(String::as_str).collect();
    let (m, verb) = (&req.method, req.verb.as_deref());
    Some(match s.as_slice() {
        ["projects", p, "locations", l, "customJobs"] if verb.is_none() => {
            let id = match *m {
                Method::GET => "customJobs.list",
                Method::POST => "customJobs.create",
                _ => return None,
            };
            (
                Route::Jobs {
                    project: p.to_string(),
                    location: l.to_string(),
                },
                id,
            )
        }
        ["projects", p, "locations", l, "customJobs", j] => {
            let id = match (m.clone(), verb) {
                (Method::GET, None) => "customJobs.get",
                (Method::DELETE, None) => "customJobs.delete",
                (Method::POST, Some("cancel")) => "customJobs.cancel",
                _ => return None,
            };
            (
                Route::Job {
                    project: p.to_string(),
                    location: l.to_string(),
                    id: j.to_string(),
                },
                id,
            )
        }
        ["projects", p, "locations", l, "operations"] if *m == Method::GET && verb.is_none() => (
            Route::Operations {
                project: p.to_string(),
                location: l.to_string(),
            },
            "operations.list",
        ),
        ["projects", _, "locations", _, .., "operations", _] => {
            let id = match (m.clone(), verb) {
                (Method::GET, None) => "operations.get",
                (Method::DELETE, None) => "operations.delete",
                (Method::POST, Some("cancel")) => "operations.cancel",
                (Method::POST, Some("wait")) => "operations.wait",
                _ => return None,
            };
            (
                Route::Operation {
                    name_parts: s.iter().map(|x| x.to_string()).collect(),
                },
                id,
            )
        }
        _ => return None,
    })
}

/// Vertex names carry the project NUMBER; requests may use the id or the number.
pub fn canonical_project(w: &mut Cloud, project: &str) -> String {
    w.project_number(project).to_string()
}

pub fn handle(w: &mut Cloud, vx: &mut Vertex, req: &Req, route: Route, method: &str) -> ApiResult<Reply> {
    match route {
        Route::Jobs { project, location } => {
            let num = canonical_project(w, &project);
            match method {
                "customJobs.create" => jobs::create(w, vx, &num, &location, &req.json()?),
                _ => jobs::list(w, vx, &format!("projects/{num}/locations/{location}"), &req.query),
            }
        }
        Route::Job {
            project,
            location,
            id,
        } => {
            let num = canonical_project(w, &project);
            let name = jobs::job_name(&num, &location, &id)?;
            match method {
                "customJobs.get" => jobs::get(vx, &name),
                "customJobs.delete" => jobs::delete(w, vx, &name),
                _ => {
                    req.json()?;
                    jobs::cancel(w, vx, &name).map(|_| Reply::json(json!({})))
                }
            }
        }
        Route::Operations { project, location } => {
            let num = canonical_project(w, &project);
            let all = lro::list(
                &w.ops,
                Svc::Vertex,
                &format!("projects/{num}/locations/{location}"),
                req.query.get("filter"),
            )?;
            let (items, next) = PAGING.page(&all, &req.query)?;
            Ok(Reply::ops(list_body("operations", items, next)))
        }
        Route::Operation { mut name_parts } => {
            name_parts[1] = canonical_project(w, &name_parts[1]);
            let name = name_parts.join("/");
            match method {
                "operations.get" | "operations.wait" => {
                    Ok(Reply::op(lro::get(&w.ops, Svc::Vertex, &name)?.body.clone()))
                }
                "operations.delete" => lro::delete(&mut w.ops, Svc::Vertex, &name).map(Reply::json),
                "operations.cancel" => {
                    lro::get(&w.ops, Svc::Vertex, &name)?;
                    Ok(Reply::json(json!({})))
                }
                _ => Err(no_route(&req.method, &name)),
            }
        }
    }
}
