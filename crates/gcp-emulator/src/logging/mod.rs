//! Cloud Logging: `entries.write` and `entries.list`
//! (<https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries>), served under
//! `/logging/v2/`, and the lines the simulated workloads write ([`workloads`]).
//!
//! What is modelled, field by field, from the REST reference:
//! * `entries.list` (`POST /v2/entries:list`): `resourceNames` (required, `projects/{id or
//!   number}`), `filter` (the subset of the Logging query language in [`query`]), `orderBy`
//!   (`timestamp asc`, the default, or `timestamp desc`; anything else is INVALID_ARGUMENT),
//!   `pageSize` (non-positive: the default 50; at most 1000), `pageToken`. The reply is
//!   `{entries, nextPageToken}`, `{}` when nothing matches.
//! * `entries.write` (`POST /v2/entries:write`): `logName`, `resource` and `labels` as defaults
//!   for `entries[]`; each entry needs a `logName` and a `resource`; `timestamp` defaults to the
//!   time received. The reply is `{}`.
//! * `LogEntry`: `logName`, `resource {type, labels}`, `timestamp`, `receiveTimestamp`,
//!   `severity` (names, or with `$alt=json;enum-encoding=int` the numbers of
//!   `google/logging/type/log_severity.proto`), `insertId`, `labels`, and one of `textPayload`
//!   or `jsonPayload`.
//!
//! Not modelled: `projectIds`, `summaryFields`, `tail`, buckets and views, exclusions, quotas.

mod query;
mod store;
pub mod workloads;

use serde_json::{Value, json};

use crate::api::{Reply, Req};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult};
pub use store::{Entry, LogStore, Payload};

/// The request this emulator serves.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    List,
    Write,
}

/// `POST /logging/v2/entries:list` and `POST /logging/v2/entries:write`.
pub fn route(req: &Req) -> Option<(Route, &'static str)> {
    if req.method != axum::http::Method::POST || req.segs != ["entries"] {
        return None;
    }
    // Method ids as the IAM permission names them (`logging.logEntries.list`).
    match req.verb.as_deref() {
        Some("list") => Some((Route::List, "logEntries.list")),
        Some("write") => Some((Route::Write, "logEntries.create")),
        _ => None,
    }
}

pub fn handle(w: &mut Cloud, req: &Req, route: Route) -> ApiResult<Reply> {
    let mut body = req.json()?;
    camel_case_fields(&mut body);
    match route {
        Route::List => list(w, &body, req.query.enum_int()).map(Reply::json),
        Route::Write => write(w, &body).map(|()| Reply::json(json!({}))),
    }
}

/// Proto3 JSON parsers accept a field's proto name as well as its lowerCamelCase JSON name
/// (<https://protobuf.dev/programming-guides/json/>), and Google's Python client sends some in
/// snake_case (`dry_run`, `partial_success`: tests/golden/logging/python-client.json). The
/// request's own fields and each entry's are renamed; maps (`labels`, `jsonPayload`) are data
/// and stay as sent.
fn camel_case_fields(body: &mut Value) {
    fn rename(v: &mut Value) {
        let Some(map) = v.as_object_mut() else { return };
        let snake: Vec<String> = map.keys().filter(|k| k.contains('_')).cloned().collect();
        for key in snake {
            let mut camel = String::with_capacity(key.len());
            let mut up = false;
            for c in key.chars() {
                match (c, up) {
                    ('_', _) => up = true,
                    (c, true) => {
                        camel.push(c.to_ascii_uppercase());
                        up = false;
                    }
                    (c, false) => camel.push(c),
                }
            }
            if let Some(value) = map.remove(&key) {
                map.entry(camel).or_insert(value);
            }
        }
    }
    rename(body);
    if let Some(entries) = body.get_mut("entries").and_then(Value::as_array_mut) {
        entries.iter_mut().for_each(rename);
    }
}

