//! The resource verbs: get, list, watch, create, update, patch, delete, deletecollection.

use super::json_response;
use super::request::{ResourcePath, body_value, flag, output};
use crate::cluster::{
    Cluster, DeleteOptions, DeleteOutcome, FieldValidation, ListOptions, PatchType, Propagation,
    WriteOptions, WriteOutcome, scope_for,
};
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::table;
use crate::watch::{self, Output, WatchRequest};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub struct Context {
    pub cluster: Arc<Cluster>,
    pub rt: Arc<ResourceType>,
    pub path: ResourcePath,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    pub method: Method,
    pub body: Bytes,
}

impl Context {
    fn ns(&self) -> &str {
        self.path.namespace.as_deref().unwrap_or_default()
    }

    fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
    }

    fn body(&self) -> ApiResult<Value> {
        if self
            .content_type()
            .starts_with("application/vnd.kubernetes.protobuf")
        {
            return crate::protobuf::decode(&self.body).map_err(|e| {
                let mut err =
                    ApiError::bad_request(format!("decoding the protobuf request body failed: {e}"));
                err.code = 415;
                err.reason = "UnsupportedMediaType";
                err
            });
        }
        body_value(&self.body, self.content_type())
    }

    fn write_options(&self) -> ApiResult<WriteOptions> {
        let field_validation = match self.query.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
                )));
            }
        };
        // Without fieldManager the apiserver names the manager after the User-Agent's product.
        let field_manager = match self.query.get("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => m.clone(),
            None => self
                .headers
                .get("user-agent")
                .and_then(|v| v.to_str().ok())
                .and_then(|ua| ua.split('/').next())
                .filter(|p| !p.is_empty())
                .unwrap_or("unknown")
                .to_string(),
        };
        Ok(WriteOptions {
            field_manager,
            dry_run: self.query.get("dryRun").is_some_and(|v| !v.is_empty()),
            field_validation,
            force: flag(&self.query, "force") && self.query.contains_key("force"),
        })
    }

    fn list_options(&self) -> ApiResult<ListOptions> {
        Ok(ListOptions {
            labels: LabelSelector::parse(
                self.query
                    .get("labelSelector")
                    .map(String::as_str)
                    .unwrap_or_default(),
            )?,
            fields: FieldSelector::parse(
                self.query
                    .get("fieldSelector")
                    .map(String::as_str)
                    .unwrap_or_default(),
                &self.rt.kind,
            )?,
            limit: self.query.get("limit").and_then(|l| l.parse().ok()),
            continue_token: self.query.get("continue").cloned(),
        })
    }
}

pub async fn handle(ctx: Context) -> ApiResult<Response> {
    if ctx.rt.namespaced && ctx.path.namespace.is_none() && ctx.path.name.is_some() {
        return Err(ApiError::not_found_path(&format!(
            "{}/{}",
            ctx.rt.plural,
            ctx.path.name.clone().unwrap_or_default()
        )));
    }
    if !ctx.rt.namespaced && ctx.path.namespace.is_some() {
        return Err(ApiError::not_found_path(&ctx.rt.plural));
    }
    let sub = ctx.path.subresource.clone();
    match (&ctx.method, ctx.path.name.clone()) {
        (&Method::GET, None) if flag(&ctx.query, "watch") && ctx.query.contains_key("watch") => {
            watch_resource(ctx)
        }
        (&Method::GET, None) => list(ctx),
        (&Method::GET, Some(name)) => {
            scope_for(&ctx.rt, sub.as_deref())?;
            let obj = ctx.cluster.lock().get(&ctx.rt, ctx.ns(), &name)?;
            Ok(render_object(&ctx, 200, &obj, &[]))
        }
        (&Method::POST, None) => create(ctx),
        (&Method::PUT, Some(name)) => update(ctx, &name, sub.as_deref()),
        (&Method::PATCH, Some(name)) => patch(ctx, &name, sub.as_deref()),
        (&Method::DELETE, Some(name)) if sub.is_none() => delete(ctx, &name),
        (&Method::DELETE, None) => delete_collection(ctx),
        (method, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        ))),
    }
}

/// Renders one object in the representation the client asked for, with warnings.
fn render_object(ctx: &Context, code: u16, obj: &Value, warnings: &[String]) -> Response {
    let body = match output(&ctx.headers, &ctx.query) {
        Output::Object => obj.clone(),
        Output::Metadata => table::partial_metadata(obj),
        Output::Table(include) => table::table(
            &ctx.rt,
            std::slice::from_ref(obj),
            meta::resource_version(obj),
            include,
            true,
        ),
    };
    let mut response = json_response(code, &body);
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - {}", json!(w))) {
            response.headers_mut().append("warning", v);
        }
    }
    response
}

fn list(ctx: Context) -> ApiResult<Response> {
    let opts = ctx.list_options()?;
    let result = ctx
        .cluster
        .lock()
        .list(&ctx.rt, ctx.path.namespace.as_deref(), &opts)?;
    let mut metadata = json!({"resourceVersion": result.resource_version});
    if let Some(c) = &result.continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(n) = result.remaining {
        metadata["remainingItemCount"] = json!(n);
    }
    let body = match output(&ctx.headers, &ctx.query) {
        Output::Table(include) => {
            let mut t = table::table(&ctx.rt, &result.items, &result.resource_version, include, true);
            t["metadata"] = metadata;
            t
        }
        Output::Metadata => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "items": result.items.iter().map(table::partial_metadata).collect::<Vec<_>>(),
        }),
        Output::Object => json!({
            "kind": ctx.rt.list_kind,
            "apiVersion": ctx.rt.api_version(),
            "metadata": metadata,
            "items": result.items,
        }),
    };
    Ok(json_response(200, &body))
}

