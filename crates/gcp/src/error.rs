//! One error type for every GCP call, classified so controllers decide by kind, never by text.
//!
//! # `RESOURCE_EXHAUSTED` (HTTP 429): capacity wait or rate limit?
//!
//! Both arrive with the same code. A TPU stockout or an exhausted quota is
//! `RESOURCE_EXHAUSTED` on `nodes.create` (or in the create operation's error), and it means "wait
//! for capacity, possibly for hours": retrying quickly only burns API quota. A per-minute API rate
//! limit is `RESOURCE_EXHAUSTED` too, with `ErrorInfo.reason = RATE_LIMIT_EXCEEDED` (GCS legacy
//! errors: `rateLimitExceeded` / `userRateLimitExceeded`), and it is worth a short backoff.
//! So the kind stays [`ErrorKind::ResourceExhausted`] for both; [`GcpError::is_rate_limited`] tells
//! the rate-limit case apart by its structured reason, or by the method (a read, list, delete or
//! cancel asks for no capacity, so its 429 can only be a rate limit), and [`GcpError::is_retryable`] is true for it
//! but false for a plain quota / stockout. Controllers map the latter by surface (TPU create →
//! `WaitingForCapacity`, slow poll; elsewhere → a condition naming the quota).
//!
//! # Quota or stockout? ([`GcpError::exhaustion`])
//!
//! A stockout clears by itself (capacity comes back); an exhausted project quota does not: it
//! needs a person to request an increase. Google says which in the error's details, when it sends
//! any (`google.rpc.Status.details`, exposed by google-cloud-gax as
//! [`StatusDetails`]; the same details arrive inside a failed operation's `error`):
//! * `google.rpc.QuotaFailure` (`violations[].quotaMetric`, `subject`, `description`) and
//!   `ErrorInfo.reason = RESOURCE_QUOTA_EXCEEDED` (with `metadata.quota_metric` /
//!   `quota_limit`) mean quota: googleapis `google/rpc/error_details.proto` and
//!   `google/api/error_reason.proto` (the `google-cloud-rpc` / `google-cloud-api` crates carry
//!   both texts; <https://cloud.google.com/apis/design/errors#error_info>).
//! * `ErrorInfo.reason = STOCKOUT` is the stockout example of `error_details.proto`
//!   ("an error that is returned when attempting to create a Spanner instance in a region that is
//!   out of stock"); Compute Engine's `ZONE_RESOURCE_POOL_EXHAUSTED*` reasons mean the same.
//! * Without details, the message decides only for the quota texts Google's front end is seen
//!   to send (`Quota limit '…' has been exceeded` from `gcloud compute tpus create`, `The
//!   following quota metrics exceed quota limits` from Vertex); anything else stays
//!   [`Exhaustion::Unknown`], which controllers treat as a capacity wait (the old behaviour).

use std::fmt;

use google_cloud_gax::error::{
    CredentialsError, Error as GaxError,
    rpc::{Code, Status, StatusDetails},
};

/// The GCP surface a call went to (a metrics label and part of every error message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    Tpu,
    Dataproc,
    Vertex,
    Storage,
    Compute,
}

impl Service {
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Tpu => "tpu",
            Service::Dataproc => "dataproc",
            Service::Vertex => "vertex",
            Service::Storage => "storage",
            Service::Compute => "compute",
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

/// Structured `ErrorInfo.reason` values that mark a RESOURCE_EXHAUSTED as an API rate limit
/// (ESF front end and the GCS legacy `errors[].reason`).
const RATE_LIMIT_REASONS: &[&str] = &[
    "RATE_LIMIT_EXCEEDED",
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "TOO_MANY_REQUESTS",
];

/// A failed GCP call (or a failed long-running operation), classified.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{service} {method} {target}: {kind}{}: {}", self.code_suffix(), self.stable_message())]
pub struct GcpError {
    pub kind: ErrorKind,
    pub service: Service,
    /// The API method, e.g. `nodes.create`, `batches.get`, `objects.list`, or `operation` for an
    /// error carried by a finished long-running operation.
    pub method: &'static str,
    /// The resource name or parent the call addressed (empty when not applicable).
    pub target: String,
    /// The server's message, or a description of the client-side failure, as received.
    /// `Display` shows [`GcpError::stable_message`] instead.
    pub message: String,
    /// The HTTP status, when a response was received.
    pub http_status: Option<u16>,
    /// The canonical status name (`RESOURCE_EXHAUSTED`, ...) when the server sent one.
    pub status: Option<&'static str>,
    /// `ErrorInfo.reason` (or the GCS legacy `errors[0].reason`) when present.
    pub reason: Option<String>,
    /// What the details say about a quota, when they say anything (boxed: rare, and a
    /// `GcpError` travels in every `Result` of this crate).
    pub quota: Option<Box<QuotaDetails>>,
}

/// Quota facts from an error's details.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaDetails {
    /// The exhausted quota: `QuotaFailure.violations[].quotaMetric` (else its `subject`), or
    /// `ErrorInfo.metadata.quota_metric` / `quota_limit`.
    pub metric: Option<String>,
    /// The details carry a `google.rpc.QuotaFailure`.
    pub quota_failure: bool,
}

