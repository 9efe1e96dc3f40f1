//! Compute Engine's error shape: `{"error": {"code": <http>, "message", "errors": [{"message",
//! "domain": "global", "reason"}]}}`, without the `status` that the newer Google APIs send.
//!
//! Sources: the reasons `notFound`, `alreadyExists`, `invalid`, `resourceInUseByAnotherResource`,
//! `resourceNotReady` as listed in "Compute Engine API errors"
//! (https://cloud.google.com/compute/docs/troubleshooting/troubleshoot-api-errors, assumed: the
//! page was not available to check while writing this) and the `errors[]` item shape of Google's
//! legacy JSON errors, which `google-cloud-gax` parses into `ErrorInfo { reason, domain }`
//! details (`google-cloud-gax` `error/rpc.rs`, `ErrorItem`). Without `status` the official
//! client reports `Code::Unknown` and the HTTP status (`Error::http_status_code()`).

use crate::errors::{ApiError, Code};

fn with_reason(code: Code, reason: &'static str, message: impl Into<String>) -> ApiError {
    let mut e = ApiError::new(code, message);
    e.compute_reason = Some(reason);
    e
}

/// 404 `notFound`: "The resource 'projects/p/zones/z/instances/i' was not found".
pub fn not_found(key: &str) -> ApiError {
    with_reason(
        Code::NotFound,
        "notFound",
        format!("The resource '{key}' was not found"),
    )
}

/// 409 `alreadyExists`: "The resource 'projects/p/zones/z/instances/i' already exists".
pub fn already_exists(key: &str) -> ApiError {
    with_reason(
        Code::AlreadyExists,
        "alreadyExists",
        format!("The resource '{key}' already exists"),
    )
}

/// 400 `invalid` naming the field: "Invalid value for field 'resource.machineType': ...".
pub fn invalid_field(field: &str, value: &str, why: &str) -> ApiError {
    with_reason(
        Code::InvalidArgument,
        "invalid",
        format!("Invalid value for field '{field}': '{value}'. {why}"),
    )
}

/// 400 `required`: a required field is missing.
pub fn required(field: &str) -> ApiError {
    with_reason(
        Code::InvalidArgument,
        "required",
        format!("Required field '{field}' not specified"),
    )
}

/// 400 `invalid` with a free-form message.
pub fn invalid(message: impl Into<String>) -> ApiError {
    with_reason(Code::InvalidArgument, "invalid", message)
}

/// 400 `resourceInUseByAnotherResource` (deleting a template / policy a MIG still uses).
pub fn in_use(kind: &str, key: &str, by: &str) -> ApiError {
    with_reason(
        Code::InvalidArgument,
        "resourceInUseByAnotherResource",
        format!("The {kind} resource '{key}' is already being used by '{by}'"),
    )
}

/// 400 `resourceNotReady` (an operation the resource's state does not allow).
pub fn not_ready(message: impl Into<String>) -> ApiError {
    with_reason(Code::FailedPrecondition, "resourceNotReady", message)
}

/// Gives any error (schema validation, injected faults, filters) Compute's shape.
pub fn compute_shape(mut e: ApiError) -> ApiError {
    if e.compute_reason.is_none() {
        e.compute_reason = Some(match e.code {
            Code::NotFound => "notFound",
            Code::AlreadyExists => "alreadyExists",
            Code::PermissionDenied => "forbidden",
            Code::Unauthenticated => "required",
            Code::ResourceExhausted => "rateLimitExceeded",
            Code::Unavailable | Code::Internal | Code::Unknown | Code::DataLoss => "backendError",
            Code::DeadlineExceeded => "timeout",
            Code::Aborted => "conflict",
            Code::FailedPrecondition => "conditionNotMet",
            _ => "invalid",
        });
    }
    e.details.clear();
    e
}