fn watch_resource(ctx: Context) -> ApiResult<Response> {
    let opts = ctx.list_options()?;
    let timeout = ctx
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(ctx.cluster.config.default_watch_timeout);
    let resource_version = ctx.query.get("resourceVersion").cloned();
    if let Some(rv) = resource_version.as_deref().filter(|v| !v.is_empty())
        && rv.parse::<u64>().is_err()
    {
        return Err(ApiError::bad_request(format!("invalid resource version: {rv}")));
    }
    let request = WatchRequest {
        rt: ctx.rt.clone(),
        namespace: ctx.path.namespace.clone(),
        labels: opts.labels,
        fields: opts.fields,
        resource_version,
        allow_bookmarks: flag(&ctx.query, "allowWatchBookmarks")
            && ctx.query.contains_key("allowWatchBookmarks"),
        send_initial_events: flag(&ctx.query, "sendInitialEvents")
            && ctx.query.contains_key("sendInitialEvents"),
        timeout,
        output: output(&ctx.headers, &ctx.query),
    };
    let rx = watch::start(ctx.cluster.clone(), request);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(Bytes::from(line)), rx))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(format!("building the watch response failed: {e}")))
}

fn create(ctx: Context) -> ApiResult<Response> {
    if ctx.path.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "POST is not supported on this subresource",
        ));
    }
    let opts = ctx.write_options()?;
    let body = ctx.body()?;
    let rt = ctx.rt.clone();
    let ns = ctx.ns().to_string();
    let outcome: WriteOutcome = ctx.cluster.write(|s| s.create(&rt, &ns, body, &opts))?;
    Ok(render_object(&ctx, 201, &outcome.object, &outcome.warnings))
}

fn update(ctx: Context, name: &str, sub: Option<&str>) -> ApiResult<Response> {
    let opts = ctx.write_options()?;
    let body = ctx.body()?;
    let rt = ctx.rt.clone();
    let ns = ctx.ns().to_string();
    if sub == Some("finalize") && rt.is_namespace() {
        // namespaces/finalize writes spec.finalizers only.
        let outcome = ctx.cluster.write(|s| s.finalize_namespace(name, &body, &opts))?;
        return Ok(render_object(&ctx, 200, &outcome.object, &outcome.warnings));
    }
    let scope = scope_for(&rt, sub)?;
    let outcome = ctx
        .cluster
        .write(|s| s.update(&rt, &ns, name, body, scope, &opts))?;
    Ok(render_object(&ctx, 200, &outcome.object, &outcome.warnings))
}

fn patch(ctx: Context, name: &str, sub: Option<&str>) -> ApiResult<Response> {
    let patch_type = PatchType::from_content_type(ctx.content_type())
        .ok_or_else(|| ApiError::unsupported_media_type(ctx.content_type()))?;
    let mut opts = ctx.write_options()?;
    if patch_type == PatchType::Apply && !ctx.query.contains_key("fieldManager") {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    if patch_type != PatchType::Apply && ctx.query.contains_key("force") {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    opts.force = opts.force && patch_type == PatchType::Apply;
    let body = ctx.body()?;
    let rt = ctx.rt.clone();
    let ns = ctx.ns().to_string();
    let scope = scope_for(&rt, sub)?;
    let outcome = ctx
        .cluster
        .write(|s| s.patch(&rt, &ns, name, patch_type, body, scope, &opts))?;
    let code = if outcome.created { 201 } else { 200 };
    Ok(render_object(&ctx, code, &outcome.object, &outcome.warnings))
}

fn delete_options(ctx: &Context) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions {
        propagation: ctx
            .query
            .get("propagationPolicy")
            .map(|p| Propagation::parse(p))
            .transpose()?,
        precondition_uid: None,
        precondition_rv: None,
        dry_run: ctx.query.get("dryRun").is_some_and(|v| !v.is_empty()),
    };
    if ctx.query.get("orphanDependents").map(String::as_str) == Some("true") && opts.propagation.is_none() {
        opts.propagation = Some(Propagation::Orphan);
    }
    let body = ctx.body()?;
    if body.is_object() {
        opts.merge_body(&body)?;
    }
    Ok(opts)
}

fn delete(ctx: Context, name: &str) -> ApiResult<Response> {
    let opts = delete_options(&ctx)?;
    let rt = ctx.rt.clone();
    let ns = ctx.ns().to_string();
    let outcome = ctx.cluster.write(|s| s.delete(&rt, &ns, name, &opts))?;
    Ok(match outcome {
        DeleteOutcome::Pending(obj) => render_object(&ctx, 200, &obj, &[]),
        DeleteOutcome::Deleted(obj) => {
            // The generic registry answers an immediate deletion with a Success Status.
            let mut details = json!({"name": name, "kind": rt.plural, "uid": meta::uid(&obj)});
            if !rt.group.is_empty() {
                details["group"] = json!(rt.group);
            }
            json_response(
                200,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
            )
        }
    })
}

fn delete_collection(ctx: Context) -> ApiResult<Response> {
    let opts = delete_options(&ctx)?;
    let list_opts = ctx.list_options()?;
    let rt = ctx.rt.clone();
    let ns = ctx.path.namespace.clone();
    let items = ctx
        .cluster
        .write(|s| s.delete_collection(&rt, ns.as_deref(), &list_opts, &opts))?;
    let rv = ctx.cluster.lock().store.resource_version().to_string();
    Ok(json_response(
        200,
        &json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": {"resourceVersion": rv}, "items": items}),
    ))
}
