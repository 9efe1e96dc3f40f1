//! Leader election over a `coordination.k8s.io/v1` Lease, so that of several replicas only one
//! runs the controllers and two never act on the same cloud objects at once.
//!
//! The algorithm is client-go's (`k8s.io/client-go/tools/leaderelection`) with its default
//! proportions of the lease duration L: renew deadline D = 2/3 L, retry period R = 2/15 L
//! (15 s / 10 s / 2 s for the default 15 s lease). See [`Timing`].
//!
//! - **Fencing by time.** The leader renews every R. It counts itself the leader until D after
//!   the *start* of its last successful renewal and, at that instant, reports the lease lost
//!   whether or not the API server ever answered (a renewal still in flight is abandoned). The
//!   caller stops everything that acts (see `run.rs`).
//! - **Expiry by the observer's own clock.** A standby takes a held lease only after it has seen
//!   the same record (the same resourceVersion) for the lease's duration on its own monotonic
//!   clock. The leader's last successful write started before anyone could see it, so a standby
//!   takes over no sooner than L after that start, L − D (5 s by default) after the deposed leader
//!   stopped. No two clocks are compared, so clock skew between nodes cannot shorten it.
//! - **Quick hand-off.** A standby reads the Lease every [`Timing::standby_poll`] (at most
//!   500 ms), so a lease released by a clean shutdown is taken within that, not at its old expiry.
//! - **No two winners.** Every write is a merge patch carrying the resourceVersion it was based
//!   on: of two replicas racing for a released or expired lease, the second gets 409 Conflict.
//!   (Patch and get on the named Lease, create for the first one: the chart's Role.)

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
    time::Instant,
};
use tracing::{debug, info, warn};

use crate::config::LeaderSettings;

/// The election's periods, all derived from the lease duration as client-go's defaults are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a standby waits, after it last saw the lease change, before taking it.
    pub lease: Duration,
    /// How long after the start of its last successful renewal a leader stops leading.
    pub renew_deadline: Duration,
    /// How often the leader renews (and retries a failed renewal).
    pub retry: Duration,
}

impl Timing {
    pub fn for_lease(lease: Duration) -> Self {
        Self {
            lease,
            renew_deadline: lease * 2 / 3,
            retry: lease * 2 / 15,
        }
    }

    /// How often a standby reads the Lease: a released lease is taken within this.
    pub fn standby_poll(&self) -> Duration {
        self.retry.min(Duration::from_millis(500))
    }
}

/// A running election; [`Election::release`] gives the lease up.
pub struct Election {
    leading: watch::Receiver<bool>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
    identity: String,
}

