//! Checks of a request body against the URL it was sent to: type, name, and what an applied
//! configuration must (and must not) carry.

use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;
use serde_json::Value;

/// The body's apiVersion and kind, when given, must be the URL's.
pub(in crate::cluster) fn check_type_meta(rt: &ResourceType, body: &Value) -> ApiResult<()> {
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or_default();
    let accepted = [rt.api_version(), rt.storage_api_version.clone()];
    if !api_version.is_empty() && !accepted.iter().any(|a| a == api_version) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if !kind.is_empty() && kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

/// An applied configuration names its object (kube-rs and kubectl always send name, apiVersion, kind).
pub(in crate::cluster) fn check_apply_identity(rt: &ResourceType, name: &str, body: &Value) -> ApiResult<()> {
    // Applying an object read back from the server (with its managedFields) is a classic client
    // bug; the apiserver refuses it.
    if meta::meta(body)
        .get("managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let body_name = meta::name(body);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if body.get("apiVersion").is_none() || body.get("kind").is_none() {
        return Err(ApiError::bad_request(format!(
            "invalid object type: apply patches must set apiVersion and kind ({}, Kind={})",
            rt.api_version(),
            rt.kind
        )));
    }
    Ok(())
}