/// Why a RESOURCE_EXHAUSTED happened, as far as the error says (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exhaustion {
    /// A per-minute API request limit: retry after a short backoff.
    RateLimit,
    /// A project / region quota: nothing changes until somebody raises it.
    Quota,
    /// No capacity in the zone right now: it comes back by itself.
    Stockout,
    /// RESOURCE_EXHAUSTED without a telling detail or message.
    Unknown,
}

/// `ErrorInfo.reason`s that mean "resource quota exhausted" (`google/api/error_reason.proto`
/// `RESOURCE_QUOTA_EXCEEDED`; `QUOTA_EXCEEDED` is Compute Engine's and GCS's legacy
/// `quotaExceeded`).
const QUOTA_REASONS: &[&str] = &["RESOURCE_QUOTA_EXCEEDED", "QUOTA_EXCEEDED", "quotaExceeded"];

/// `ErrorInfo.reason`s that mean "no capacity right now" (`google/rpc/error_details.proto`
/// example `STOCKOUT`; Compute Engine's `ZONE_RESOURCE_POOL_EXHAUSTED` family).
const STOCKOUT_REASONS: &[&str] = &[
    "STOCKOUT",
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "RESOURCE_POOL_EXHAUSTED",
];

/// Message texts Google's front end sends for an exhausted quota when it sends no details.
const QUOTA_TEXTS: &[&str] = &["quota limit '", "exceed quota limits", "insufficient quota"];

