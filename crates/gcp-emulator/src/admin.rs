//! Admin API under `/emulator/v1/` (same operations as the in-process [`crate::Emulator`] handle):
//! clock, faults, call log, state listing, buckets, config, reset.

use crate::config::Config;
use crate::errors::{ApiError, ApiResult, Code};
use crate::faults::{Fault, FollowUp};
use crate::wire::Query;
use crate::wire::time::{parse_ts, ts};
use crate::world::Shared;
use crate::world::World;
use axum::body::Bytes;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One line of [`list_resources`]: what exists in the emulated cloud and in which state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSummary {
    /// `tpu.node`, `tpu.queuedResource`, `dataproc.batch`, `vertex.customJob`, `storage.bucket`,
    /// `storage.object`, `operation`, or (Compute Engine) `compute.instance`,
    /// `compute.instanceTemplate`, `compute.resourcePolicy`, `compute.instanceGroupManager`,
    /// `compute.resizeRequest`, `compute.operation`.
    pub kind: String,
    pub name: String,
    /// The resource's state (operations: `done` / `pending`; storage: `-`).
    pub state: String,
}

/// Declares a TPU reservation (shared by the admin API and
/// [`crate::Emulator::create_reservation`]); waiting queued resources re-check right away.
pub fn create_reservation(w: &mut World, name: &str, chips: u64) -> ApiResult<()> {
    if !crate::tpu::reservations::name_ok(name) {
        return Err(ApiError::invalid_field(
            "name",
            format!("\"{name}\" is not projects/{{project}}/locations/{{zone}}/reservations/{{reservation}}"),
        ));
    }
    w.tpu.reservations.insert(name.to_string(), chips);
    crate::tpu::queued::recheck_waiting(&mut w.cloud, &mut w.tpu);
    Ok(())
}

/// Applies a fault to the world (shared by the admin API and [`crate::Emulator::inject`]): faults
/// that act on one resource go to the service owning it; the rest are recorded in
/// [`crate::faults::Faults`], followed by what the services must re-check at once.
pub fn inject(w: &mut World, f: Fault) -> ApiResult<()> {
    match f {
        Fault::PreemptNode { name } => crate::tpu::nodes::preempt(&mut w.cloud, &mut w.tpu, &name),
        Fault::ScheduleMaintenance {
            name,
            start_in_secs,
            duration_secs,
            can_reschedule,
            unscheduled,
        } => {
            let notice = crate::training::Notice {
                start_in: std::time::Duration::from_secs(start_in_secs),
                duration: std::time::Duration::from_secs(duration_secs),
                can_reschedule,
                unscheduled,
            };
            if name.contains("/nodes/") {
                crate::tpu::nodes::schedule_maintenance(&mut w.cloud, &mut w.tpu, &name, notice)
            } else {
                crate::compute::maintenance::schedule(&mut w.cloud, &mut w.compute, &name, notice)
            }
        }
        Fault::PreemptQueuedResource { name } => crate::tpu::queued::preempt(&mut w.cloud, &mut w.tpu, &name),
        Fault::PreemptInstance { name } => {
            crate::compute::instances::preempt(&mut w.cloud, &mut w.compute, &name)
        }
        Fault::FailResizeRequest { name, message } => crate::compute::resize::fail(
            &mut w.cloud,
            &mut w.compute,
            &name,
            message
                .as_deref()
                .unwrap_or("The resize request could not be fulfilled: not enough resources in the zone."),
        ),
        Fault::PreemptJob { name } => crate::vertex::jobs::preempt(&mut w.cloud, &mut w.vertex, &name),
        recorded => {
            match w.cloud.faults.record(recorded)? {
                FollowUp::Nothing => {}
                FollowUp::RecheckTpuAndCompute => {
                    crate::tpu::queued::recheck_waiting(&mut w.cloud, &mut w.tpu);
                    crate::compute::recheck(&mut w.cloud, &mut w.compute);
                }
                FollowUp::RecheckCompute => crate::compute::recheck(&mut w.cloud, &mut w.compute),
                FollowUp::FailBatch(name) => {
                    crate::dataproc::batches::fail_now(&mut w.cloud, &mut w.dataproc, &name)
                }
                FollowUp::FailJob(name) => crate::vertex::jobs::fail_now(&mut w.cloud, &mut w.vertex, &name),
            }
            Ok(())
        }
    }
}

