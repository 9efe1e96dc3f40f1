//! `tpu-operator run`: the operator in a cluster (or against any kubeconfig).
//!
//! Order of events: logs → Kubernetes client → metrics/health server (alive at once, not ready)
//! → wait until the CRDs are Established → GCP clients (bounded by twice gcpCallTimeout, and
//! SIGTERM interrupts it) → leader election → ready (and unready again while the GCP credentials
//! fail). Only the
//! lease holder runs the controllers. A leader that cannot renew its lease within the renew
//! deadline (or finds another holder) aborts the controllers at once, in-flight cloud calls
//! included, and exits non-zero: the kubelet restarts it as a standby (see [`LeadershipLost`]).
//! SIGTERM/SIGINT stop the controllers gracefully, release the lease and exit 0.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use prometheus_client::{
    metrics::{gauge::Gauge, info::Info},
    registry::Registry,
};
use tokio::signal::unix::{SignalKind, signal};
use tpu_operator_controller::{
    Context, Shutdown,
    governance::tenancy::Policies,
    runtime::{capacity::publish, metrics::Metrics},
    shutdown_on,
    sweeper::{self, Sweeper},
};
use tpu_operator_gcp::{Gcp, GcpMetrics};
use tracing::info;

mod term;

pub use term::LeadershipLost;
use term::{finish, lead_while_holding};

use crate::{
    build_info,
    config::{ClusterIdSource, LeaderSettings, RunArgs, Settings},
    crds_ready,
    leader::Election,
    server::{self, Readiness},
    telemetry,
};

/// Runs the three controllers and the TpuPolicy usage report until `shutdown` resolves. Shared with `tpu-operator local`.
pub async fn run_controllers(ctx: Arc<Context>, shutdown: Shutdown) {
    use tpu_operator_controller::{
        governance::tenancy,
        kinds::{preprocess_batch, tpu_slice, training_pipeline},
    };
    tokio::join!(
        tpu_slice::run(ctx.clone(), shutdown.clone()),
        preprocess_batch::run(ctx.clone(), shutdown.clone()),
        training_pipeline::run(ctx.clone(), shutdown.clone()),
        tenancy::report::run(
            ctx.tenancy.clone(),
            ctx.clock.clone(),
            ctx.config.clone(),
            shutdown
        ),
    );
}

/// The controllers plus the orphan sweeper (only the leader sweeps: it may delete) and the
/// capacity view's publisher (only the leader's stockout memory is worth showing), which writes
/// into the operator's namespace, where the sweeper reports.
pub async fn run_operator(ctx: Arc<Context>, sweeper: Arc<Sweeper>, shutdown: Shutdown) {
    let capacity_view = publish::run(
        ctx.capacity.clone(),
        ctx.clock.clone(),
        ctx.client.clone(),
        sweeper.config.report_namespace.clone(),
        shutdown.clone(),
    );
    tokio::join!(
        run_controllers(ctx.clone(), shutdown.clone()),
        sweeper::run(ctx, sweeper, shutdown),
        capacity_view,
    );
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed before this returns, so a signal
/// that arrives early is not lost.
pub fn termination_signal() -> anyhow::Result<Shutdown> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(shutdown_on(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received, shutting down"),
            _ = int.recv() => info!("SIGINT received, shutting down"),
        }
    }))
}

/// A client from `--kubeconfig`, else the in-cluster service account or the default kubeconfig.
pub(crate) async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    match kubeconfig {
        Some(path) => {
            let raw = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("kubeconfig: reading {}", path.display()))?;
            let config =
                kube::Config::from_custom_kubeconfig(raw, &kube::config::KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("kubeconfig: loading {}", path.display()))?;
            kube::Client::try_from(config).context("building the Kubernetes client")
        }
        None => kube::Client::try_default()
            .await
            .context("no kubeconfig given and neither in-cluster config nor ~/.kube/config works"),
    }
}

