//! The capacity metrics: create failures by reason (`tpu_operator_create_failures_total`), so a
//! dashboard tells a stockout from an exhausted quota, a rate limit, an invalid request and a
//! missing permission without reading status.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
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

/// One place of the stockout memory.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlaceLabels {
    pub project: String,
    pub zone: String,
    pub accelerator: String,
    pub kind: &'static str,
}

impl PlaceLabels {
    pub fn of(p: &super::Place) -> Self {
        Self {
            project: p.project.clone(),
            zone: p.zone.clone(),
            accelerator: p.accelerator.clone(),
            kind: p.kind,
        }
    }
}

/// One line of the create limiter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LineLabels {
    pub project: String,
    /// Empty for groups Google counts per project.
    pub region: String,
    /// [`super::Group::as_str`].
    pub group: &'static str,
}

impl LineLabels {
    pub fn of(line: &super::Line) -> Self {
        Self {
            project: line.project.clone(),
            region: line.region.clone().unwrap_or_default(),
            group: line.group.as_str(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {
    pub create_failures: Family<CreateFailureLabels, Counter>,
    /// Unix time until which a place is not asked again after a stockout; present only for
    /// places that stocked out lately (dropped once a node there comes up, or after hours).
    pub blocked_until: Family<PlaceLabels, Gauge>,
    /// Creates not sent because the stockout memory held them back (blocked, or another
    /// object's probe asking), by capacity kind.
    pub withheld: Family<WithheldLabels, Counter>,
    /// Objects waiting for a turn in a line of the create limiter.
    pub limiter_waiting: Family<LineLabels, Gauge>,
    /// Times an object was told to wait for its turn.
    pub limiter_waits: Family<LineLabels, Counter>,
    /// Rate-quota refusals from Google that paused and slowed a line.
    pub limiter_slowdowns: Family<LineLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WithheldLabels {
    pub kind: &'static str,
}

impl CapacityMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "create_failures",
            "Cloud creates (calls or their operations) that failed, by kind, service and reason (stockout, quota_exhausted, rate_limited, invalid_request, permission_denied, other)",
            self.create_failures.clone(),
        );
        registry.register(
            "capacity_blocked_until_seconds",
            "Unix time until which the stockout memory does not ask a (project, zone, accelerator, capacity kind) again after a stockout; in the past: the next create probes it; absent: not stocked out lately",
            self.blocked_until.clone(),
        );
        registry.register(
            "capacity_withheld_creates",
            "Creates the stockout memory held back (the place is blocked, or another object's create is asking it), by capacity kind",
            self.withheld.clone(),
        );
        registry.register(
            "create_limiter_waiting",
            "Objects waiting for their turn in the create limiter, by project, region and method group",
            self.limiter_waiting.clone(),
        );
        registry.register(
            "create_limiter_waits",
            "Times an object was told to wait for its turn in the create limiter, by project, region and method group",
            self.limiter_waits.clone(),
        );
        registry.register(
            "create_limiter_slowdowns",
            "Rate-quota refusals from Google that paused a create limiter line until the next minute and slowed it, by project, region and method group",
            self.limiter_slowdowns.clone(),
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
