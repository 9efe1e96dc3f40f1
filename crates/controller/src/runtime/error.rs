//! The reconcile error type shared by all controllers, classified so that `error_policy` decides by
//! kind (retry with backoff, or wait for a spec change) and metrics/events get a stable category.

use tpu_operator_gcp::{ErrorKind, GcpError};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API call failed: {action}: {source}")]
    Kube {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    /// A call to Kueue's API (a Workload, a WorkloadPriorityClass): reported in status, since
    /// an object waiting on Kueue otherwise shows nothing while Kueue is down.
    #[error("Kueue call failed: {action}: {source}")]
    Kueue {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("Google Cloud call failed: {action}: {source}")]
    Gcp {
        action: &'static str,
        #[source]
        source: GcpError,
    },
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
    #[error("object has no {0}")]
    MissingMetadata(&'static str),
    /// The watch cache's copy did not decode back into its type (a bug: it was encoded from one).
    #[error("cached object could not be decoded: {0}")]
    Decode(#[source] crate::runtime::watched::CacheError),
}

/// Whether retrying the same reconcile can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A blip (network, 5xx, conflict, rate limit): retry with exponential backoff.
    Transient,
    /// Needs a human or a spec change; still retried, but slowly, since permissions and quotas do
    /// get fixed out of band.
    Permanent,
}

impl ReconcileError {
    pub fn kube(action: &'static str) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kube { action, source }
    }

    pub fn kueue(action: &'static str) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kueue { action, source }
    }

    pub fn gcp(action: &'static str) -> impl FnOnce(GcpError) -> Self {
        move |source| Self::Gcp { action, source }
    }

    /// The `[EID: …]` Google attached to the failed call's message, if any.
    pub fn gcp_error_id(&self) -> Option<&str> {
        match self {
            Self::Gcp { source, .. } => source.error_id(),
            _ => None,
        }
    }

    /// Low-cardinality label for metrics and the reason of Warning events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kueue { source, .. } if unanswered(source) => "KueueUnavailable",
            // A conditional write that found the object newer than the cached copy the reconcile
            // read: retried once the cache catches up, not an API failure.
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            }
            | Self::Kueue {
                source: kube::Error::Api(status),
                ..
            } if status.code == 409 => "KubeConflict",
            Self::Kube { .. } | Self::Kueue { .. } => "KubeApiError",
            Self::Gcp { source, .. } => match source.kind {
                ErrorKind::NotFound => "GcpNotFound",
                ErrorKind::AlreadyExists => "GcpAlreadyExists",
                // Told apart as status tells them apart (`GcpError::create_failure`).
                ErrorKind::ResourceExhausted => match source.create_failure() {
                    tpu_operator_gcp::CreateFailure::RateLimited => "GcpRateLimited",
                    tpu_operator_gcp::CreateFailure::QuotaExhausted => "GcpQuotaExceeded",
                    _ => "GcpResourceExhausted",
                },
                ErrorKind::PermissionDenied => "GcpPermissionDenied",
                ErrorKind::Unauthenticated => "GcpCredentialsUnavailable",
                ErrorKind::FailedPrecondition => "GcpFailedPrecondition",
                ErrorKind::InvalidArgument => "GcpInvalidArgument",
                ErrorKind::Transient => "GcpTransient",
                ErrorKind::Cancelled => "GcpCancelled",
                ErrorKind::Unreadable => "GcpUnreadableReply",
                ErrorKind::Other => "GcpError",
            },
            Self::Finalizer(_) => "FinalizerError",
            Self::MissingMetadata(_) => "MissingMetadata",
            Self::Decode(_) => "CacheDecodeError",
        }
    }

    pub fn retry(&self) -> Retry {
        match self {
            // The operator's RBAC refused (403) or the API server found the write invalid (422):
            // an install or schema problem no backoff clears.
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            }
            | Self::Kueue {
                source: kube::Error::Api(status),
                ..
            } if matches!(status.code, 403 | 422) => Retry::Permanent,
            Self::Kube { .. } | Self::Kueue { .. } | Self::Finalizer(_) => Retry::Transient,
            Self::Gcp { source, .. } if source.is_retryable() => Retry::Transient,
            Self::Gcp { .. } | Self::MissingMetadata(_) | Self::Decode(_) => Retry::Permanent,
        }
    }
}