impl GcpError {
    /// An error built by this crate (client side), e.g. a malformed `gs://` URI.
    pub fn new(
        kind: ErrorKind,
        service: Service,
        method: &'static str,
        target: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            service,
            method,
            target: target.into(),
            message: message.into(),
            http_status: None,
            status: None,
            reason: None,
            quota: None,
        }
    }

    /// The message without the per-request error id some Google messages end with
    /// (`[EID: 0x1a2b]`), so the same failure reads the same on every try. Copied into a status
    /// condition, a changing id would rewrite the status on every retry, and each status write
    /// wakes the controller again (a hot loop during a stockout).
    pub fn stable_message(&self) -> &str {
        split_error_id(&self.message).0
    }

    /// The per-request error id (`0x1a2b` of `[EID: 0x1a2b]`), for logs and support cases.
    pub fn error_id(&self) -> Option<&str> {
        split_error_id(&self.message).1
    }

    /// Classifies an error returned by one of Google's clients.
    pub fn from_gax(service: Service, method: &'static str, target: &str, err: &GaxError) -> Self {
        let http_status = err.http_status_code();
        let mut error = Self::new(ErrorKind::Other, service, method, target, err.to_string());
        error.http_status = http_status;
        if let Some(status) = err.status() {
            error.apply_status(status);
            return error;
        }
        error.kind = if let Some(code) = http_status {
            ErrorKind::from_http_status(code)
        } else if err.is_authentication() {
            let transient = std::error::Error::source(err)
                .and_then(|source| source.downcast_ref::<CredentialsError>())
                .is_some_and(CredentialsError::is_transient);
            if transient {
                ErrorKind::Transient
            } else {
                ErrorKind::Unauthenticated
            }
        } else if err.is_timeout() || err.is_connect() || err.is_io() || err.is_transport() {
            ErrorKind::Transient
        } else if err.is_binding() || err.is_serialization() {
            ErrorKind::InvalidArgument
        } else if err.is_deserialization() {
            ErrorKind::Unreadable
        } else {
            // Anything new in the client library.
            ErrorKind::Other
        };
        error
    }

    /// Classifies a `google.rpc.Status` (from a response body or a finished operation).
    pub fn from_status(service: Service, method: &'static str, target: &str, status: &Status) -> Self {
        let mut error = Self::new(ErrorKind::Other, service, method, target, status.message.clone());
        error.apply_status(status);
        error
    }

    /// Classifies an HTTP error response: a `{"error": {...}}` body (ESF `google.rpc.Status` or the
    /// GCS legacy shape), else the HTTP status alone (e.g. an HTML page from a proxy).
    pub fn from_http_response(
        service: Service,
        method: &'static str,
        target: &str,
        http_status: u16,
        body: &[u8],
    ) -> Self {
        let mut error = Self::new(
            ErrorKind::from_http_status(http_status),
            service,
            method,
            target,
            "",
        );
        error.http_status = Some(http_status);
        match Status::try_from(&bytes::Bytes::copy_from_slice(body)) {
            Ok(status) => error.apply_status(&status),
            Err(_) => {
                error.message = String::from_utf8_lossy(&body[..body.len().min(512)])
                    .trim()
                    .to_string();
            }
        }
        error
    }

    fn apply_status(&mut self, status: &Status) {
        self.kind = match (status.code, self.http_status) {
            // A body without a recognizable `status` parses as UNKNOWN: trust the HTTP status then.
            (Code::Unknown, Some(http)) => ErrorKind::from_http_status(http),
            (code, _) => ErrorKind::from_code(code),
        };
        if status.code != Code::Unknown || self.http_status.is_none() {
            self.status = Some(status.code.name());
        }
        if !status.message.is_empty() {
            self.message = status.message.clone();
        }
        self.reason = status.details.iter().find_map(|detail| match detail {
            StatusDetails::ErrorInfo(info) if !info.reason.is_empty() => Some(info.reason.clone()),
            _ => None,
        });
        let non_empty = |s: &String| (!s.is_empty()).then(|| s.clone());
        let mut quota_metric = None;
        let mut quota_failure = false;
        for detail in &status.details {
            match detail {
                StatusDetails::QuotaFailure(failure) => {
                    quota_failure = true;
                    quota_metric = quota_metric.or_else(|| {
                        failure
                            .violations
                            .iter()
                            .find_map(|v| non_empty(&v.quota_metric).or_else(|| non_empty(&v.subject)))
                    });
                }
                StatusDetails::ErrorInfo(info) => {
                    quota_metric = quota_metric.or_else(|| {
                        ["quota_metric", "quota_limit"]
                            .iter()
                            .find_map(|k| info.metadata.get(*k).and_then(non_empty))
                    });
                }
                _ => {}
            }
        }
        self.quota = (quota_failure || quota_metric.is_some()).then(|| {
            Box::new(QuotaDetails {
                metric: quota_metric,
                quota_failure,
            })
        });
    }

    /// The exhausted quota's metric (or limit), when the details name one.
    pub fn quota_metric(&self) -> Option<&str> {
        self.quota.as_ref().and_then(|q| q.metric.as_deref())
    }

    /// What a RESOURCE_EXHAUSTED means (`None` for any other kind): a rate limit, an exhausted
    /// quota (a person must act), a stockout (wait), or unknown. Structured details decide
    /// first, then the method ([`GcpError::is_rate_limited`]), then the known quota texts.
    pub fn exhaustion(&self) -> Option<Exhaustion> {
        if self.kind != ErrorKind::ResourceExhausted {
            return None;
        }
        let reason = self.reason.as_deref().unwrap_or_default();
        Some(if self.is_rate_limited() {
            Exhaustion::RateLimit
        } else if QUOTA_REASONS.contains(&reason) || self.quota.as_ref().is_some_and(|q| q.quota_failure) {
            Exhaustion::Quota
        } else if STOCKOUT_REASONS.contains(&reason) {
            Exhaustion::Stockout
        } else if self.reason.is_none() && {
            let message = self.message.to_ascii_lowercase();
            QUOTA_TEXTS.iter().any(|t| message.contains(t))
        } {
            Exhaustion::Quota
        } else {
            Exhaustion::Unknown
        })
    }

    fn code_suffix(&self) -> String {
        let mut suffix = String::new();
        if let Some(status) = self.status {
            suffix.push_str(&format!(" ({status}"));
        }
        if let Some(http) = self.http_status {
            suffix.push_str(if suffix.is_empty() { " (" } else { ", " });
            suffix.push_str(&format!("HTTP {http}"));
        }
        if let Some(reason) = &self.reason {
            suffix.push_str(if suffix.is_empty() { " (" } else { ", " });
            suffix.push_str(&format!("reason {reason}"));
        }
        if !suffix.is_empty() {
            suffix.push(')');
        }
        suffix
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// RESOURCE_EXHAUSTED caused by an API rate limit (not by quota or capacity): it says so in
    /// its structured reason, or the call could not have asked for capacity at all. Reads,
    /// lists, deletes and cancels consume no chips, DCUs or resource quota, so a 429 on them can
    /// only be a request-rate limit, whatever the reason field says (or omits); treating it as a
    /// capacity wait would leave a delete unretried for minutes while the slice keeps billing.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == ErrorKind::ResourceExhausted
            && (self
                .reason
                .as_deref()
                .is_some_and(|reason| RATE_LIMIT_REASONS.contains(&reason))
                || !asks_for_capacity(self.method))
    }

    /// Retrying the same call after a short backoff may succeed: transient failures and API rate
    /// limits. Quota exhaustion and stockouts are not "retryable" in this sense: they are a
    /// capacity wait, decided by the controller (see the module docs).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Transient | ErrorKind::Unreadable) || self.is_rate_limited()
    }
}

