//! The three controllers of `tpu-operator local`: their context (the emulator's clock, fast polls,
//! TpuPolicy enforced as in a cluster), their start and stop, and with `--keep` the stockout
//! memory published where `tpu-operator capacity` reads it.

use std::{sync::Arc, time::Duration};

use test_kit::{ContextSpec, Polls};
use tpu_operator_controller::{
    Context, governance::tenancy::WithoutPolicy, runtime::capacity::publish, shutdown_on,
};

use super::clock::hold_time_during_calls;
use crate::run::run_controllers;

/// The controllers' stop, their task, and their context (its stockout memory, for `--capacity`).
type Controllers = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
    Arc<Context>,
);

/// Starts the controllers against both emulators: the sender stops them, the handle ends when
/// they have.
pub(super) async fn start_controllers(
    client: &kube::Client,
    gcp: &gcp_emulator::Emulator,
    by_events: bool,
    time_scale: f64,
) -> anyhow::Result<Controllers> {
    let mut ctx = context(client, gcp, by_events).await?;
    // The emulated cloud runs `time_scale` times faster than the controllers' timers.
    ctx.config.cloud_time_scale = time_scale;
    let ctx = Arc::new(ctx);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controllers = tokio::spawn(run_controllers(
        ctx.clone(),
        shutdown_on(async move {
            let _ = stop_rx.await;
        }),
    ));
    Ok((stop_tx, controllers, ctx))
}

/// `--keep`: the stockout memory published as the leader of a cluster publishes it, into the
/// ConfigMap `tpu-operator-capacity` of namespace `default`, so `tpu-operator capacity
/// --kubeconfig ... --operator-namespace default` reads this run as it reads a cluster. Only with
/// `--keep`: its timer and writes would otherwise be more events for the clock to advance by.
/// It ends with the process.
pub(super) fn publish_capacity(ctx: &Arc<Context>) {
    tokio::spawn(publish::run(
        ctx.capacity.clone(),
        ctx.clock.clone(),
        ctx.client.clone(),
        "default".into(),
        tpu_operator_controller::never_shutdown(),
    ));
}

/// The controllers' context: the emulator's clock, fast requeues (real time), short backoff, and
/// TpuPolicy objects applied to the local cluster enforced as in a real one.
async fn context(
    client: &kube::Client,
    gcp: &gcp_emulator::Emulator,
    by_events: bool,
) -> anyhow::Result<Context> {
    let spec = ContextSpec {
        cluster_id: "local".into(),
        default_project: "local-project".into(),
        namespace: None,
        concurrency: 32,
        polls: Polls {
            active: Duration::from_millis(100),
            stable: Duration::from_secs(1),
            capacity: Duration::from_millis(200),
            watched: Duration::from_secs(5),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
        },
        tenancy: Some(WithoutPolicy::Allow),
    };
    let metrics = if by_events {
        tpu_operator_gcp::GcpMetrics::new().with_call_hold(hold_time_during_calls())
    } else {
        tpu_operator_gcp::GcpMetrics::new()
    };
    Ok(spec.build_metered(client, gcp, &gcp.url(), metrics).await?)
}
