//! HTTP front end: one axum fallback handler that routes by path prefix (never by Host), applies
//! call faults, ticks the world to the clock's now, runs the service handler and encodes the reply
//! like Google's front end (enum names or numbers, `charset=UTF-8`, `Server` header).

use crate::api::{Body, Reply, Req, encode_ints, no_route};
use crate::calls::CallRecord;
use crate::errors::{ApiError, Code};
use crate::storage::Root;
use crate::wire::Query;
use crate::wire::schema::Svc;
use crate::world::Shared;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(dispatch).with_state(shared)
}

enum Target {
    /// A proto3 JSON service, the API version of its path prefix and the rest of the path.
    Cloud(Svc, &'static str, String),
    /// Compute Engine: custom verbs are path segments (`.../resizeRequests/r/cancel`), not `:verb`.
    Compute(String),
    Storage(Root, String),
    Admin(String),
}

fn target(path: &str) -> Option<Target> {
    let cloud = [
        ("/tpu/v2/", Svc::Tpu, "v2"),
        // The v2alpha1 surface: the v2 methods plus the maintenance ones, on the same nodes.
        ("/tpu/v2alpha1/", Svc::Tpu, "v2alpha1"),
        ("/dataproc/v1/", Svc::Dataproc, "v1"),
        ("/vertex/v1/", Svc::Vertex, "v1"),
        // The Vertex Rust client sends operations calls to `/ui/{name}`: the same v1 surface.
        ("/vertex/ui/", Svc::Vertex, "v1"),
        ("/logging/v2/", Svc::Logging, "v2"),
        ("/iamcredentials/v1/", Svc::IamCredentials, "v1"),
    ];
    for (p, svc, version) in cloud {
        if let Some(rest) = path.strip_prefix(p) {
            return Some(Target::Cloud(svc, version, rest.to_string()));
        }
    }
    if let Some(rest) = path.strip_prefix("/compute/v1/") {
        return Some(Target::Compute(rest.to_string()));
    }
    let storage = [
        ("/storage/v1/", Root::Json),
        ("/upload/storage/v1/", Root::Upload),
        ("/download/storage/v1/", Root::Download),
    ];
    for (p, root) in storage {
        if let Some(rest) = path.strip_prefix(p) {
            return Some(Target::Storage(root, rest.to_string()));
        }
    }
    path.strip_prefix("/emulator/v1/")
        .map(|r| Target::Admin(r.to_string()))
}

fn decode(s: &str) -> String {
    urlencoding::decode(s)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| s.to_string())
}

