//! The surface a call went to and what happened, as far as a controller needs to know.

use std::fmt;

use google_cloud_gax::error::rpc::Code;

/// The GCP surface a call went to (a metrics label and part of every error message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    Tpu,
    Dataproc,
    Vertex,
    Storage,
    Compute,
    Logging,
    /// IAM Service Account Credentials (`generateAccessToken`, impersonation).
    Iam,
}

impl Service {
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Tpu => "tpu",
            Service::Dataproc => "dataproc",
            Service::Vertex => "vertex",
            Service::Storage => "storage",
            Service::Compute => "compute",
            Service::Logging => "logging",
            Service::Iam => "iamcredentials",
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened, as far as a controller needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// NOT_FOUND / HTTP 404.
    NotFound,
    /// ALREADY_EXISTS / HTTP 409 (same node id, queued resource id, batch id).
    AlreadyExists,
    /// RESOURCE_EXHAUSTED / HTTP 429: quota, TPU stockout, or an API rate limit (see the module docs).
    ResourceExhausted,
    /// PERMISSION_DENIED / HTTP 403.
    PermissionDenied,
    /// UNAUTHENTICATED / HTTP 401, or credentials that cannot produce a token.
    Unauthenticated,
    /// FAILED_PRECONDITION: e.g. deleting a running Dataproc batch, stopping a multi-host TPU.
    FailedPrecondition,
    /// INVALID_ARGUMENT / OUT_OF_RANGE / HTTP 400, or a request the client could not even build
    /// (a resource name that does not match the API's template).
    InvalidArgument,
    /// Worth retrying with backoff: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ABORTED,
    /// HTTP 5xx / 408, connection and timeout errors, transient credential failures.
    Transient,
    /// CANCELLED (an operation cancelled on request ends with this code).
    Cancelled,
    /// A reply arrived but could not be decoded: a body cut short, a proxy's HTML page, a field of
    /// an unexpected type. Retried with backoff like a transient error (a truncated body is gone
    /// on the next try; a lasting mismatch ends up at the backoff cap), but counted apart so a
    /// client/API mismatch shows in metrics.
    Unreadable,
    /// Anything else: UNIMPLEMENTED, DATA_LOSS.
    Other,
}

impl ErrorKind {
    /// Stable snake_case name, used as the metrics `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::ResourceExhausted => "resource_exhausted",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::FailedPrecondition => "failed_precondition",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Transient => "transient",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Unreadable => "unreadable",
            ErrorKind::Other => "other",
        }
    }

    /// Classification of a canonical `google.rpc.Code`.
    pub fn from_code(code: Code) -> Self {
        match code {
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::AlreadyExists,
            Code::ResourceExhausted => ErrorKind::ResourceExhausted,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            Code::FailedPrecondition => ErrorKind::FailedPrecondition,
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidArgument,
            Code::Unavailable | Code::DeadlineExceeded | Code::Internal | Code::Unknown | Code::Aborted => {
                ErrorKind::Transient
            }
            Code::Cancelled => ErrorKind::Cancelled,
            _ => ErrorKind::Other,
        }
    }

    /// Classification of a bare HTTP status (no parsable `google.rpc.Status` body).
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 => ErrorKind::InvalidArgument,
            401 => ErrorKind::Unauthenticated,
            403 => ErrorKind::PermissionDenied,
            404 | 410 => ErrorKind::NotFound,
            409 => ErrorKind::AlreadyExists,
            412 => ErrorKind::FailedPrecondition,
            429 => ErrorKind::ResourceExhausted,
            499 => ErrorKind::Cancelled,
            408 | 500..=599 => ErrorKind::Transient,
            _ => ErrorKind::Other,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