/// The kinds of [`list_resources`] that keep costing money (or quota) while they exist; storage
/// objects and finished operations stay behind in Google Cloud too, and cost (almost) nothing.
pub const BILLABLE_KINDS: [&str; 7] = [
    "tpu.node",
    "tpu.queuedResource",
    "dataproc.batch",
    "vertex.customJob",
    "compute.instance",
    "compute.instanceGroupManager",
    "compute.resizeRequest",
];

pub fn list_resources(w: &World) -> Vec<ResourceSummary> {
    let mut out = Vec::new();
    let mut push = |kind: &str, name: &str, state: &str| {
        out.push(ResourceSummary {
            kind: kind.into(),
            name: name.into(),
            state: state.into(),
        })
    };
    for (n, r) in &w.tpu.nodes {
        push("tpu.node", n, r.state());
    }
    for (n, r) in &w.tpu.qrs {
        push("tpu.queuedResource", n, r.state());
    }
    for (n, r) in &w.dataproc.batches {
        push("dataproc.batch", n, r.state());
    }
    for (n, r) in &w.vertex.jobs {
        push("vertex.customJob", n, r.state());
    }
    for (n, o) in &w.cloud.ops {
        push("operation", n, if o.done() { "done" } else { "pending" });
    }
    for (kind, name, state) in crate::compute::summaries(&w.compute) {
        push(kind, &name, &state);
    }
    for (b, bucket) in &w.cloud.buckets {
        push("storage.bucket", b, "-");
        for o in bucket.objects.keys() {
            push("storage.object", &format!("gs://{b}/{o}"), "-");
        }
    }
    out
}

