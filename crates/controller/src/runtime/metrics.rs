//! Reconcile metrics, exposed by the operator's `/metrics` endpoint.

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, atomic::AtomicU64},
};
use tpu_operator_api::common::CostEstimate;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: &'static str,
    /// A stable, low-cardinality error category (`ReconcileError::category`).
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpendLabels {
    pub namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OrphanLabels {
    /// `tpu.node`, `tpu.queuedResource`, `dataproc.batch`, `vertex.customJob`.
    pub kind: &'static str,
}

/// Why objects stalled on a refused call were re-queued early (`runtime::stalled_on`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WakeLabels {
    /// `canary passed`, `credentials recovered` or `probe handed on`.
    pub why: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PipelineLabels {
    pub namespace: String,
    pub name: String,
}

/// The per-object estimates behind the spend gauges, with each namespace's running totals.
///
/// Kept in whole micro-dollars so that the totals are exact sums: an update subtracts the
/// object's previous estimate and adds its new one, O(1) per pass. (Summing the namespace's
/// objects on every pass was O(objects) each, 1.5% of the operator's CPU at 10,000 objects in one
/// namespace.)
#[derive(Debug, Default)]
struct SpendBook {
    namespaces: HashMap<String, NamespaceSpend>,
}

#[derive(Debug, Default)]
struct NamespaceSpend {
    /// Object key → (so far, per hour) in micro-dollars.
    objects: HashMap<String, (i64, i64)>,
    total: (i64, i64),
}

impl SpendBook {
    /// Records `key`'s estimate and returns its namespace's totals in US dollars.
    fn record(&mut self, namespace: &str, key: &str, so_far_usd: f64, per_hour_usd: f64) -> (f64, f64) {
        let ns = match self.namespaces.get_mut(namespace) {
            Some(ns) => ns,
            None => self.namespaces.entry(namespace.to_owned()).or_default(),
        };
        let new = (micros(so_far_usd), micros(per_hour_usd));
        let old = match ns.objects.get_mut(key) {
            Some(entry) => std::mem::replace(entry, new),
            None => {
                ns.objects.insert(key.to_owned(), new);
                (0, 0)
            }
        };
        ns.total.0 += new.0 - old.0;
        ns.total.1 += new.1 - old.1;
        (dollars(ns.total.0), dollars(ns.total.1))
    }
}

fn micros(usd: f64) -> i64 {
    // `as` saturates, and NaN becomes 0: an estimate is never negative nor near i64::MAX µ$.
    (usd * 1e6).round() as i64
}

fn dollars(micros: i64) -> f64 {
    micros as f64 / 1e6
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    Ok,
    Error,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    pub reconciles: Family<KindLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
    pub duration: Family<KindLabels, Histogram>,
    /// Estimated spend so far in US dollars, per namespace (float gauge).
    pub spend_usd: Family<SpendLabels, Gauge<f64, AtomicU64>>,
    /// Estimated current burn rate in US dollars per hour, per namespace.
    pub spend_per_hour_usd: Family<SpendLabels, Gauge<f64, AtomicU64>>,
    /// Per-object estimates behind the two spend gauges (namespace → uid → (so far, per hour)).
    spend_book: Arc<Mutex<SpendBook>>,
    /// Orphaned cloud resources found by the last sweep, by kind.
    pub orphans: Family<OrphanLabels, Gauge>,
    /// Orphans the sweeper deleted, by kind.
    pub orphans_deleted: Family<OrphanLabels, Counter>,
    /// 1 while a training pipeline's newest checkpoint is older than its `progressDeadline`.
    pub training_stalled: Family<PipelineLabels, Gauge>,
    /// Stalls reported (each a `ProgressStalled` Warning Event), by namespace.
    pub training_stalls: Family<SpendLabels, Counter>,
    /// Create failures by reason (see [`super::capacity::metrics`]).
    pub capacity: super::capacity::CapacityMetrics,
    /// Objects stalled on a refused cloud call (a missing role or binding) now.
    pub stalled_on_refusal: Gauge,
    /// Stalled objects re-queued as soon as the refusal was seen fixed, by why.
    pub stall_wakes: Family<WakeLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16))),
            spend_usd: Family::default(),
            spend_per_hour_usd: Family::default(),
            spend_book: Arc::default(),
            orphans: Family::default(),
            orphans_deleted: Family::default(),
            training_stalled: Family::default(),
            training_stalls: Family::default(),
            capacity: super::capacity::CapacityMetrics::default(),
            stalled_on_refusal: Gauge::default(),
            stall_wakes: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `tpu_operator` prefix.
    pub fn register(self, registry: &mut Registry) -> Self {
        let sub = registry.sub_registry_with_prefix("tpu_operator");
        sub.register("reconciles", "Reconciles run, by kind", self.reconciles.clone());
        sub.register(
            "reconcile_failures",
            "Reconciles that ended in an error, by kind and error category",
            self.failures.clone(),
        );
        sub.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, by kind",
            self.duration.clone(),
        );
        sub.register(
            "estimated_spend_usd",
            "Estimated spend so far at list prices, by namespace (TPU slices, Dataproc batches and Vertex jobs whose objects this operator process has seen)",
            self.spend_usd.clone(),
        );
        sub.register(
            "estimated_spend_per_hour_usd",
            "Estimated current burn rate at list prices in US dollars per hour, by namespace",
            self.spend_per_hour_usd.clone(),
        );
        sub.register(
            "orphans",
            "Cloud resources labelled with this cluster's id whose owning object no longer exists (last sweep), by kind",
            self.orphans.clone(),
        );
        sub.register(
            "orphans_deleted",
            "Orphaned cloud resources the sweeper deleted, by kind",
            self.orphans_deleted.clone(),
        );
        sub.register(
            "training_stalled",
            "1 while a TrainingPipeline's newest checkpoint is older than its spec.training.progressDeadline (condition ProgressStalled), by namespace and name",
            self.training_stalled.clone(),
        );
        sub.register(
            "training_stalls",
            "Training stalls reported (ProgressStalled Warning Events), by namespace",
            self.training_stalls.clone(),
        );
        sub.register(
            "stalled_on_refusal",
            "Objects stalled on a refused cloud call (a missing IAM role or Workload Identity binding), each retried within seconds of the fix",
            self.stalled_on_refusal.clone(),
        );
        sub.register(
            "stall_wakes",
            "Objects stalled on a refused call re-queued early, by why (canary passed, credentials recovered, probe handed on)",
            self.stall_wakes.clone(),
        );
        self.capacity.register(sub);
        self
    }

    /// Sets a pipeline's `training_stalled` gauge.
    pub fn set_training_stalled(&self, namespace: &str, name: &str, stalled: bool) {
        let labels = PipelineLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        self.training_stalled
            .get_or_create(&labels)
            .set(i64::from(stalled));
    }

    /// Counts one reported stall.
    pub fn count_training_stall(&self, namespace: &str) {
        self.training_stalls
            .get_or_create(&SpendLabels {
                namespace: namespace.to_owned(),
            })
            .inc();
    }

    /// Drops a deleted pipeline's series.
    pub fn forget_training(&self, namespace: &str, name: &str) {
        self.training_stalled.remove(&PipelineLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }

    /// Starts timing one reconcile of `kind`; the measurement is recorded when the guard drops, so
    /// early returns and errors are timed too.
    pub fn start(&self, kind: &'static str) -> ReconcileTimer {
        self.reconciles.get_or_create(&KindLabels { kind }).inc();
        ReconcileTimer {
            histogram: self.duration.get_or_create(&KindLabels { kind }).clone(),
            started: std::time::Instant::now(),
        }
    }

    /// Records one billable object's estimate (a TpuSlice, a PreprocessBatch, the Vertex job of a
    /// pipeline: never an aggregate, so nothing is counted twice) and refreshes its namespace's
    /// spend gauges.
    pub fn record_spend(&self, namespace: &str, uid: &str, cost: Option<&CostEstimate>) {
        let Some(cost) = cost else {
            return;
        };
        let (so_far, per_hour) = self.spend_book.lock().expect("spend book poisoned").record(
            namespace,
            uid,
            cost.so_far_usd,
            cost.per_hour_usd,
        );
        let labels = SpendLabels {
            namespace: namespace.to_owned(),
        };
        self.spend_usd.get_or_create(&labels).set(so_far);
        self.spend_per_hour_usd.get_or_create(&labels).set(per_hour);
    }

    pub fn failure(&self, kind: &'static str, category: &'static str) {
        self.failures
            .get_or_create(&FailureLabels { kind, category })
            .inc();
    }
}

