//! Everything a reconciler needs, passed explicitly (no globals, no `Client::try_default()` inside
//! reconcilers), so tests build the same `Context` against the emulators.

use std::sync::Arc;

use tpu_operator_gcp::Gcp;

use super::report::{KubeReports, Reports};
use crate::{
    governance::{
        pricing::PriceTable,
        tenancy::{HoldingsLister, Policies, Tenancy},
    },
    runtime::{
        backoff::{BackoffPolicy, ObjectBackoff},
        capacity::Capacity,
        clock::{Clock, SystemClock},
        cloud_watch::CloudWatch,
        config::ControllerConfig,
        fair_share::FairShare,
        metrics::Metrics,
        settled::Settled,
        shared::Shared,
        stalled_on::StalledOn,
    },
};

/// The handles a reconcile pass uses, and nothing else: a plain bag, built once per process. The
/// pieces it holds take what they need explicitly; none of them reaches back into it. A kind's
/// hooks never get it whole, only the views of [`super::handles`].
pub struct Context {
    pub client: kube::Client,
    pub gcp: Gcp,
    pub config: ControllerConfig,
    pub metrics: Metrics,
    pub backoff: ObjectBackoff,
    pub clock: Arc<dyn Clock>,
    /// Where status writes and Events go (see [`Reports`]): the API server, through one Event
    /// recorder for the process.
    pub reports: Arc<dyn Reports>,
    /// Policies, admissions, usage and prices (see [`Tenancy`]).
    pub tenancy: Arc<Tenancy>,
    /// Objects as their last successful reconcile left them (see [`Settled`]).
    pub settled: Arc<Settled>,
    /// Cloud state changes seen by listing (see [`CloudWatch`]).
    pub cloud_watch: Arc<CloudWatch>,
    /// Objects stalled on a refused cloud call, woken when it is fixed (see [`StalledOn`]).
    pub stalled_on: Arc<StalledOn>,
    /// Each controller's workers, shared fairly between namespaces (see [`FairShare`]).
    pub fair_share: FairShare,
    /// Each kind's watch cache (set by [`super::driver::run`]) and what kinds keep between
    /// passes (see [`Shared`]).
    pub shared: Shared,
    /// Which (project, zone, accelerator, capacity kind) stocked out lately and until when it is
    /// not asked: the stockout memory every slice's direct create consults (see [`Capacity`]).
    pub capacity: Arc<Capacity>,
}

impl Context {
    pub fn new(client: kube::Client, gcp: Gcp, config: ControllerConfig) -> Self {
        let reports = Arc::new(KubeReports::new(client.clone()));
        let fair_share = FairShare::new(config.concurrency);
        let settled = Arc::new(Settled::default());
        let cloud_watch = Arc::new(CloudWatch::new(gcp.clone(), &config, settled.clone()));
        let tenancy = Tenancy::new(client.clone());
        // Where the sweeper reports when nothing says otherwise (the operator sets its own).
        let store = config.namespace.as_deref().unwrap_or("default");
        tenancy.admissions.orphans.store_in(store);
        let metrics = Metrics::default();
        let stalled_on = Arc::new(StalledOn::new(cloud_watch.clone(), &metrics));
        Self {
            tenancy: Arc::new(tenancy),
            capacity: Arc::new(Capacity::new(
                metrics.capacity.clone(),
                config.create_limits.clone(),
            )),
            client,
            gcp,
            config,
            metrics,
            backoff: ObjectBackoff::new(BackoffPolicy::default()),
            clock: Arc::new(SystemClock),
            reports,
            settled,
            stalled_on,
            cloud_watch,
            fair_share,
            shared: Shared::default(),
        }
    }

    /// The tenancy handle while the context is being built (before it is shared).
    fn tenancy_mut(&mut self) -> &mut Tenancy {
        Arc::get_mut(&mut self.tenancy).expect("the context is configured before it is shared")
    }

    /// Status writes and Events go to `reports` instead of the API server (the pass's unit tests).
    pub fn with_reports(mut self, reports: Arc<dyn Reports>) -> Self {
        self.reports = reports;
        self
    }

    /// Enforces the cluster's `TpuPolicy` objects (see [`Policies::watch`]).
    pub fn with_policies(mut self, policies: Policies) -> Self {
        self.tenancy_mut().policies = policies;
        self
    }

    /// Counts what the kinds' objects hold against quotas and budgets (`listers`: each kind's,
    /// which the kinds supply; without them a namespace's usage is its orphans alone).
    pub fn with_holdings(mut self, listers: Vec<Box<dyn HoldingsLister>>) -> Self {
        self.tenancy_mut().listers = listers;
        self
    }

    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.tenancy_mut().prices = Arc::new(prices);
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        Arc::get_mut(&mut self.reports)
            .expect("the context is configured before it is shared")
            .set_clock(clock.clone());
        self.clock = clock;
        self
    }

    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        // The memory's gauges must be the ones `/metrics` serves: a fresh (empty) memory that
        // reports into them, which is all a context being built has.
        self.capacity = Arc::new(Capacity::new(
            metrics.capacity.clone(),
            self.config.create_limits.clone(),
        ));
        self.metrics = metrics;
        self
    }

    /// Paces creates to `limits` (a fresh limiter; the stockout memory starts empty too).
    pub fn with_create_limits(mut self, limits: crate::runtime::capacity::Limits) -> Self {
        self.capacity = Arc::new(Capacity::new(self.metrics.capacity.clone(), limits.clone()));
        self.config.create_limits = limits;
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
}
