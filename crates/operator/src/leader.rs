//! Leader election over a `coordination.k8s.io/v1` Lease (`kube-lease-manager`), so that of several
//! replicas only one runs the controllers and two never act on the same cloud objects at once.
//!
//! The lease is renewed one third of its duration before it expires; a standby checks again when
//! the holder's lease would expire, so a killed leader is replaced about one lease duration later.
//! A clean shutdown releases the lease, so a standby does not even wait that long.

use anyhow::Context as _;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::{sync::watch, task::JoinHandle};

use crate::config::LeaderSettings;

/// A running election; [`Election::release`] gives the lease up.
pub struct Election {
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    identity: String,
}

impl Election {
    /// Creates the Lease if needed and starts competing for it in a background task.
    pub async fn start(client: kube::Client, settings: &LeaderSettings) -> anyhow::Result<Self> {
        let grace = (settings.duration_secs / 3).max(1);
        let manager = LeaseManagerBuilder::new(client, &settings.lease_name)
            .with_namespace(&settings.lease_namespace)
            .with_identity(&settings.identity)
            .with_duration(settings.duration_secs)
            .with_grace(grace)
            .build()
            .await
            .with_context(|| {
                format!(
                    "leader election: cannot use Lease {}/{}",
                    settings.lease_namespace, settings.lease_name
                )
            })?;
        let (leading, task) = manager.watch().await;
        Ok(Self {
            leading,
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

    /// Resolves once this replica no longer holds the lease.
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

    /// Stops competing and releases the lease if held (closing the channel makes the task release).
    pub async fn release(self) -> anyhow::Result<()> {
        drop(self.leading);
        match self.task.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(anyhow::anyhow!("releasing the lease: {e}")),
            Err(e) => Err(anyhow::anyhow!("leader election task failed: {e}")),
        }
    }
}