/// Refuses a body field the method does not have, as Google's front end does.
fn known_fields(body: &Value, known: &[&str]) -> ApiResult<()> {
    let Some(map) = body.as_object() else {
        return Err(ApiError::invalid(
            "Invalid JSON payload received. Expected an object.",
        ));
    };
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(format!(
            "Invalid JSON payload received. Unknown name \"{k}\": Cannot find field."
        ))),
        None => Ok(()),
    }
}

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: i64 = 1000;

/// The project numbers `resourceNames` names (`projects/{project}` only; at least one).
fn projects(w: &Cloud, body: &Value) -> ApiResult<Vec<u64>> {
    let projects: Vec<u64> = body["resourceNames"]
        .as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(|n| match n.strip_prefix("projects/") {
                    Some(p) if !p.is_empty() && !p.contains('/') => Ok(w.cfg.project_number(p)),
                    _ => Err(ApiError::invalid_field(
                        "resource_names",
                        format!("Invalid resource name \"{n}\": only projects/{{project}} is supported here"),
                    )),
                })
                .collect::<ApiResult<Vec<u64>>>()
        })
        .transpose()?
        .unwrap_or_default();
    if projects.is_empty() {
        return Err(ApiError::invalid_field(
            "resource_names",
            "resourceNames: at least one resource name is required",
        ));
    }
    Ok(projects)
}

fn list(w: &Cloud, body: &Value, enum_int: bool) -> ApiResult<Value> {
    known_fields(
        body,
        &[
            "resourceNames",
            "projectIds",
            "filter",
            "orderBy",
            "pageSize",
            "pageToken",
        ],
    )?;
    let projects = projects(w, body)?;
    let newest_first = match body["orderBy"].as_str().unwrap_or("").trim() {
        "" | "timestamp asc" | "timestamp" => false,
        "timestamp desc" => true,
        other => {
            return Err(ApiError::invalid_field(
                "order_by",
                format!("Invalid orderBy \"{other}\": use \"timestamp asc\" or \"timestamp desc\""),
            ));
        }
    };
    let size = match body["pageSize"].as_i64().unwrap_or(0) {
        n if n <= 0 => DEFAULT_PAGE_SIZE,
        n if n > MAX_PAGE_SIZE => {
            return Err(ApiError::invalid_field(
                "page_size",
                format!("pageSize {n} is larger than the maximum {MAX_PAGE_SIZE}"),
            ));
        }
        n => n as usize,
    };
    let filter = query::parse(body["filter"].as_str().unwrap_or(""))?;
    let after = store::Cursor::parse(body["pageToken"].as_str().unwrap_or(""))?;
    let (entries, next) = w.logs.page(&projects, &filter, newest_first, after, size);
    let mut reply = serde_json::Map::new();
    if !entries.is_empty() {
        let items = entries.iter().map(|e| e.to_json(enum_int)).collect();
        reply.insert("entries".into(), Value::Array(items));
    }
    if let Some(next) = next {
        reply.insert("nextPageToken".into(), json!(next.token()));
    }
    Ok(Value::Object(reply))
}

fn write(w: &mut Cloud, body: &Value) -> ApiResult<()> {
    known_fields(
        body,
        &[
            "logName",
            "resource",
            "labels",
            "entries",
            "partialSuccess",
            "dryRun",
        ],
    )?;
    let Some(entries) = body["entries"].as_array().filter(|e| !e.is_empty()) else {
        return Err(ApiError::invalid_field(
            "entries",
            "entries: at least one entry is required",
        ));
    };
    let mut parsed = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        parsed.push(store::NewEntry::from_write(body, e, i)?);
    }
    if body["dryRun"].as_bool() != Some(true) {
        let now = w.now;
        for e in parsed {
            let project = store::log_project(&e.log_name).map_or(0, |p| w.cfg.project_number(p));
            w.logs.push(e, project, now);
        }
    }
    Ok(())
}
