//! What a RESOURCE_EXHAUSTED means: a rate limit, an exhausted quota, or a stockout (see the
//! module docs of [`crate::error`]).

use super::{ErrorKind, GcpError};

/// Structured `ErrorInfo.reason` values that mark a RESOURCE_EXHAUSTED as an API rate limit
/// (ESF front end and the GCS legacy `errors[].reason`).
const RATE_LIMIT_REASONS: &[&str] = &[
    "RATE_LIMIT_EXCEEDED",
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "TOO_MANY_REQUESTS",
];

/// Quota facts from an error's details.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaDetails {
    /// The exhausted quota: `QuotaFailure.violations[].quotaMetric` (else its `subject`), or
    /// `ErrorInfo.metadata.quota_metric` / `quota_limit`.
    pub metric: Option<String>,
    /// The limit's name: `ErrorInfo.metadata.quota_limit`, else `QuotaFailure.violations[].quotaId`
    /// (Compute Engine: `quotaInfo.limitName`).
    pub limit: Option<String>,
    /// The limit's value when the error carries it: `ErrorInfo.metadata.quota_limit_value`, else
    /// `QuotaFailure.violations[].quotaValue` (Compute Engine: `quotaInfo.limit`).
    pub limit_value: Option<String>,
    /// The details carry a `google.rpc.QuotaFailure`.
    pub quota_failure: bool,
}

impl QuotaDetails {
    /// `metric (limit = value)`, as much of it as the error named, for a status message.
    pub fn describe(&self) -> Option<String> {
        let metric = self.metric.as_deref();
        let limit = match (self.limit.as_deref(), self.limit_value.as_deref()) {
            (Some(l), Some(v)) => Some(format!("{l} = {v}")),
            (Some(l), None) => Some(l.to_string()),
            (None, Some(v)) => Some(format!("limit {v}")),
            (None, None) => None,
        };
        match (metric, limit) {
            (Some(m), Some(l)) if m != l => Some(format!("{m} ({l})")),
            (Some(m), _) => Some(m.to_string()),
            (None, Some(l)) => Some(l),
            (None, None) => None,
        }
    }
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

/// A structured reason that means "rate limit or quota", whatever code or HTTP status came
/// with it (Compute Engine sends them on a 403).
pub(super) fn exhausted_reason(reason: &str) -> bool {
    RATE_LIMIT_REASONS.contains(&reason) || QUOTA_REASONS.contains(&reason)
}

/// Message texts Google's front end sends for an exhausted quota when it sends no details.
const QUOTA_TEXTS: &[&str] = &["quota limit '", "exceed quota limits", "insufficient quota"];

impl GcpError {
    /// The exhausted quota's metric (or limit), when the details name one.
    pub fn quota_metric(&self) -> Option<&str> {
        self.quota
            .as_ref()
            .and_then(|q| q.metric.as_deref().or(q.limit.as_deref()))
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
}

/// Methods whose RESOURCE_EXHAUSTED can mean "no capacity / quota": creates (Compute Engine's
/// are `*.insert`), the create's long-running operation, starting a stopped node and resetting
/// a queued resource.
fn asks_for_capacity(method: &str) -> bool {
    method == "operation"
        || method.ends_with(".create")
        || method.ends_with(".insert")
        || method.ends_with(".start")
        || method.ends_with(".reset")
}
