//! Everything a reconciler needs, passed explicitly (no globals, no `Client::try_default()` inside
//! reconcilers), so tests build the same `Context` against the emulators.

use std::{sync::Arc, time::Duration};

use tpu_operator_gcp::Gcp;

use crate::{
    governance::{
        pricing::PriceTable,
        tenancy::{Admissions, Policies},
    },
    runtime::{
        backoff::{BackoffPolicy, ObjectBackoff},
        clock::{Clock, SystemClock},
        cloud_watch::CloudWatch,
        events::EventRecorder,
        fair_share::FairShare,
        metrics::Metrics,
        settled::Settled,
    },
};

/// Operator-wide settings the controllers read.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Written to the `tpu-operator-cluster` label of every cloud object, so that several clusters
    /// sharing a project never sweep or adopt each other's resources.
    pub cluster_id: String,
    /// Watch only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Reconciles run at once per controller.
    pub concurrency: u16,
    /// Project used when an object does not name one.
    pub default_project: Option<String>,
    /// Requeue interval while a cloud object is changing state (creating, running, cancelling).
    pub poll_active: Duration,
    /// Requeue interval while nothing is expected to change (a READY slice, a finished batch).
    pub poll_stable: Duration,
    /// Requeue interval while waiting for capacity (stockout, queued resource waiting).
    pub poll_capacity: Duration,
    /// Watch cloud state changes with one paged list per collection and location instead of a
    /// read per object every `poll_active` (see [`crate::runtime::cloud_watch`]).
    pub watch_lists: bool,
    /// Backstop read interval of an object whose cloud resource is watched by listing. Only a
    /// listing that misses a change needs it (a change, or an absence, in a listing wakes the
    /// owner at once), so it is as long as `poll_stable`: while thousands of objects wait for
    /// capacity or for a batch to run, each backstop read is a call beyond the minimum.
    pub poll_watched: Duration,
    /// Least time between two listings of a training pipeline's checkpoint directory (progress
    /// in `status.checkpoint`, `progressDeadline`), in cloud-clock time.
    pub poll_checkpoints: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            cluster_id: "default".into(),
            namespace: None,
            concurrency: 16,
            default_project: None,
            poll_active: Duration::from_secs(2),
            poll_stable: Duration::from_secs(300),
            poll_capacity: Duration::from_secs(30),
            watch_lists: true,
            poll_watched: Duration::from_secs(300),
            poll_checkpoints: Duration::from_secs(180),
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub gcp: Gcp,
    pub config: ControllerConfig,
    pub metrics: Metrics,
    pub backoff: ObjectBackoff,
    pub clock: Arc<dyn Clock>,
    /// One recorder for the process: its cache is what turns a repeated event into one Event with
    /// a growing series count instead of a new object per occurrence.
    pub recorder: EventRecorder,
    /// Who may use what, per namespace: the cluster's `TpuPolicy` objects (none watched:
    /// everything allowed).
    pub policies: Policies,
    /// List prices for cost estimates, budgets and per-object spend limits.
    pub prices: Arc<PriceTable>,
    /// Policy admissions per namespace: their lock and usage (see [`Admissions`]).
    pub admission: Admissions,
    /// Objects as their last successful reconcile left them (see [`Settled`]).
    pub settled: Settled,
    /// Cloud state changes seen by listing (see [`CloudWatch`]).
    pub cloud_watch: CloudWatch,
    /// Each controller's workers, shared fairly between namespaces (see [`FairShare`]).
    pub fair_share: FairShare,
}

impl Context {
    pub fn new(client: kube::Client, gcp: Gcp, config: ControllerConfig) -> Self {
        let recorder = EventRecorder::new(client.clone(), "tpu-operator", None);
        let fair_share = FairShare::new(config.concurrency);
        Self {
            client,
            gcp,
            config,
            metrics: Metrics::default(),
            backoff: ObjectBackoff::new(BackoffPolicy::default()),
            clock: Arc::new(SystemClock),
            recorder,
            policies: Policies::default(),
            prices: Arc::default(),
            admission: Admissions::default(),
            settled: Settled::default(),
            cloud_watch: CloudWatch::default(),
            fair_share,
        }
    }

    /// Enforces the cluster's `TpuPolicy` objects (see [`Policies::watch`]).
    pub fn with_policies(mut self, policies: Policies) -> Self {
        self.policies = policies;
        self
    }

    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = Arc::new(prices);
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn with_backoff(mut self, policy: BackoffPolicy) -> Self {
        self.backoff = ObjectBackoff::new(policy);
        self
    }

    /// An `Api` over all watched namespaces.
    pub fn watched_api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.config.namespace {
            Some(ns) => kube::Api::namespaced(self.client.clone(), ns),
            None => kube::Api::all(self.client.clone()),
        }
    }

    /// The project an object's cloud resources live in: its own, else its namespace's default
    /// (tenancy policy), else the operator default.
    pub fn project_for(&self, namespace: &str, explicit: Option<&str>) -> Option<String> {
        explicit
            .map(str::to_owned)
            .or_else(|| {
                self.policies
                    .governing(namespace)
                    .default_project()
                    .map(str::to_owned)
            })
            .or_else(|| self.config.default_project.clone())
    }
}
