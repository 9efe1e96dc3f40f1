//! Building a [`GcpError`] from what a call returned: a client error, a `google.rpc.Status`, or
//! an HTTP error response.

use google_cloud_gax::error::{
    CredentialsError, Error as GaxError,
    rpc::{Code, Status, StatusDetails},
};

use super::{ErrorKind, GcpError, QuotaDetails, Service};

impl GcpError {
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
        self.quota = quota_details(&status.details).map(Box::new);
        // Compute Engine's legacy shape has no `status`: a rate limit or a quota comes as HTTP
        // 403 with `errors[].reason` rateLimitExceeded / quotaExceeded
        // (https://cloud.google.com/compute/api-quota: "a 403 error with the reason
        // rateLimitExceeded"). It is not a permission problem: retried with backoff, not stalled.
        if self.kind == ErrorKind::PermissionDenied
            && self
                .reason
                .as_deref()
                .is_some_and(super::exhaustion::exhausted_reason)
        {
            self.kind = ErrorKind::ResourceExhausted;
        }
    }
}

/// What the details say about a quota (`None`: nothing).
fn quota_details(details: &[StatusDetails]) -> Option<QuotaDetails> {
    let non_empty = |s: &String| (!s.is_empty()).then(|| s.clone());
    let mut q = QuotaDetails::default();
    for detail in details {
        match detail {
            StatusDetails::QuotaFailure(failure) => {
                q.quota_failure = true;
                for v in &failure.violations {
                    q.metric = q
                        .metric
                        .take()
                        .or_else(|| non_empty(&v.quota_metric).or_else(|| non_empty(&v.subject)));
                    q.limit = q.limit.take().or_else(|| non_empty(&v.quota_id));
                    q.limit_value = q
                        .limit_value
                        .take()
                        .or_else(|| (v.quota_value > 0).then(|| v.quota_value.to_string()));
                }
            }
            StatusDetails::ErrorInfo(info) => {
                let get = |k: &str| info.metadata.get(k).and_then(non_empty);
                q.metric = q.metric.take().or_else(|| get("quota_metric"));
                q.limit = get("quota_limit").or(q.limit.take());
                q.limit_value = get("quota_limit_value").or(q.limit_value.take());
            }
            _ => {}
        }
    }
    (q.quota_failure || q.metric.is_some() || q.limit.is_some()).then_some(q)
}
