//! One leadership term: the controllers run while this replica holds the lease; on `stop` they
//! finish their in-flight reconciles (still fenced by the lease), and on losing the lease they are
//! aborted at once and the process exits ([`LeadershipLost`]). [`finish`], the graceful end, is
//! also how a run without election stops.

use std::{sync::Arc, time::Duration};

use futures::FutureExt;
use prometheus_client::metrics::gauge::Gauge;
use tpu_operator_controller::{Context, Shutdown, shutdown_on, sweeper::Sweeper};
use tracing::{error, info, warn};

use super::run_operator;
use crate::{config::Settings, leader::Election};

/// Why a leader exits: it lost the lease (another holder, or no renewal within the renew
/// deadline). Its controllers were aborted when that happened, before the lease could expire for
/// another replica; the process then exits rather than stand by again, so that nothing started in
/// that term (a reconcile's spawned task, the cloud-watch lister, a request a client library still
/// retries) outlives it, and the next term starts from what the API server says, not from this
/// process's caches. client-go-based managers do the same (controller-runtime returns "leader
/// election lost", kube-controller-manager exits).
#[derive(Debug)]
pub struct LeadershipLost;

impl std::fmt::Display for LeadershipLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "leader election lost: controllers aborted; exiting so that the kubelet restarts this \
             replica as a standby",
        )
    }
}

impl std::error::Error for LeadershipLost {}

/// Runs the controllers once this replica holds the lease, until `stop` (then they stop
/// gracefully) or the lease is lost (then they are aborted at once: [`LeadershipLost`]).
pub(super) async fn lead_while_holding(
    election: &mut Election,
    ctx: &Arc<Context>,
    stop: &Shutdown,
    leader_gauge: &Gauge,
    settings: &Settings,
) -> anyhow::Result<()> {
    tokio::select! {
        acquired = election.acquired() => acquired?,
        _ = stop.clone() => return Ok(()),
    }
    info!(
        identity = election.identity(),
        "acquired the leader lease; starting controllers"
    );
    leader_gauge.set(1);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controller_stop = shutdown_on(futures::future::select(stop.clone(), stop_rx).map(|_| ()));
    let sweeper = Arc::new(Sweeper::new(settings.sweeper.clone()));
    let mut controllers = tokio::spawn(run_operator(ctx.clone(), sweeper, controller_stop));
    // Biased: losing the lease wins over everything; the controllers also end when `stop`
    // fires, which is a shutdown, not a crash.
    let outcome = tokio::select! {
        biased;
        lost = election.lost() => Err(lost.err()),
        _ = stop.clone() => Ok(Ok(())),
        ended = &mut controllers => Ok(Err(anyhow::anyhow!("controllers stopped unexpectedly: {ended:?}"))),
    };
    let _ = stop_tx.send(());
    let graceful = match outcome {
        Err(lost) => return fence(controllers, leader_gauge, lost).await,
        Ok(Err(crashed)) => Err(crashed),
        Ok(Ok(())) => Ok(()),
    };
    // Graceful, but still fenced: the lease must be renewed while in-flight reconciles finish.
    tokio::select! {
        biased;
        lost = election.lost() => return fence(controllers, leader_gauge, lost.err()).await,
        () = finish(&mut controllers, settings.shutdown_timeout) => {}
    }
    leader_gauge.set(0);
    graceful
}

/// Aborts the controllers (dropping every reconcile and its in-flight HTTP calls) and reports
/// [`LeadershipLost`].
async fn fence(
    controllers: tokio::task::JoinHandle<()>,
    leader_gauge: &Gauge,
    election_error: Option<anyhow::Error>,
) -> anyhow::Result<()> {
    controllers.abort();
    leader_gauge.set(0);
    error!(
        election_error = ?election_error,
        "lost the leader lease; controllers aborted, exiting"
    );
    // An aborted task ends at its next await point; wait for it, briefly, to be sure.
    let _ = tokio::time::timeout(Duration::from_secs(1), controllers).await;
    Err(LeadershipLost.into())
}

/// Waits for the controllers to finish their in-flight reconciles, at most `timeout`.
pub(super) async fn finish(controllers: &mut tokio::task::JoinHandle<()>, timeout: Duration) {
    if controllers.is_finished() {
        return;
    }
    match tokio::time::timeout(timeout, controllers).await {
        Ok(Ok(())) => info!("controllers stopped"),
        Ok(Err(e)) => error!(error = %e, "controller task failed"),
        Err(_) => warn!(?timeout, "controllers did not stop in time; exiting anyway"),
    }
}