/// The request of a call to API `version` (`cloud` APIs carry a `:verb` on their last segment).
fn build_req(
    (version, rest, cloud): (&'static str, &str, bool),
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Req {
    let mut raw: Vec<&str> = rest.split('/').collect();
    if raw.last() == Some(&"") {
        raw.pop();
    }
    let mut verb = None;
    if cloud
        && let Some(last) = raw.last_mut()
        && let Some((name, v)) = last.split_once(':')
    {
        verb = Some(decode(v));
        *last = name;
    }
    Req {
        method,
        version,
        segs: raw.iter().map(|s| decode(s)).collect(),
        verb,
        query: Query::parse(uri.query()),
        body,
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    }
}

/// Builds and routes a call to one of the Google APIs (any target but the admin API): its
/// service, the request, and its route and method id (`None`: no such method).
fn route_call(
    t: Target,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> (Svc, Req, Option<(Routed, &'static str)>) {
    match t {
        Target::Cloud(svc, version, rest) => {
            let req = build_req((version, &rest, true), method, uri, headers, body);
            let routed = match svc {
                Svc::Tpu => crate::tpu::route(&req).map(|(r, m)| (Routed::Tpu(r), m)),
                Svc::Dataproc => crate::dataproc::route(&req).map(|(r, m)| (Routed::Dataproc(r), m)),
                Svc::Logging => crate::logging::route(&req).map(|(r, m)| (Routed::Logging(r), m)),
                Svc::IamCredentials => crate::iam::credentials::route(&req)
                    .map(|sa| (Routed::Iam(sa), crate::iam::credentials::METHOD)),
                _ => crate::vertex::route(&req).map(|(r, m)| (Routed::Vertex(r), m)),
            };
            (svc, req, routed)
        }
        Target::Compute(rest) => {
            let req = build_req(("", &rest, false), method, uri, headers, body);
            let routed = crate::compute::route(&req).map(|(r, m)| (Routed::Compute(r), m));
            (Svc::Compute, req, routed)
        }
        Target::Storage(root, rest) => {
            let req = build_req(("", &rest, false), method, uri, headers, body);
            let routed = crate::storage::route(root, &req).map(|(r, m)| (Routed::Storage(r), m));
            (Svc::Storage, req, routed)
        }
        Target::Admin(_) => unreachable!("dispatch serves the admin API itself"),
    }
}

/// Runs a routed call on the world as `caller`, then the transitions it scheduled for now; a lost
/// reply turns its success into the fault's error (the call was still carried out).
fn run(
    shared: &Shared,
    (routed, caller): (Routed, &str),
    req: &Req,
    method_id: &str,
    lost: Option<(Code, String)>,
) -> Result<Reply, ApiError> {
    let mut guard = shared.world();
    let w = &mut *guard;
    if let Routed::Storage(r) = &routed {
        authorize_storage(w, caller, r, method_id)?;
    }
    let res = match routed {
        Routed::Tpu(r) => crate::tpu::handle(&mut w.cloud, &mut w.tpu, req, r, method_id),
        Routed::Dataproc(r) => crate::dataproc::handle(&mut w.cloud, &mut w.dataproc, req, r, method_id),
        Routed::Vertex(r) => crate::vertex::handle(&mut w.cloud, &mut w.vertex, req, r, method_id),
        Routed::Storage(r) => crate::storage::handle(&mut w.cloud, req, r, method_id),
        Routed::Compute(r) => crate::compute::handle(&mut w.cloud, &mut w.compute, req, r, method_id),
        Routed::Logging(r) => crate::logging::handle(&mut w.cloud, req, r),
        Routed::Iam(sa) => {
            let (now, id) = (w.cloud.now, w.cloud.uuid());
            w.iam.generate_access_token(caller, &sa, req, now, &id)
        }
    };
    // Zero-length transitions scheduled by this call happen before the reply.
    let now = shared.clock.now();
    w.tick(now);
    match (res, lost) {
        (Ok(_), Some((code, msg))) => Err(ApiError::new(code, msg)),
        (res, _) => res,
    }
}

/// IAM on a Cloud Storage call: the caller's role on the bucket it addresses (see [`crate::iam`]).
fn authorize_storage(
    w: &crate::world::World,
    caller: &str,
    route: &crate::storage::Route,
    method_id: &str,
) -> Result<(), ApiError> {
    use crate::storage::Route;
    let (bucket, object) = match route {
        Route::Buckets => return Ok(()),
        Route::Bucket(b) | Route::Objects(b) => (b, None),
        Route::Object(b, o) => (b, Some(o.as_str())),
    };
    let exists = w.cloud.buckets.contains_key(bucket);
    w.iam.authorize_storage(caller, method_id, bucket, object, exists)
}

/// Who the request acts as (see [`crate::iam::Iam::caller`]).
fn caller(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let now = shared.clock.now();
    let w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
    w.iam.caller(auth, now)
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let Some(t) = target(&path) else {
        let e = no_route(&method, &path);
        return respond(Err(e), false, Svc::Tpu);
    };
    let (svc, req, routed) = match t {
        Target::Admin(rest) => return crate::admin::handle(&shared, method, &rest, &uri, body).await,
        t => route_call(t, method, &uri, &headers, body),
    };
    let enum_int = req.query.enum_int();
    let Some((routed, method_id)) = routed else {
        let res = Err(no_route(&req.method, &path));
        let status = record(&shared, svc, "unknown", &req, "", &uri, &res);
        return respond_status(res, enum_int, svc, status);
    };
    let principal = caller(&shared, &headers);
    let (latency, failure, lost) = {
        let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
        let failure = w
            .cloud
            .faults
            .take_call_failure(svc.name(), method_id)
            .map(|(code, msg)| ApiError::new(code, msg))
            .or_else(|| over_quota(&mut w.cloud, svc, method_id, &req, shared.clock.now()));
        // Only a call that is carried out can lose its reply.
        let lost = failure
            .is_none()
            .then(|| w.cloud.faults.take_lost_reply(svc.name(), method_id))
            .flatten();
        (w.cloud.faults.take_latency(svc.name(), method_id), failure, lost)
    };
    if latency > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(latency)).await;
    }
    let res = match (failure, &principal) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(e.clone()),
        (None, Ok(p)) => run(&shared, (routed, p), &req, method_id, lost),
    };
    let res = match res {
        Err(mut e) if svc == Svc::Storage && e.gcs_reason.is_none() => {
            e.gcs_reason = Some(gcs_reason(e.code));
            Err(e)
        }
        Err(e) if svc == Svc::Compute => Err(crate::compute::errors::compute_shape(e)),
        other => other,
    };
    let principal = principal.unwrap_or_default();
    let status = record(&shared, svc, method_id, &req, &principal, &uri, &res);
    respond_status(res, enum_int, svc, status)
}

/// The rate quota's refusal of this call, when its group's minute window is full
/// ([`crate::capacity::quotas`]); the call is counted otherwise.
fn over_quota(
    w: &mut crate::cloud::Cloud,
    svc: Svc,
    method_id: &str,
    req: &Req,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<ApiError> {
    let cfg = &w.cfg;
    w.capacity
        .quotas
        .admit(svc.name(), method_id, &req.segs, now, |p| cfg.project_number(p))
        .err()
}

enum Routed {
    Tpu(crate::tpu::Route),
    Dataproc(crate::dataproc::Route),
    Vertex(crate::vertex::Route),
    Storage(crate::storage::Route),
    Compute(crate::compute::Route),
    Logging(crate::logging::Route),
    /// `generateAccessToken` for this service account.
    Iam(String),
}

fn gcs_reason(code: Code) -> &'static str {
    match code {
        Code::NotFound => "notFound",
        Code::PermissionDenied => "forbidden",
        Code::AlreadyExists | Code::Aborted => "conflict",
        Code::ResourceExhausted => "rateLimitExceeded",
        Code::Unauthenticated => "required",
        Code::Unavailable => "backendError",
        Code::Internal | Code::Unknown | Code::DataLoss => "backendError",
        _ => "invalid",
    }
}

fn record(
    shared: &Shared,
    svc: Svc,
    method: &str,
    req: &Req,
    principal: &str,
    uri: &Uri,
    res: &Result<Reply, ApiError>,
) -> u16 {
    let status = match res {
        Ok(r) => r.status,
        Err(e) => e.http_status(),
    };
    let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
    let time = w.cloud.now;
    w.cloud.calls.record(CallRecord {
        service: svc.name().to_string(),
        method: method.to_string(),
        http_method: req.method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        status,
        time,
        principal: principal.to_string(),
    });
    status
}

fn respond(res: Result<Reply, ApiError>, enum_int: bool, svc: Svc) -> Response {
    let status = match &res {
        Ok(r) => r.status,
        Err(e) => e.http_status(),
    };
    respond_status(res, enum_int, svc, status)
}

fn json_response(status: u16, v: &Value, svc: Svc) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        serde_json::to_string_pretty(v).unwrap_or_default(),
    )
        .into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    h.insert(
        header::SERVER,
        HeaderValue::from_static(if svc == Svc::Storage {
            "UploadServer"
        } else {
            "ESF"
        }),
    );
    r
}

fn respond_status(res: Result<Reply, ApiError>, enum_int: bool, svc: Svc, status: u16) -> Response {
    match res {
        Err(e) => json_response(status, &e.body(), svc),
        Ok(Reply {
            body: Body::NoContent,
            ..
        }) => {
            let mut r = StatusCode::NO_CONTENT.into_response();
            r.headers_mut()
                .insert(header::SERVER, HeaderValue::from_static("UploadServer"));
            r
        }
        Ok(Reply {
            body: Body::Raw { content_type, data },
            ..
        }) => {
            let mut r = (StatusCode::OK, data).into_response();
            let ct = HeaderValue::from_str(&content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            r.headers_mut().insert(header::CONTENT_TYPE, ct);
            r
        }
        Ok(Reply {
            body: Body::Json(mut v),
            shape,
            status,
        }) => {
            if enum_int {
                encode_ints(&mut v, shape);
            }
            json_response(status, &v, svc)
        }
    }
}