fn reply(status: StatusCode, v: Value) -> Response {
    let mut r = (status, serde_json::to_string_pretty(&v).unwrap_or_default()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn err(e: ApiError) -> Response {
    reply(
        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST),
        e.body(),
    )
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    let b: &[u8] = if body.is_empty() { b"{}" } else { body };
    serde_json::from_slice(b).map_err(|e| ApiError::invalid(format!("invalid admin request body: {e}")))
}

#[derive(Deserialize)]
struct AdvanceBody {
    /// humantime (`"90s"`, `"5m"`).
    duration: Option<String>,
    seconds: Option<f64>,
}

#[derive(Deserialize)]
struct SetBody {
    time: String,
}

#[derive(Deserialize)]
struct BucketBody {
    name: String,
    project: Option<String>,
}

pub async fn handle(shared: &Shared, method: Method, rest: &str, uri: &Uri, body: Bytes) -> Response {
    match handle_inner(shared, &method, rest, uri, &body) {
        Ok(r) => r,
        Err(e) => err(e),
    }
}

fn clock_view(shared: &Shared) -> Value {
    json!({"now": ts(shared.clock.now()), "manual": shared.clock.is_manual(), "timeScale": shared.clock.scale()})
}

fn handle_inner(
    shared: &Shared,
    method: &Method,
    rest: &str,
    uri: &Uri,
    body: &Bytes,
) -> ApiResult<Response> {
    let q = Query::parse(uri.query());
    let ok = |v: Value| Ok(reply(StatusCode::OK, v));
    if let Some(iam) = rest.strip_prefix("iam") {
        return ok(crate::iam::admin::handle(shared, method, iam, body)?);
    }
    if let Some(answer) = crate::capacity_admin::handle(shared, method, rest, body) {
        return ok(answer?);
    }
    match (method.clone(), rest) {
        (Method::GET, "healthz") => ok(json!({"status": "ok"})),
        (Method::GET, "clock") => ok(clock_view(shared)),
        (Method::POST, "clock:advance") => ok(advance_clock(shared, body)?),
        (Method::POST, "clock:set") => ok(set_clock(shared, body)?),
        (Method::GET, "faults") => ok(serde_json::to_value(&shared.world().cloud.faults).unwrap_or_default()),
        (Method::POST, "faults") => {
            let f: Fault = parse_body(body)?;
            inject(&mut shared.world(), f)?;
            ok(json!({}))
        }
        (Method::DELETE, "faults") => {
            shared.world().cloud.faults = Default::default();
            ok(json!({}))
        }
        (Method::GET, "calls") => ok(calls(&shared.world(), &q)),
        (Method::GET, "calls:counts") => ok(json!({"counts": shared.world().cloud.calls.counts()})),
        (Method::DELETE, "calls") => {
            shared.world().cloud.calls.clear();
            ok(json!({}))
        }
        (Method::GET, "resources") => ok(resources(&shared.world(), &q)),
        (Method::GET, _) => get_other(shared, method, rest),
        (Method::POST, "reservations") => ok(post_reservation(shared, body)?),
        (Method::POST, "buckets") => ok(post_bucket(shared, body)?),
        (Method::POST, "reset") => {
            shared.world().reset();
            ok(json!({}))
        }
        (Method::PUT, "config") => {
            let c: Config = parse_body(body)?;
            shared.world().cloud.cfg = c;
            ok(serde_json::to_value(&shared.world().cloud.cfg).unwrap_or_default())
        }
        _ => Err(unknown_endpoint(method, rest)),
    }
}

/// GET of anything else: a resource collection, the reservations, the config, or a bucket's
/// contents.
fn get_other(shared: &Shared, method: &Method, rest: &str) -> ApiResult<Response> {
    let ok = |v: Value| Ok(reply(StatusCode::OK, v));
    // Bound first: a guard in the match scrutinee would stay locked through the arms.
    let bodies = resource_bodies(&shared.world(), rest);
    match bodies {
        Some(items) => ok(json!({"items": items})),
        None if rest == "reservations" => ok(json!({"reservations": shared.world().tpu.reservations})),
        None if rest == "workloads/interruptions" => {
            ok(json!({"interruptions": shared.world().cloud.training.interruptions}))
        }
        None if rest == "workloads/checkpoint-requests" => {
            ok(json!({"checkpointRequests": shared.world().cloud.training.checkpoint_requests}))
        }
        None if rest == "config" => ok(serde_json::to_value(&shared.world().cloud.cfg).unwrap_or_default()),
        None if rest.starts_with("buckets/") => bucket_contents(&shared.world(), rest),
        None => Err(unknown_endpoint(method, rest)),
    }
}

/// POST reservations: a named TPU reservation of `chips` chips.
fn post_reservation(shared: &Shared, body: &Bytes) -> ApiResult<Value> {
    #[derive(Deserialize)]
    struct Body {
        name: String,
        chips: u64,
    }
    let b: Body = parse_body(body)?;
    create_reservation(&mut shared.world(), &b.name, b.chips)?;
    Ok(json!({}))
}

/// POST buckets: a bucket (in project `emulator` unless one is given); replies its metadata.
fn post_bucket(shared: &Shared, body: &Bytes) -> ApiResult<Value> {
    let b: BucketBody = parse_body(body)?;
    let mut w = shared.world();
    crate::storage::buckets::create(
        &mut w.cloud,
        &b.name,
        b.project.as_deref().unwrap_or("emulator"),
        &json!({}),
    )?;
    Ok(w.cloud.buckets[&b.name].meta.clone())
}

fn unknown_endpoint(method: &Method, rest: &str) -> ApiError {
    ApiError::new(
        Code::NotFound,
        format!("unknown admin endpoint {method} /emulator/v1/{rest}"),
    )
}

/// `clock:advance` by `duration` (humantime, e.g. `90s`) or `seconds`.
fn advance_clock(shared: &Shared, body: &Bytes) -> ApiResult<Value> {
    let b: AdvanceBody = parse_body(body)?;
    let d = match (b.duration, b.seconds) {
        (Some(d), _) => {
            humantime::parse_duration(&d).map_err(|e| ApiError::invalid_field("duration", e.to_string()))?
        }
        (None, Some(s)) if s >= 0.0 && s.is_finite() => std::time::Duration::from_secs_f64(s),
        _ => {
            return Err(ApiError::invalid_field(
                "duration",
                "give \"duration\" (e.g. \"90s\") or \"seconds\" >= 0",
            ));
        }
    };
    shared.clock.advance(d);
    drop(shared.world());
    Ok(clock_view(shared))
}

/// `clock:set` to an RFC 3339 `time`.
fn set_clock(shared: &Shared, body: &Bytes) -> ApiResult<Value> {
    let b: SetBody = parse_body(body)?;
    let t = parse_ts(&b.time)
        .ok_or_else(|| ApiError::invalid_field("time", format!("not RFC 3339: {}", b.time)))?;
    shared.clock.set(t);
    drop(shared.world());
    Ok(clock_view(shared))
}

/// The call log, filtered by `service` / `method` if asked.
fn calls(w: &World, q: &Query) -> Value {
    let calls: Vec<_> = w
        .cloud
        .calls
        .records()
        .into_iter()
        .filter(|c| q.get("service").is_none_or(|s| s == c.service))
        .filter(|c| q.get("method").is_none_or(|m| m == c.method))
        .collect();
    json!({"calls": calls})
}

/// Every resource's summary, filtered by `kind` if asked.
fn resources(w: &World, q: &Query) -> Value {
    let kind = q.get("kind");
    let items: Vec<_> = list_resources(w)
        .into_iter()
        .filter(|r| kind.is_none_or(|k| r.kind == k))
        .collect();
    json!({"resources": items})
}

/// `GET /emulator/v1/{nodes,queuedResources,batches,customJobs,operations,<compute lists>}`: the
/// bodies as the services serve them; `None` for other paths.
fn resource_bodies(w: &World, path: &str) -> Option<Vec<Value>> {
    Some(match path {
        "nodes" => w.tpu.nodes.values().map(|r| r.body.clone()).collect(),
        "queuedResources" => w.tpu.qrs.values().map(|r| r.body.clone()).collect(),
        "batches" => w.dataproc.batches.values().map(|r| r.body.clone()).collect(),
        "customJobs" => w.vertex.jobs.values().map(|r| r.body.clone()).collect(),
        "operations" => w.cloud.ops.values().map(|o| o.body.clone()).collect(),
        _ => {
            let (_, kind) = crate::compute::ADMIN_LISTS.iter().find(|(p, _)| *p == path)?;
            crate::compute::bodies(&w.compute, kind)
        }
    })
}

/// `buckets/{b}/objects` (metadata) or `buckets/{b}/objects/{name...}` (raw content).
fn bucket_contents(w: &World, path: &str) -> ApiResult<Response> {
    let parts: Vec<&str> = path.splitn(4, '/').collect();
    let bucket = w
        .cloud
        .buckets
        .get(parts.get(1).copied().unwrap_or(""))
        .ok_or_else(crate::storage::no_bucket)?;
    match parts.as_slice() {
        [_, _, "objects"] => Ok(reply(
            StatusCode::OK,
            json!({"items": bucket.objects.values().map(|o| o.meta.clone()).collect::<Vec<_>>()}),
        )),
        [_, b, "objects", name] => {
            let name = urlencoding::decode(name)
                .map(|c| c.into_owned())
                .unwrap_or_default();
            let o = bucket
                .objects
                .get(&name)
                .ok_or_else(|| crate::storage::no_object(b, &name))?;
            Ok((StatusCode::OK, o.data.clone()).into_response())
        }
        _ => Err(ApiError::not_found(format!(
            "unknown admin path /emulator/v1/{path}"
        ))),
    }
}
