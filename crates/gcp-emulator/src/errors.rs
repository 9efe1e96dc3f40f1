//! Google API errors: `google.rpc.Status` over HTTP (`{"error":{"code","message","status","details"}}`)
//! for TPU / Dataproc / Vertex, and Cloud Storage's legacy `errors[]` shape.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Canonical `google.rpc.Code`s, with their HTTP mapping (gcp-wire §1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    pub const ALL: [Code; 16] = [
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The `google.rpc.Code` number (used in `Operation.error.code` and `failedData.error.code`).
    pub fn rpc(self) -> i32 {
        match self {
            Code::Cancelled => 1,
            Code::Unknown => 2,
            Code::InvalidArgument => 3,
            Code::DeadlineExceeded => 4,
            Code::NotFound => 5,
            Code::AlreadyExists => 6,
            Code::PermissionDenied => 7,
            Code::ResourceExhausted => 8,
            Code::FailedPrecondition => 9,
            Code::Aborted => 10,
            Code::OutOfRange => 11,
            Code::Unimplemented => 12,
            Code::Internal => 13,
            Code::Unavailable => 14,
            Code::DataLoss => 15,
            Code::Unauthenticated => 16,
        }
    }

    /// HTTP status Google's front end answers with for this code.
    pub fn http(self) -> u16 {
        match self {
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::ResourceExhausted => 429,
            Code::Cancelled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::DeadlineExceeded => 504,
        }
    }

    /// Canonical name, e.g. `NOT_FOUND`.
    pub fn name(self) -> &'static str {
        match self {
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// Parses a canonical name (`NOT_FOUND`), a number (`5`) or an HTTP status (`404`).
    pub fn parse(s: &str) -> Option<Code> {
        let s = s.trim();
        if let Ok(n) = s.parse::<i32>() {
            return Code::ALL
                .into_iter()
                .find(|c| c.rpc() == n)
                .or_else(|| Code::ALL.into_iter().find(|c| i32::from(c.http()) == n));
        }
        Code::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(s))
    }

    /// A default message like the ones Google's front end uses for injected faults.
    pub fn default_message(self) -> &'static str {
        match self {
            Code::PermissionDenied => "The caller does not have permission",
            Code::Unavailable => "The service is currently unavailable.",
            Code::ResourceExhausted => "Quota exceeded or resources exhausted.",
            Code::Unauthenticated => {
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
            }
            Code::Internal => "Internal error encountered.",
            Code::DeadlineExceeded => "Deadline expired before operation could complete.",
            _ => "Injected fault",
        }
    }
}

/// An error answered by the TPU / Dataproc / Vertex surfaces.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Vec<Value>,
    /// Cloud Storage answers with its legacy shape (`errors[]`, reason) instead.
    pub gcs_reason: Option<&'static str>,
    /// Compute Engine answers with its own legacy shape (`errors[]` with `domain: global` and
    /// this `reason`, no `status`); see `compute::errors`.
    pub compute_reason: Option<&'static str>,
    /// The `errors[].domain` of Compute Engine's legacy shape (default `global`; a rate limit
    /// is `usageLimits`).
    pub legacy_domain: Option<&'static str>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: Vec::new(),
            gcs_reason: None,
            compute_reason: None,
            legacy_domain: None,
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }
    /// INVALID_ARGUMENT with a `google.rpc.BadRequest` field violation naming `field`.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut e = Self::new(Code::InvalidArgument, message.clone());
        e.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": field, "description": message}],
        }));
        e
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }
    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }
    /// A failed precondition Google answers with 412 `conditionNotMet`: a Cloud Storage
    /// `ifGenerationMatch`, a Compute Engine metadata fingerprint.
    pub fn condition_not_met(message: impl Into<String>) -> Self {
        Self::gcs(Code::FailedPrecondition, "conditionNotMet", message)
    }
    /// A Cloud Storage error: `reason` goes into the legacy `errors[]` entry.
    pub fn gcs(code: Code, reason: &'static str, message: impl Into<String>) -> Self {
        let mut e = Self::new(code, message);
        e.gcs_reason = Some(reason);
        e
    }

    pub fn http_status(&self) -> u16 {
        // GCS answers a failed precondition (ifGenerationMatch) with 412.
        if self.gcs_reason == Some("conditionNotMet") {
            412
        } else {
            self.code.http()
        }
    }

    /// The JSON body Google sends.
    pub fn body(&self) -> Value {
        let status = self.http_status();
        if let Some(reason) = self.compute_reason {
            return json!({"error": {
                "code": status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": self.legacy_domain.unwrap_or("global"), "reason": reason}],
            }});
        }
        match self.gcs_reason {
            Some(reason) => {
                let mut err = json!({
                    "code": status,
                    "message": self.message,
                    "errors": [{"domain": "global", "message": self.message, "reason": reason}],
                });
                // Real GCS omits `status` for a missing bucket but sends it for a missing object;
                // the emulator follows the object form except for that one message.
                if self.message != "The specified bucket does not exist." {
                    err["status"] = json!(self.code.name());
                }
                json!({ "error": err })
            }
            None => {
                let mut err = json!({"code": status, "message": self.message, "status": self.code.name()});
                if !self.details.is_empty() {
                    err["details"] = Value::Array(self.details.clone());
                }
                json!({ "error": err })
            }
        }
    }

    /// The `google.rpc.Status` form used inside `Operation.error` and `failedData.error`.
    pub fn rpc_status(&self) -> Value {
        let mut s = json!({"code": self.code.rpc(), "message": self.message});
        if !self.details.is_empty() {
            s["details"] = Value::Array(self.details.clone());
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.name(),
            self.http_status(),
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;