/// The configured cluster id, else the UID of the `kube-system` Namespace: every cluster has one,
/// it never changes while the cluster lives, and no two clusters share it (the same choice as
/// OpenTelemetry's `k8s.cluster.uid` convention), so an install that sets nothing can neither
/// adopt nor sweep another cluster's resources in a shared project.
async fn cluster_id(client: &kube::Client, source: &ClusterIdSource) -> anyhow::Result<String> {
    match source {
        ClusterIdSource::Given(id) => Ok(id.clone()),
        ClusterIdSource::KubeSystemUid => {
            let api: kube::Api<Namespace> = kube::Api::all(client.clone());
            let namespace = api.get("kube-system").await.context(
                "clusterId is not set, so it is the kube-system Namespace's UID, and reading that \
                 Namespace failed (the operator needs `get` on namespaces/kube-system, which the \
                 chart grants); set clusterId to a value unique to this cluster instead",
            )?;
            namespace
                .metadata
                .uid
                .filter(|uid| !uid.is_empty())
                .context("the kube-system Namespace has no UID; set clusterId")
        }
    }
}

/// Entry point of `tpu-operator run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut settings = args.resolve()?;
    telemetry::init(settings.log_format, "info");
    info!(
        version = env!("CARGO_PKG_VERSION"),
        profile = build_info::profile(),
        features = build_info::features(),
        libc = build_info::libc(),
        "tpu-operator starting"
    );
    let stop = termination_signal()?;

    let client = kube_client(settings.kubeconfig.as_deref()).await?;
    settings.controller.cluster_id = cluster_id(&client, &settings.cluster_id).await?;
    info!(cluster_id = %settings.controller.cluster_id, source = ?settings.cluster_id, "cluster id");
    let (registry, metrics, gcp_metrics, leader_gauge) = register_metrics();
    let readiness = Readiness::new("waiting for the CRDs to be established");
    let (addr, server) =
        server::start(settings.metrics_addr, registry, readiness.clone(), stop.clone()).await?;
    info!(%addr, "serving /metrics, /healthz and /readyz");

    tokio::select! {
        ready = crds_ready::wait_for_crds(&client) => ready?,
        _ = stop.clone() => return Ok(()),
    }
    if settings.controller.kueue {
        crds_ready::check_kueue(&client).await?;
    }
    readiness.set_not_ready("building the GCP clients");
    let Some(gcp) = connect_gcp(&settings, &gcp_metrics, &stop).await? else {
        return Ok(());
    };
    // Unready while the GCP credentials cannot produce a token (`gcp_credentials_failing`).
    let credentials = gcp_metrics.clone();
    readiness.add_check(Arc::new(move || credentials.credentials_failure()));
    let ctx = controller_context(&client, gcp, metrics, &settings);

    let result = match &settings.leader {
        None => {
            run_without_election(ctx, &settings, &stop, &readiness, &leader_gauge).await;
            Ok(())
        }
        Some(leader) => {
            let election = Election::start(client, leader).await?;
            run_elected(election, leader, ctx, &settings, &stop, &readiness, &leader_gauge).await
        }
    };
    // The server stops with `stop`; on an error path, stop it directly.
    server.abort();
    result
}

/// The registry `/metrics` serves, with the controllers' and the GCP clients' metrics and the
/// leader gauge registered in it.
fn register_metrics() -> (Registry, Metrics, GcpMetrics, Gauge) {
    let mut registry = Registry::default();
    let metrics = Metrics::default().register(&mut registry);
    let gcp_metrics = GcpMetrics::register(&mut registry);
    registry.register(
        "tpu_operator_build",
        "The binary's version, cargo profile, features (empty for the image's build) and C library",
        Info::new(build_info::labels()),
    );
    let leader_gauge: Gauge = Gauge::default();
    registry.register(
        "tpu_operator_leader",
        "1 while this replica holds the leader lease and runs the controllers",
        leader_gauge.clone(),
    );
    (registry, metrics, gcp_metrics, leader_gauge)
}

