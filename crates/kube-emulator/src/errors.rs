//! API errors rendered as `metav1.Status` bodies with the reason and HTTP code the apiserver uses;
//! kube-rs (`get_opt`, `entry()`, the finalizer helper, the watcher) and kubectl key off these.

use crate::validation::Invalid;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One failed request: HTTP code, Status `reason`, message and optional `details`.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Names the object an error is about: `group` empty for core, `kind` the plural resource name,
/// which is what the apiserver puts in `details.kind` (e.g. `widgets`).
#[derive(Clone, Debug)]
pub struct Subject<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub name: &'a str,
}

impl Subject<'_> {
    /// `widgets.example.dev` or `configmaps`, as in "widgets.example.dev \"w\" not found".
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Value {
        let mut d = json!({"name": self.name, "kind": self.resource});
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(s: &Subject<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", s.qualified(), s.name),
        );
        e.details = Some(s.details());
        e
    }

    pub fn already_exists(s: &Subject<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", s.qualified(), s.name),
        );
        e.details = Some(s.details());
        e
    }

    /// Optimistic-concurrency failure (stale resourceVersion) or failed precondition.
    pub fn conflict(s: &Subject<'_>, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {why}",
                s.qualified(),
                s.name
            ),
        );
        e.details = Some(s.details());
        e
    }

    pub fn stale(s: &Subject<'_>) -> Self {
        Self::conflict(
            s,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// Server-side apply conflicts (409 Conflict with FieldManagerConflict causes).
    pub fn apply_conflicts(s: &Subject<'_>, conflicts: &[(String, String)], api_version: &str) -> Self {
        let lines: Vec<String> = conflicts
            .iter()
            .map(|(manager, field)| format!("conflict with \"{manager}\" using {api_version}: {field}"))
            .collect();
        let message = if lines.len() == 1 {
            format!("Apply failed with 1 conflict: {}", lines[0])
        } else {
            format!(
                "Apply failed with {} conflicts: {}",
                lines.len(),
                lines.join("\n")
            )
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .zip(&lines)
            .map(
                |((_, field), line)| json!({"type": "FieldManagerConflict", "message": line, "field": field}),
            )
            .collect();
        let mut details = s.details();
        details["causes"] = Value::Array(causes);
        Self {
            code: 409,
            reason: "Conflict",
            message,
            details: Some(details),
        }
    }

    /// 422 Invalid: `<Kind>.<group> "<name>" is invalid: <causes>`.
    pub fn invalid(kind: &str, group: &str, name: &str, invalid: &Invalid) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let causes: Vec<Value> = invalid
            .causes
            .iter()
            .map(|c| json!({"reason": c.reason(), "message": c.message, "field": c.field}))
            .collect();
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self {
            code: 422,
            reason: "Invalid",
            message: format!("{qualified} \"{name}\" is invalid: {invalid}"),
            details: Some(details),
        }
    }

    /// A ValidatingAdmissionPolicy refusal with reason `Forbidden` (HTTP 403).
    pub fn admission_forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// A ValidatingAdmissionPolicy refusal with reason `Invalid` (HTTP 422).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(s: &Subject<'_>, why: &str) -> Self {
        let mut e = Self::new(
            403,
            "Forbidden",
            format!("{} \"{}\" is forbidden: {why}", s.qualified(), s.name),
        );
        e.details = Some(s.details());
        e
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// 410 Gone for a watch or list from a resourceVersion older than the kept history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn not_found_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (path {path})"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            code,
            [("content-type", "application/json")],
            self.status().to_string(),
        )
            .into_response()
    }
}
