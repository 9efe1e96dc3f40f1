//! The capacity metrics: create failures by reason (`tpu_operator_create_failures_total`), so a
//! dashboard tells a stockout from an exhausted quota, a rate limit, an invalid request and a
//! missing permission without reading status.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use tpu_operator_gcp::{CreateFailure, GcpError};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreateFailureLabels {
    /// The object's kind (`TpuSlice`, `PreprocessBatch`, `TrainingPipeline`).
    pub kind: &'static str,
    /// The API that refused: `tpu`, `compute`, `dataproc`, `vertex`.
    pub service: &'static str,
    /// [`CreateFailure::as_str`]: `stockout`, `quota_exhausted`, `rate_limited`,
    /// `invalid_request`, `permission_denied`, `other`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {
    pub create_failures: Family<CreateFailureLabels, Counter>,
}

impl CapacityMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "create_failures",
            "Cloud creates (calls or their operations) that failed, by kind, service and reason (stockout, quota_exhausted, rate_limited, invalid_request, permission_denied, other)",
            self.create_failures.clone(),
        );
    }

    /// Counts one failed create of `kind` and returns its class.
    pub fn create_failed(&self, kind: &'static str, err: &GcpError) -> CreateFailure {
        self.create_failed_at(kind, err.service.as_str(), err)
    }

    /// [`Self::create_failed`] under `service` (an operation read in another API's model).
    pub fn create_failed_at(
        &self,
        kind: &'static str,
        service: &'static str,
        err: &GcpError,
    ) -> CreateFailure {
        let failure = err.create_failure();
        let labels = CreateFailureLabels {
            kind,
            service,
            reason: failure.as_str(),
        };
        self.create_failures.get_or_create(&labels).inc();
        failure
    }

    /// How many creates of `kind` failed at `service` for `reason` (tests and benchmarks).
    pub fn create_failures(&self, kind: &'static str, service: &'static str, reason: CreateFailure) -> u64 {
        let labels = CreateFailureLabels {
            kind,
            service,
            reason: reason.as_str(),
        };
        self.create_failures.get(&labels).map_or(0, |c| c.get())
    }
}
