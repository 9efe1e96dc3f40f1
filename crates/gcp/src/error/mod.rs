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

mod classify;
mod exhaustion;
mod failure;
mod kind;

pub use exhaustion::{Exhaustion, QuotaDetails};
pub use failure::CreateFailure;
pub use kind::{ErrorKind, Service};
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
    /// The Google service account the call acted as when the operator impersonated one (a
    /// namespace's `googleServiceAccount`); `None`: the operator's own identity.
    pub identity: Option<Box<String>>,
}

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
            identity: None,
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
mod tests;