impl From<kube::runtime::finalizer::Error<ReconcileError>> for ReconcileError {
    fn from(e: kube::runtime::finalizer::Error<ReconcileError>) -> Self {
        match e {
            kube::runtime::finalizer::Error::ApplyFailed(inner)
            | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner,
            other => Self::Finalizer(Box::new(other)),
        }
    }
}

/// Whether a failed API server call found nobody to answer it: no reply, a rate limit, or a 5xx
/// (for Kueue, the API server says so when Kueue's webhook or aggregated API does not answer).
/// Worth trying again. A conflict, an RBAC refusal or an invalid write was answered: the error
/// says what is wrong, and the same call gets the same answer.
pub fn unanswered(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

pub type Result<T, E = ReconcileError> = std::result::Result<T, E>;

/// Whether kube-runtime's finalizer helper failed only because the object is already gone:
/// removing our finalizer answered 404. An earlier pass cleaned up and removed the finalizer, and
/// this one ran on a cached copy from before that. Nothing is left to do, so it is not a failure
/// (it was counted and logged as one, and retried with backoff, for every such pass of a deletion).
pub fn already_gone(err: &kube::runtime::finalizer::Error<ReconcileError>) -> bool {
    matches!(
        err,
        kube::runtime::finalizer::Error::RemoveFinalizer(kube::Error::Api(status)) if status.code == 404
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube(code: u16) -> ReconcileError {
        let status = kube::core::Status::failure("refused", "Refused").with_code(code);
        ReconcileError::kube("write status")(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn rbac_and_invalid_writes_are_permanent_conflicts_and_outages_transient() {
        assert_eq!(kube(403).retry(), Retry::Permanent);
        assert_eq!(kube(422).retry(), Retry::Permanent);
        assert_eq!(kube(409).retry(), Retry::Transient);
        assert_eq!(kube(409).category(), "KubeConflict");
        assert_eq!(kube(500).category(), "KubeApiError");
        assert_eq!(kube(503).retry(), Retry::Transient);
    }

    fn kueue(code: u16) -> ReconcileError {
        let status = kube::core::Status::failure("failed", "Failed").with_code(code);
        ReconcileError::kueue("create the Kueue Workload")(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn only_a_kueue_that_does_not_answer_is_unavailable() {
        // What the API server answers when Kueue's webhook is down.
        assert_eq!(kueue(500).category(), "KueueUnavailable");
        assert_eq!(kueue(503).category(), "KueueUnavailable");
        assert_eq!(kueue(429).category(), "KueueUnavailable");
        assert_eq!(kueue(500).retry(), Retry::Transient);
        assert_eq!(kueue(409).category(), "KubeConflict");
        assert_eq!(kueue(403).category(), "KubeApiError");
        assert_eq!(kueue(403).retry(), Retry::Permanent);
        assert_eq!(kueue(422).retry(), Retry::Permanent);
    }

    fn removing_the_finalizer_answered(code: u16) -> kube::runtime::finalizer::Error<ReconcileError> {
        let status = kube::core::Status::failure("answer", "Answer").with_code(code);
        kube::runtime::finalizer::Error::RemoveFinalizer(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn a_finalizer_removal_answered_404_means_gone_and_other_refusals_fail() {
        assert!(already_gone(&removing_the_finalizer_answered(404)));
        let conflict = removing_the_finalizer_answered(409);
        assert!(!already_gone(&conflict));
        let conflict = ReconcileError::from(conflict);
        assert_eq!(conflict.category(), "FinalizerError");
        assert_eq!(conflict.retry(), Retry::Transient);
    }
}
