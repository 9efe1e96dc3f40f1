//! HTTP: the axum router. Discovery, `/version` and OpenAPI have their own routes; everything
//! under `/api` and `/apis` is dispatched by parsing the path (as the apiserver's own mux does,
//! since resource names are only known at run time).

mod request;
mod resource;

use crate::cluster::Cluster;
use crate::errors::ApiError;
use crate::{discovery, openapi};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use std::sync::Arc;

pub(crate) fn json_response(code: u16, value: &Value) -> Response {
    let status = axum::http::StatusCode::from_u16(code).unwrap_or(axum::http::StatusCode::OK);
    (status, [("content-type", "application/json")], value.to_string()).into_response()
}

/// The router serving the whole API for `cluster`.
pub fn router(cluster: Arc<Cluster>) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { json_response(200, &discovery::version()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route(
            "/api",
            get(|| async { json_response(200, &discovery::core_versions()) }),
        )
        .route("/apis", get(apis))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v3/{*path}", get(openapi_document))
        .fallback(dispatch)
        .with_state(cluster)
}

async fn apis(State(cluster): State<Arc<Cluster>>) -> Response {
    json_response(200, &discovery::group_list(&cluster.lock().registry))
}

async fn openapi_index(State(cluster): State<Arc<Cluster>>) -> Response {
    json_response(200, &openapi::index(&cluster.lock().registry))
}

async fn openapi_document(State(cluster): State<Arc<Cluster>>, uri: Uri) -> Response {
    let path = uri.path().trim_start_matches("/openapi/v3/");
    let segments: Vec<&str> = path.split('/').collect();
    let (group, version) = match segments.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return ApiError::not_found_path(uri.path()).into_response(),
    };
    match openapi::document(&cluster.lock().registry, group, version) {
        Some(doc) => json_response(200, &doc),
        None => ApiError::not_found_path(uri.path()).into_response(),
    }
}

async fn dispatch(
    State(cluster): State<Arc<Cluster>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let ["apis", group] = uri
        .path()
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        return match discovery::group(&cluster.lock().registry, group) {
            Some(d) => json_response(200, &d),
            None => ApiError::not_found_path(uri.path()).into_response(),
        };
    }
    let Some(path) = request::parse_path(uri.path()) else {
        return ApiError::not_found_path(uri.path()).into_response();
    };
    let query = request::parse_query(query.as_deref());
    let Some(plural) = path.plural.clone() else {
        // A group or group-version discovery document.
        return resource_list(&cluster, &method, &path, uri.path());
    };
    let Some(rt) = cluster.resolve(&path.group, &path.version, &plural) else {
        return ApiError::not_found_path(uri.path()).into_response();
    };
    let warning = rt.deprecation_warning.clone();
    let ctx = resource::Context {
        cluster,
        rt,
        path,
        query,
        headers,
        method,
        body,
    };
    let mut response = match resource::handle(ctx).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    };
    if let Some(value) = warning.and_then(|w| warning_header(&w)) {
        response.headers_mut().append("warning", value);
    }
    response
}

/// A group-version's discovery document (its resource list), read-only like the API server's.
fn resource_list(
    cluster: &Cluster,
    method: &Method,
    path: &request::ResourcePath,
    uri_path: &str,
) -> Response {
    if method != Method::GET {
        return ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        ))
        .into_response();
    }
    let registry = &cluster.lock().registry;
    let doc = discovery::resource_list(registry, &path.group, &path.version);
    match doc {
        Some(d) => json_response(200, &d),
        None => ApiError::not_found_path(uri_path).into_response(),
    }
}

/// An RFC 7234 warning as the API server writes it: code 299, no agent, the text quoted.
fn warning_header(text: &str) -> Option<axum::http::HeaderValue> {
    let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
    axum::http::HeaderValue::from_str(&format!("299 - \"{quoted}\"")).ok()
}