/// The controllers' shared context: both clients, the settings, metrics, the TpuPolicy watch and
/// the price table.
fn controller_context(
    client: &kube::Client,
    gcp: Gcp,
    metrics: Metrics,
    settings: &Settings,
) -> Arc<Context> {
    let ctx = Arc::new(
        Context::new(client.clone(), gcp, settings.controller.clone())
            .with_metrics(metrics)
            .with_policies(Policies::watch(
                client.clone(),
                settings.controller.namespace.as_deref(),
                settings.namespaces_without_policy,
            ))
            .with_prices(settings.prices.clone())
            .with_holdings(tpu_operator_controller::kinds::holdings()),
    );
    // Orphans counted against quotas are kept in the sweeper's summary ConfigMap.
    ctx.tenancy
        .admissions
        .orphans
        .store_in(&settings.sweeper.report_namespace);
    ctx
}

/// Leader election disabled: this replica runs the controllers until `stop`.
async fn run_without_election(
    ctx: Arc<Context>,
    settings: &Settings,
    stop: &Shutdown,
    readiness: &Readiness,
    leader_gauge: &Gauge,
) {
    readiness.set_ready();
    leader_gauge.set(1);
    info!("leader election disabled; starting controllers");
    let sweeper = Arc::new(Sweeper::new(settings.sweeper.clone()));
    let mut controllers = tokio::spawn(run_operator(ctx, sweeper, stop.clone()));
    stop.clone().await;
    finish(&mut controllers, settings.shutdown_timeout).await;
}

/// Leader election on: stands by for the lease, leads while holding it, then releases it, unless
/// leadership was lost (then there is nothing to release).
async fn run_elected(
    mut election: Election,
    leader: &LeaderSettings,
    ctx: Arc<Context>,
    settings: &Settings,
    stop: &Shutdown,
    readiness: &Readiness,
    leader_gauge: &Gauge,
) -> anyhow::Result<()> {
    readiness.set_ready();
    info!(identity = election.identity(), lease = %leader.lease_name, "standing by for the leader lease");
    let led = lead_while_holding(&mut election, &ctx, stop, leader_gauge, settings).await;
    readiness.set_not_ready("shutting down");
    if led.as_ref().is_err_and(|e| e.is::<LeadershipLost>()) {
        // Not the holder any more (and perhaps cut off from the API server): nothing to release.
        return led;
    }
    let released = election.release().await;
    if released.is_ok() {
        info!("lease released");
    }
    led.and(released)
}

/// Builds the GCP clients, within [`connect_bound`] and interruptibly: `Ok(None)` when `stop`
/// fires first (SIGTERM during start-up exits 0 at once), an error when the bound runs out.
async fn connect_gcp(
    settings: &Settings,
    metrics: &GcpMetrics,
    stop: &Shutdown,
) -> anyhow::Result<Option<Gcp>> {
    let bound = connect_bound(settings.gcp.call_timeout);
    tokio::select! {
        built = tokio::time::timeout(bound, Gcp::connect(settings.gcp.clone(), metrics.clone())) => match built {
            Ok(gcp) => gcp.map(Some).context("building the GCP clients"),
            Err(_) => Err(anyhow::anyhow!(
                "building the GCP clients took longer than {bound:?} (twice gcpCallTimeout); \
                 is the metadata server answering? (on GKE: check that NO_PROXY covers \
                 169.254.169.254 and metadata.google.internal when a proxy is set)"
            )),
        },
        _ = stop.clone() => {
            info!("stopped while building the GCP clients");
            Ok(None)
        }
    }
}

/// How long building the GCP clients may take: their only network question (the universe
/// domain, asked of the metadata server) is bounded by half of `call_timeout`; twice
/// `call_timeout` leaves room for a slow node.
pub fn connect_bound(call_timeout: Duration) -> Duration {
    call_timeout * 2
}
