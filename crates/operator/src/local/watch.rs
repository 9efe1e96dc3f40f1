//! Following the applied objects until they finish, and cleaning up: deleting them and waiting
//! until Kubernetes and the emulated cloud hold none of them.

use std::time::Duration;

use kube::api::DeleteParams;
use tpu_operator_controller::Shutdown;

use super::apply;
use super::display::Display;
use super::progress::{Key, Tracker};
use super::rehearse::Rehearsal;

/// Follows the applied objects, printing their progress every 100 ms.
pub(super) struct Watch<'a> {
    client: &'a kube::Client,
    gcp: &'a gcp_emulator::Emulator,
    clock: gcp_emulator::Clock,
    keys: &'a [Key],
    pub(super) tracker: Tracker,
    display: Display,
    /// `--inject`: acted on at every poll.
    rehearsal: Rehearsal,
}

impl<'a> Watch<'a> {
    /// Follows the objects named by `keys`, reading progress at the emulated cloud's time.
    pub(super) fn new(
        client: &'a kube::Client,
        gcp: &'a gcp_emulator::Emulator,
        keys: &'a [Key],
        rehearsal: Rehearsal,
    ) -> Self {
        Self {
            client,
            gcp,
            clock: gcp.clock(),
            keys,
            tracker: Tracker::default(),
            display: Display::new(gcp.config().durations),
            rehearsal,
        }
    }

    /// Leaves the progress as it last was, for the summary to follow.
    pub(super) fn finish(&mut self) {
        self.display.finish();
    }

    async fn poll(&mut self) -> anyhow::Result<()> {
        for line in self.rehearsal.tick(self.gcp, self.clock.now()) {
            self.display.note(&line);
        }
        self.tracker
            .poll(self.client, self.clock.now(), self.keys)
            .await?;
        self.display.show(&self.tracker, self.clock.now());
        Ok(())
    }

    /// Until every applied object is done, `timeout` passes or `stop` fires: (done in time,
    /// interrupted).
    pub(super) async fn until_done(
        &mut self,
        timeout: Duration,
        stop: &Shutdown,
    ) -> anyhow::Result<(bool, bool)> {
        // `--timeout` is real time: under the paused clock, emulated time may run far ahead.
        let deadline = std::time::Instant::now() + timeout;
        let mut interrupted = false;
        loop {
            self.poll().await?;
            if self.tracker.all_applied_done(self.keys) {
                return Ok((true, interrupted));
            }
            if std::time::Instant::now() >= deadline || interrupted {
                return Ok((false, interrupted));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop.clone() => interrupted = true,
            }
        }
    }

    /// Until every object is gone from Kubernetes; `false` when `timeout` passed first.
    async fn until_gone(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let deadline = std::time::Instant::now() + timeout;
        while !self.tracker.all_gone() {
            if std::time::Instant::now() >= deadline {
                let line = format!(
                    "cleanup: objects still present after {}",
                    humantime::format_duration(timeout)
                );
                self.display.note(&line);
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.poll().await?;
        }
        Ok(true)
    }
}

/// Deletes the applied objects (newest first), waits until Kubernetes has none of them, then
/// until the emulated cloud is empty: (all gone from Kubernetes in time, what the cloud still
/// holds).
pub(super) async fn clean_up(
    watch: &mut Watch<'_>,
    applied: &[apply::Applied],
    gcp: &gcp_emulator::Emulator,
    timeout: Duration,
) -> anyhow::Result<(bool, Vec<gcp_emulator::ResourceSummary>)> {
    watch.display.note("cleaning up");
    for a in applied.iter().rev() {
        if let Err(e) = a
            .api(watch.client)
            .delete(&a.name, &DeleteParams::background())
            .await
        {
            eprintln!("deleting {}/{}: {e}", a.kind, a.name);
        }
    }
    let gone = watch.until_gone(timeout).await?;
    Ok((gone, wait_cloud_empty(gcp).await))
}

/// Billable cloud resources still present, after giving in-flight deletions a moment (their
/// emulated duration is a fraction of a second of real time at the usual scales).
async fn wait_cloud_empty(gcp: &gcp_emulator::Emulator) -> Vec<gcp_emulator::ResourceSummary> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = gcp.billable_resources();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