/// Splits a trailing `[EID: 0x…]` (Google's per-request error id) off a message.
fn split_error_id(message: &str) -> (&str, Option<&str>) {
    let Some(start) = message.rfind("[EID: ") else {
        return (message, None);
    };
    let tail = &message[start..];
    let Some(end) = tail.find(']') else {
        return (message, None);
    };
    if !tail[end + 1..].trim().is_empty() {
        return (message, None);
    }
    (
        message[..start].trim_end(),
        Some(tail["[EID: ".len()..end].trim()),
    )
}

/// Methods whose RESOURCE_EXHAUSTED can mean "no capacity / quota": creates, the create's
/// long-running operation, starting a stopped node and resetting a queued resource.
fn asks_for_capacity(method: &str) -> bool {
    method == "operation"
        || method.ends_with(".create")
        || method.ends_with(".start")
        || method.ends_with(".reset")
}

/// `Ok(None)` for NOT_FOUND, the value or the other error otherwise.
pub fn ignore_not_found<T>(result: Result<T, GcpError>) -> Result<Option<T>, GcpError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.is_not_found() => Ok(None),
        Err(err) => Err(err),
    }
}

/// True when the result is a NOT_FOUND error.
pub fn is_not_found<T>(result: &Result<T, GcpError>) -> bool {
    matches!(result, Err(err) if err.is_not_found())
}