impl Election {
    /// Checks that the Lease can be read and starts competing for it in a background task.
    pub async fn start(client: kube::Client, settings: &LeaderSettings) -> anyhow::Result<Self> {
        let api: Api<Lease> = Api::namespaced(client, &settings.lease_namespace);
        let timing = Timing::for_lease(Duration::from_secs(settings.duration_secs));
        api.get_opt(&settings.lease_name).await.with_context(|| {
            format!(
                "leader election: cannot read Lease {}/{}",
                settings.lease_namespace, settings.lease_name
            )
        })?;
        let elector = Elector {
            api,
            name: settings.lease_name.clone(),
            identity: settings.identity.clone(),
            timing,
            observed: None,
        };
        let (leading_tx, leading) = watch::channel(false);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(elector.run(leading_tx, stop_rx));
        Ok(Self {
            leading,
            stop,
            task,
            identity: settings.identity.clone(),
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Resolves once this replica holds the lease. Errors when the election task ended.
    pub async fn acquired(&mut self) -> anyhow::Result<()> {
        self.wait_for(true).await
    }

    /// Resolves once this replica no longer holds the lease: another replica took it, or it was
    /// not renewed within the renew deadline.
    pub async fn lost(&mut self) -> anyhow::Result<()> {
        self.wait_for(false).await
    }

    async fn wait_for(&mut self, leading: bool) -> anyhow::Result<()> {
        self.leading
            .wait_for(|now| *now == leading)
            .await
            .map(|_| ())
            .map_err(|_| anyhow::anyhow!("leader election stopped unexpectedly"))
    }

    /// Stops competing and releases the lease if held, so a standby takes it at once.
    pub async fn release(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task
            .await
            .map_err(|e| anyhow::anyhow!("leader election task failed: {e}"))?
    }
}

/// The last Lease record seen, and when (by this replica's monotonic clock) it was first seen.
struct Observed {
    spec: LeaseSpec,
    resource_version: Option<String>,
    at: Instant,
}

struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Option<Observed>,
}

impl Elector {
    /// Stands by, leads, stands by again when the lease is lost; on `stop`, releases it if held.
    async fn run(
        mut self,
        leading: watch::Sender<bool>,
        mut stop: oneshot::Receiver<()>,
    ) -> anyhow::Result<()> {
        loop {
            let acquired_at = tokio::select! {
                biased;
                _ = &mut stop => return Ok(()),
                at = self.stand_by() => at,
            };
            leading.send_replace(true);
            let lost = tokio::select! {
                biased;
                _ = &mut stop => None,
                why = self.hold(acquired_at) => Some(why),
            };
            match lost {
                Some(why) => {
                    leading.send_replace(false);
                    warn!(identity = %self.identity, "lost the leader lease: {why}");
                }
                None => {
                    let released = self.release().await;
                    leading.send_replace(false);
                    return released;
                }
            }
        }
    }

    /// Reads the Lease every [`Timing::standby_poll`] until this replica takes it; returns when
    /// the successful attempt started (the base of the new leader's renew deadline).
    async fn stand_by(&mut self) -> Instant {
        loop {
            let started = Instant::now();
            match tokio::time::timeout(self.timing.renew_deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    info!(identity = %self.identity, lease = %self.name, "acquired the leader lease");
                    return started;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => debug!(error = %e, "leader election: cannot take the lease yet"),
                Err(_) => debug!("leader election: reading the lease timed out"),
            }
            tokio::time::sleep(self.timing.standby_poll()).await;
        }
    }

    /// Renews every [`Timing::retry`] and returns why leadership ended: another holder, or no
    /// successful renewal within the renew deadline (checked by time, never by an answer).
    async fn hold(&mut self, acquired_at: Instant) -> String {
        let mut valid_until = acquired_at + self.timing.renew_deadline;
        loop {
            tokio::time::sleep_until((Instant::now() + self.timing.retry).min(valid_until)).await;
            let started = Instant::now();
            if started >= valid_until {
                return self.deadline_passed();
            }
            match tokio::time::timeout_at(valid_until, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => valid_until = started + self.timing.renew_deadline,
                Ok(Ok(false)) => {
                    let holder = self
                        .observed
                        .as_ref()
                        .and_then(|o| o.spec.holder_identity.clone());
                    return format!("the lease is held by {}", holder.unwrap_or_default());
                }
                Ok(Err(e)) => warn!(
                    error = %e,
                    left = ?valid_until.saturating_duration_since(Instant::now()),
                    "cannot renew the leader lease; retrying until the renew deadline"
                ),
                Err(_) => return self.deadline_passed(),
            }
        }
    }

    fn deadline_passed(&self) -> String {
        format!(
            "not renewed within the renew deadline ({:?}; the lease lasts {:?})",
            self.timing.renew_deadline, self.timing.lease
        )
    }

    /// One round of client-go's `tryAcquireOrRenew`: `Ok(true)` when this replica holds the lease
    /// afterwards, `Ok(false)` when another replica holds it and it has not expired yet.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            return self.create().await;
        };
        let resource_version = lease.metadata.resource_version.clone();
        if self.observed.as_ref().map(|o| &o.resource_version) != Some(&resource_version) {
            self.observed = Some(Observed {
                spec: lease.spec.unwrap_or_default(),
                resource_version: resource_version.clone(),
                at: Instant::now(),
            });
        }
        let observed = self.observed.as_ref().expect("just observed");
        let old = &observed.spec;
        let holder = old.holder_identity.as_deref().filter(|h| !h.is_empty());
        let ours = holder == Some(self.identity.as_str());
        if holder.is_some() && !ours {
            let duration = old
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.timing.lease, Duration::from_secs);
            if Instant::now() < observed.at + duration {
                return Ok(false);
            }
            info!(holder = ?holder, "the leader lease expired; taking it");
        }
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            renew_time: Some(now.clone()),
            acquire_time: if ours { old.acquire_time.clone() } else { Some(now) },
            lease_transitions: Some(old.lease_transitions.unwrap_or(0) + i32::from(!ours)),
            ..old.clone()
        };
        let patch = json!({
            "metadata": {"resourceVersion": resource_version},
            "spec": {
                "holderIdentity": spec.holder_identity,
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "renewTime": spec.renew_time,
                "acquireTime": spec.acquire_time,
                "leaseTransitions": spec.lease_transitions,
            },
        });
        // A 409 (the record changed since it was read) is an error: the next round reads again.
        let written = self.write(&patch).await?;
        self.observe_own(spec, written);
        Ok(true)
    }

    /// Creates the Lease held by this replica; `Ok(false)` when another replica created it first.
    async fn create(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            renew_time: Some(now.clone()),
            acquire_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        };
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.observe_own(spec, created);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn write(&self, patch: &serde_json::Value) -> Result<Lease, kube::Error> {
        let params = PatchParams {
            field_manager: Some("tpu-operator-leader-election".into()),
            ..PatchParams::default()
        };
        self.api.patch(&self.name, &params, &Patch::Merge(patch)).await
    }

    fn observe_own(&mut self, spec: LeaseSpec, written: Lease) {
        self.observed = Some(Observed {
            spec,
            resource_version: written.metadata.resource_version,
            at: Instant::now(),
        });
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.timing.lease.as_secs()).unwrap_or(i32::MAX)
    }

    /// Clears the holder if it is still this replica, so a standby takes the lease at once. The
    /// times are cleared too (an empty record), as earlier releases of this operator did.
    async fn release(&mut self) -> anyhow::Result<()> {
        let attempt = async {
            let Some(lease) = self.api.get_opt(&self.name).await? else {
                return Ok(());
            };
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
            if holder != Some(self.identity.as_str()) {
                return Ok(());
            }
            let patch = json!({
                "metadata": {"resourceVersion": lease.metadata.resource_version},
                "spec": {
                    "holderIdentity": null,
                    "leaseDurationSeconds": null,
                    "renewTime": null,
                    "acquireTime": null,
                },
            });
            self.write(&patch).await.map(drop)
        };
        match tokio::time::timeout(self.timing.renew_deadline, attempt).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow::anyhow!("releasing the lease: {e}")),
            Err(_) => Err(anyhow::anyhow!(
                "releasing the lease: no answer within {:?}",
                self.timing.renew_deadline
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_keeps_client_go_proportions_and_fences_before_expiry() {
        let t = Timing::for_lease(Duration::from_secs(15));
        assert_eq!(
            (t.renew_deadline, t.retry, t.standby_poll()),
            (
                Duration::from_secs(10),
                Duration::from_secs(2),
                Duration::from_millis(500)
            )
        );
        for secs in 2..=120 {
            let t = Timing::for_lease(Duration::from_secs(secs));
            // Several renewals fit in the deadline, and the deadline ends well before expiry.
            assert!(t.retry * 4 < t.renew_deadline, "{t:?}");
            assert!(t.renew_deadline + t.lease / 4 < t.lease, "{t:?}");
        }
    }
}
