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
}