pub struct ReconcileTimer {
    histogram: Histogram,
    started: std::time::Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn spend_totals_follow_each_objects_latest_estimate() {
        let mut book = SpendBook::default();
        assert_eq!(book.record("a", "s1", 10.0, 2.5), (10.0, 2.5));
        assert_eq!(book.record("a", "s2", 0.25, 1.0), (10.25, 3.5));
        // A later estimate of the same object replaces its earlier one, not adds to it.
        assert_eq!(book.record("a", "s1", 12.0, 0.0), (12.25, 1.0));
        assert_eq!(
            book.record("b", "s1", 1.0, 1.0),
            (1.0, 1.0),
            "namespaces are apart"
        );
        // Many small updates leave no drift: the totals are sums of whole micro-dollars.
        for i in 0..10_000 {
            book.record("a", "s2", f64::from(i) * 0.1, 0.3);
        }
        let (so_far, per_hour) = book.record("a", "s2", 0.1, 0.2);
        assert_eq!((so_far, per_hour), (12.1, 0.2), "12.0 for s1 and 0.1 for s2");
    }

    #[test]
    fn reconciles_and_failures_are_exposed() {
        let mut registry = Registry::default();
        let m = Metrics::default().register(&mut registry);
        drop(m.start("TpuSlice"));
        m.failure("TpuSlice", "gcp_transient");
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        assert!(
            out.contains("tpu_operator_reconciles_total{kind=\"TpuSlice\"} 1"),
            "{out}"
        );
        assert!(
            out.contains(
                "tpu_operator_reconcile_failures_total{kind=\"TpuSlice\",category=\"gcp_transient\"} 1"
            ),
            "{out}"
        );
        assert!(
            out.contains("tpu_operator_reconcile_duration_seconds_count{kind=\"TpuSlice\"} 1"),
            "{out}"
        );
    }
}
