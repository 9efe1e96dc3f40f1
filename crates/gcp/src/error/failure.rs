//! Why a create failed, told apart for the person who must act on it: a stockout (wait, or try
//! another zone), an exhausted project quota (request an increase), an API rate limit (slow
//! down), an invalid request (fix the spec), a permission (grant the role). The same five on
//! every create path: TPU `nodes.create` / `queuedResources.create` and their operations,
//! Compute Engine inserts and their operations, Dataproc `batches.create`, Vertex
//! `customJobs.create`. Controllers name the reason in status, Events and the
//! `tpu_operator_create_failures_total{reason}` metric.

use super::{ErrorKind, Exhaustion, GcpError, Service};

/// A create failure's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CreateFailure {
    /// No capacity in the zone right now (TPU code 8 without a quota detail, `STOCKOUT`,
    /// Compute Engine's `ZONE_RESOURCE_POOL_EXHAUSTED*`). Clears by itself.
    Stockout,
    /// A project or regional resource quota is used up (`RESOURCE_QUOTA_EXCEEDED`, a
    /// `QuotaFailure`, Compute's `QUOTA_EXCEEDED`). Only a quota increase (or freed usage) helps.
    QuotaExhausted,
    /// An API rate quota (`RATE_LIMIT_EXCEEDED`, Compute's 403 `rateLimitExceeded`): the next
    /// window lets the call through.
    RateLimited,
    /// The request is wrong (INVALID_ARGUMENT, FAILED_PRECONDITION): the spec must change.
    InvalidRequest,
    /// The operator's identity may not do this (PERMISSION_DENIED, UNAUTHENTICATED).
    PermissionDenied,
    /// Anything else (transient, unknown): retried with backoff.
    Other,
}

impl CreateFailure {
    pub const ALL: [CreateFailure; 6] = [
        Self::Stockout,
        Self::QuotaExhausted,
        Self::RateLimited,
        Self::InvalidRequest,
        Self::PermissionDenied,
        Self::Other,
    ];

    /// The metric label (`reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stockout => "stockout",
            Self::QuotaExhausted => "quota_exhausted",
            Self::RateLimited => "rate_limited",
            Self::InvalidRequest => "invalid_request",
            Self::PermissionDenied => "permission_denied",
            Self::Other => "other",
        }
    }
}

impl GcpError {
    /// The class of a failed create (call or operation). A RESOURCE_EXHAUSTED whose details say
    /// nothing is taken as a stockout: that is what TPU creates answer when a zone is out of
    /// capacity (../shared/notes/gcp-wire.md §1.1), and waiting is the safe reading.
    ///
    /// Dataproc and Vertex creates ask for no zone's TPUs (a Vertex job waits for its capacity
    /// in JOB_STATE_PENDING, a Dataproc batch for its cores in PENDING), so their undetailed
    /// RESOURCE_EXHAUSTED is a quota (Dataproc's "Insufficient 'CPUS' quota").
    pub fn create_failure(&self) -> CreateFailure {
        let regional = matches!(self.service, Service::Dataproc | Service::Vertex);
        match self.kind {
            ErrorKind::ResourceExhausted => match self.exhaustion() {
                Some(Exhaustion::RateLimit) => CreateFailure::RateLimited,
                Some(Exhaustion::Quota) => CreateFailure::QuotaExhausted,
                Some(Exhaustion::Unknown) if regional => CreateFailure::QuotaExhausted,
                Some(Exhaustion::Stockout | Exhaustion::Unknown) | None => CreateFailure::Stockout,
            },
            ErrorKind::InvalidArgument | ErrorKind::FailedPrecondition => CreateFailure::InvalidRequest,
            ErrorKind::PermissionDenied | ErrorKind::Unauthenticated => CreateFailure::PermissionDenied,
            ErrorKind::NotFound
            | ErrorKind::AlreadyExists
            | ErrorKind::Transient
            | ErrorKind::Cancelled
            | ErrorKind::Unreadable
            | ErrorKind::Other => CreateFailure::Other,
        }
    }