/// Shorthand for results of this crate.
pub type Result<T, E = GcpError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use google_cloud_gax::error::rpc::Status;
    use reqwest::header::HeaderMap;

    /// A gax error as the REST transport builds it from an HTTP error response.
    fn from_http_body(http_status: u16, body: &str) -> GaxError {
        let body = Bytes::from(body.to_string());
        match Status::try_from(&body) {
            Ok(status) => GaxError::service_with_http_metadata(status, Some(http_status), None),
            Err(_) => GaxError::http(http_status, HeaderMap::new(), body),
        }
    }

    fn esf(http: u16, status: &str, message: &str) -> String {
        format!(r#"{{"error":{{"code":{http},"message":"{message}","status":"{status}"}}}}"#)
    }

    #[test]
    fn classifies_esf_error_bodies() {
        let cases: &[(u16, &str, ErrorKind, bool)] = &[
            (404, "NOT_FOUND", ErrorKind::NotFound, false),
            (409, "ALREADY_EXISTS", ErrorKind::AlreadyExists, false),
            (409, "ABORTED", ErrorKind::Transient, true),
            // A 429 on a read is a request-rate limit: retried with backoff.
            (429, "RESOURCE_EXHAUSTED", ErrorKind::ResourceExhausted, true),
            (403, "PERMISSION_DENIED", ErrorKind::PermissionDenied, false),
            (401, "UNAUTHENTICATED", ErrorKind::Unauthenticated, false),
            (400, "FAILED_PRECONDITION", ErrorKind::FailedPrecondition, false),
            (400, "INVALID_ARGUMENT", ErrorKind::InvalidArgument, false),
            (400, "OUT_OF_RANGE", ErrorKind::InvalidArgument, false),
            (503, "UNAVAILABLE", ErrorKind::Transient, true),
            (504, "DEADLINE_EXCEEDED", ErrorKind::Transient, true),
            (500, "INTERNAL", ErrorKind::Transient, true),
            (500, "UNKNOWN", ErrorKind::Transient, true),
            (499, "CANCELLED", ErrorKind::Cancelled, false),
            (501, "UNIMPLEMENTED", ErrorKind::Other, false),
            (500, "DATA_LOSS", ErrorKind::Other, false),
        ];
        for &(http, status, kind, retryable) in cases {
            let gax = from_http_body(http, &esf(http, status, "boom"));
            let err = GcpError::from_gax(Service::Tpu, "nodes.get", "projects/p/locations/z/nodes/n", &gax);
            assert_eq!(err.kind, kind, "{status}");
            assert_eq!(err.is_retryable(), retryable, "{status}");
            assert_eq!(err.http_status, Some(http), "{status}");
            // gax parses an explicit UNKNOWN like a missing `status`; the HTTP status decides then.
            let expected_status = (status != "UNKNOWN").then_some(status);
            assert_eq!(err.status, expected_status, "{status}");
            assert_eq!(err.message, "boom");
        }
    }

    #[test]
    fn falls_back_to_http_status_without_a_status_name() {
        let cases: &[(u16, ErrorKind)] = &[
            (400, ErrorKind::InvalidArgument),
            (401, ErrorKind::Unauthenticated),
            (403, ErrorKind::PermissionDenied),
            (404, ErrorKind::NotFound),
            (409, ErrorKind::AlreadyExists),
            (412, ErrorKind::FailedPrecondition),
            (429, ErrorKind::ResourceExhausted),
            (408, ErrorKind::Transient),
            (500, ErrorKind::Transient),
            (502, ErrorKind::Transient),
            (503, ErrorKind::Transient),
            (418, ErrorKind::Other),
        ];
        for &(http, kind) in cases {
            // GCS-style legacy body (no `status`), then a non-JSON proxy page.
            let legacy =
                format!(r#"{{"error":{{"code":{http},"message":"m","errors":[{{"reason":"x"}}]}}}}"#);
            let err = GcpError::from_gax(
                Service::Storage,
                "objects.list",
                "b",
                &from_http_body(http, &legacy),
            );
            assert_eq!(err.kind, kind, "legacy body, HTTP {http}");
            assert_eq!(err.status, None, "legacy body, HTTP {http}");
            assert_eq!(err.reason.as_deref(), Some("x"));
            let html = from_http_body(http, "<html>bad gateway</html>");
            let err = GcpError::from_gax(Service::Dataproc, "batches.get", "b", &html);
            assert_eq!(err.kind, kind, "html body, HTTP {http}");
        }
    }

    #[test]
    fn rate_limits_are_retryable_but_stockouts_are_not() {
        let rate_limited = r#"{"error":{"code":429,"message":"Quota exceeded for quota metric 'Read requests'","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{}}]}}"#;
        let err = GcpError::from_gax(Service::Tpu, "nodes.get", "n", &from_http_body(429, rate_limited));
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert_eq!(err.reason.as_deref(), Some("RATE_LIMIT_EXCEEDED"));
        assert!(err.is_rate_limited());
        assert!(err.is_retryable());

        let stockout = esf(429, "RESOURCE_EXHAUSTED", "There is no more capacity in the zone");
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &stockout));
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert!(!err.is_rate_limited());
        assert!(!err.is_retryable());

        // Without a reason, what the call asked for decides: only capacity-taking calls wait.
        let bare = esf(429, "RESOURCE_EXHAUSTED", "Quota exceeded");
        for (method, rate_limited) in [
            ("nodes.create", false),
            ("queuedResources.create", false),
            ("operation", false),
            ("nodes.start", false),
            ("batches.create", false),
            ("nodes.delete", true),
            ("nodes.get", true),
            ("customJobs.list", true),
            ("customJobs.cancel", true),
        ] {
            let err = GcpError::from_gax(Service::Tpu, method, "n", &from_http_body(429, &bare));
            assert_eq!(err.is_rate_limited(), rate_limited, "{method}");
            assert_eq!(err.is_retryable(), rate_limited, "{method}");
        }
    }

    /// Issue 21 item 4: quota and stockout arrive with the same code; the details (or the known
    /// quota texts) tell them apart, in a call's body and in a failed operation alike.
    #[test]
    fn quota_and_stockout_are_told_apart_by_their_details() {
        let quota = r#"{"error":{"code":429,"message":"Quota limit 'TPUV6EPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone us-central2-b.","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RESOURCE_QUOTA_EXCEEDED","domain":"googleapis.com",
                        "metadata":{"service":"tpu.googleapis.com","quota_metric":"tpu.googleapis.com/v6e_chips","quota_limit":"TPUV6EPodPerProjectPerZoneForTPUAPI"}},
                       {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","description":"Quota limit exceeded",
                        "apiService":"tpu.googleapis.com","quotaMetric":"tpu.googleapis.com/v6e_chips","quotaId":"TPUV6EPodPerProjectPerZoneForTPUAPI"}]}]}}"#;
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, quota));
        assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
        assert!(err.quota.as_ref().unwrap().quota_failure);
        assert_eq!(err.quota_metric(), Some("tpu.googleapis.com/v6e_chips"));
        assert!(!err.is_retryable());

        // QuotaFailure alone (no ErrorInfo), with only a subject.
        let bare_failure = r#"{"error":{"code":429,"message":"exhausted","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","description":"d"}]}]}}"#;
        let err = GcpError::from_gax(
            Service::Tpu,
            "nodes.create",
            "p",
            &from_http_body(429, bare_failure),
        );
        assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
        assert_eq!(err.quota_metric(), Some("project:p"));

        let stockout = r#"{"error":{"code":429,"message":"There is no more capacity in the zone","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"STOCKOUT","domain":"tpu.googleapis.com","metadata":{}}]}}"#;
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, stockout));
        assert_eq!(err.exhaustion(), Some(Exhaustion::Stockout));
        assert_eq!(err.quota_metric(), None);

        // No details: the gcloud-seen quota text is quota, anything else is unknown.
        let text = esf(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota limit 'TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone us-central1-a.",
        );
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &text));
        assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
        let plain = esf(429, "RESOURCE_EXHAUSTED", "There is no more capacity in the zone");
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &plain));
        assert_eq!(err.exhaustion(), Some(Exhaustion::Unknown));
        let read = GcpError::from_gax(Service::Tpu, "nodes.get", "n", &from_http_body(429, quota));
        assert_eq!(read.exhaustion(), Some(Exhaustion::RateLimit));
        let other = GcpError::new(ErrorKind::NotFound, Service::Tpu, "nodes.get", "n", "gone");
        assert_eq!(other.exhaustion(), None);

        // The same details inside a failed create operation (LRO `error`, code 8).
        let op: google_cloud_longrunning::model::Operation = serde_json::from_str(
            r#"{"name":"projects/p/locations/z/operations/o","done":true,"error":{"code":8,"message":"Quota limit exceeded",
                "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","quotaMetric":"tpu.googleapis.com/v6e_chips"}]}]}}"#,
        )
        .unwrap();
        let crate::lro::OperationState::Failed(err) = crate::lro::operation_state(Service::Tpu, &op) else {
            panic!("a failed operation");
        };
        assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
        assert_eq!(err.quota_metric(), Some("tpu.googleapis.com/v6e_chips"));
    }

    #[test]
    fn per_request_error_ids_stay_out_of_the_message() {
        let body = esf(
            429,
            "RESOURCE_EXHAUSTED",
            "There is no more capacity in the zone [EID: 0x1f]",
        );
        let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &body));
        assert_eq!(err.stable_message(), "There is no more capacity in the zone");
        assert_eq!(err.error_id(), Some("0x1f"));
        assert!(!err.to_string().contains("EID"), "{err}");
        let plain = GcpError::new(
            ErrorKind::Other,
            Service::Tpu,
            "m",
            "t",
            "an [EID: x] in the middle",
        );
        assert_eq!(plain.stable_message(), "an [EID: x] in the middle");
        assert_eq!(plain.error_id(), None);
    }

    #[test]
    fn client_side_failures_are_classified() {
        let timeout = GaxError::timeout("attempt took longer than 30s");
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &timeout).kind,
            ErrorKind::Transient
        );
        let connect = GaxError::connect("connection refused");
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &connect).kind,
            ErrorKind::Transient
        );
        let io = GaxError::io("connection reset");
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &io).kind,
            ErrorKind::Transient
        );
        let binding = GaxError::binding("name does not match projects/*/locations/*/nodes/*");
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &binding).kind,
            ErrorKind::InvalidArgument
        );
        let deser = GaxError::deser("expected a string");
        let err = GcpError::from_gax(Service::Tpu, "m", "t", &deser);
        assert_eq!(err.kind, ErrorKind::Unreadable);
        assert!(err.is_retryable());
        let auth = GaxError::authentication(CredentialsError::from_msg(false, "no ADC found"));
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &auth).kind,
            ErrorKind::Unauthenticated
        );
        let auth = GaxError::authentication(CredentialsError::from_msg(true, "metadata server timeout"));
        assert_eq!(
            GcpError::from_gax(Service::Tpu, "m", "t", &auth).kind,
            ErrorKind::Transient
        );
    }

    #[test]
    fn operation_status_maps_by_code() {
        let status = Status::default()
            .set_code(Code::ResourceExhausted)
            .set_message("stockout in us-central2-b");
        let err = GcpError::from_status(
            Service::Tpu,
            "operation",
            "projects/p/locations/z/operations/o",
            &status,
        );
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert_eq!(err.http_status, None);
        assert_eq!(err.status, Some("RESOURCE_EXHAUSTED"));
        let cancelled = Status::default()
            .set_code(Code::Cancelled)
            .set_message("cancelled");
        let err = GcpError::from_status(Service::Dataproc, "operation", "op", &cancelled);
        assert_eq!(err.kind, ErrorKind::Cancelled);
    }

    #[test]
    fn display_names_service_method_target_and_codes() {
        let gax = from_http_body(404, &esf(404, "NOT_FOUND", "TPU node not found"));
        let err = GcpError::from_gax(Service::Tpu, "nodes.get", "projects/p/locations/z/nodes/n", &gax);
        assert_eq!(
            err.to_string(),
            "tpu nodes.get projects/p/locations/z/nodes/n: not_found (NOT_FOUND, HTTP 404): TPU node not found"
        );
        let err = GcpError::new(
            ErrorKind::InvalidArgument,
            Service::Storage,
            "objects.list",
            "s3://x",
            "bad",
        );
        assert_eq!(
            err.to_string(),
            "storage objects.list s3://x: invalid_argument: bad"
        );
    }

    #[test]
    fn not_found_helpers() {
        let missing = GcpError::new(ErrorKind::NotFound, Service::Dataproc, "batches.get", "b", "gone");
        let denied = GcpError::new(
            ErrorKind::PermissionDenied,
            Service::Dataproc,
            "batches.get",
            "b",
            "no",
        );
        assert!(is_not_found::<()>(&Err(missing.clone())));
        assert!(!is_not_found::<()>(&Err(denied.clone())));
        assert!(!is_not_found(&Ok(1)));
        assert_eq!(ignore_not_found::<u8>(Err(missing)), Ok(None));
        assert_eq!(ignore_not_found(Ok(7)), Ok(Some(7)));
        assert_eq!(ignore_not_found::<u8>(Err(denied.clone())), Err(denied));
    }
}