    /// The exhausted quota as the error names it (metric, limit and value, as far as given).
    pub fn quota_description(&self) -> Option<String> {
        self.quota.as_ref().and_then(|q| q.describe())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use google_cloud_gax::error::{Error as GaxError, rpc::Status};

    use super::*;

    fn from_body(http: u16, body: &str) -> GaxError {
        let body = Bytes::from(body.to_string());
        match Status::try_from(&body) {
            Ok(status) => GaxError::service_with_http_metadata(status, Some(http), None),
            Err(_) => GaxError::http(http, reqwest::header::HeaderMap::new(), body),
        }
    }

    fn failure(service: Service, method: &'static str, http: u16, body: &str) -> GcpError {
        GcpError::from_gax(service, method, "projects/p", &from_body(http, body))
    }

    /// The five reasons, in the shapes each create path answers with (gcp-emulator's, with the
    /// sources cited there: `capacity/quotas.rs`, `faults/mod.rs`).
    #[test]
    fn every_create_path_tells_the_five_reasons_apart() {
        let rate = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded for quota metric 'CreateNode requests'",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com",
            "metadata":{"quota_metric":"tpu.googleapis.com/qps/create","quota_limit":"CreateNodeRequestsPerMinutePerProject","quota_limit_value":"91"}}]}}"#;
        let err = failure(Service::Tpu, "nodes.create", 429, rate);
        assert_eq!(err.create_failure(), CreateFailure::RateLimited);
        assert_eq!(
            err.quota_description().as_deref(),
            Some("tpu.googleapis.com/qps/create (CreateNodeRequestsPerMinutePerProject = 91)")
        );
        // Compute Engine: 403 with `errors[].reason` rateLimitExceeded is no permission problem.
        let compute = r#"{"error":{"code":403,"message":"Quota exceeded for quota metric 'Queries'",
            "errors":[{"message":"Quota exceeded","domain":"usageLimits","reason":"rateLimitExceeded"}]}}"#;
        let err = failure(Service::Compute, "instances.insert", 403, compute);
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert!(err.is_retryable());
        assert_eq!(err.create_failure(), CreateFailure::RateLimited);
        let stockout = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"There is no more capacity in the zone",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"STOCKOUT","domain":"tpu.googleapis.com"}]}}"#;
        assert_eq!(
            failure(Service::Tpu, "nodes.create", 429, stockout).create_failure(),
            CreateFailure::Stockout
        );
        let vertex_quota = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_tpu_v5e"}}"#;
        assert_eq!(
            failure(Service::Vertex, "customJobs.create", 429, vertex_quota).create_failure(),
            CreateFailure::QuotaExhausted
        );
        let invalid = r#"{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"bad"}}"#;
        assert_eq!(
            failure(Service::Dataproc, "batches.create", 400, invalid).create_failure(),
            CreateFailure::InvalidRequest
        );
        let denied = r#"{"error":{"code":403,"status":"PERMISSION_DENIED","message":"The caller does not have permission"}}"#;
        assert_eq!(
            failure(Service::Dataproc, "batches.create", 403, denied).create_failure(),
            CreateFailure::PermissionDenied
        );
    }

    /// A Compute Engine operation that failed on a quota names its metric, limit and value
    /// (`errorDetails[].quotaInfo`), as a TPU API quota error does.
    #[test]
    fn a_compute_quota_operation_names_its_metric_and_limit() {
        use google_cloud_compute_v1::model as compute;
        let details = compute::operation::error::errors::ErrorDetails::new().set_quota_info(
            compute::QuotaExceededInfo::new()
                .set_metric_name("compute.googleapis.com/tpu_v6e_chips")
                .set_limit_name("TPU-V6E-CHIPS-per-project-zone")
                .set_limit(16.0),
        );
        let op = compute::Operation::new()
            .set_status(compute::operation::Status::Done)
            .set_error(
                compute::operation::Error::new().set_errors([compute::operation::error::Errors::new()
                    .set_code("QUOTA_EXCEEDED")
                    .set_message("Quota 'TPU_V6E_CHIPS' exceeded. Limit: 16.0 in zone us-east5-b.")
                    .set_error_details([details])]),
            );
        let lro = crate::compute::convert::operation("projects/p/zones/z/operations/o", &op);
        let crate::OperationState::Failed(err) = crate::operation_state(Service::Compute, &lro) else {
            panic!("a failed operation");
        };
        assert_eq!(err.create_failure(), CreateFailure::QuotaExhausted);
        assert_eq!(
            err.quota_description().as_deref(),
            Some("compute.googleapis.com/tpu_v6e_chips (TPU-V6E-CHIPS-per-project-zone = 16)")
        );
    }
}
