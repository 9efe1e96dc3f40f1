//! The maintenance step of a run (`CrashConfig::maintenance`, `crash-bench --maintenance`): once
//! the slice converged, Google maintains its node, killed at random points meanwhile. Either a
//! notice is announced (`ScheduleMaintenance`: the window opens 6–15 min of cloud time later, so
//! the operator asks the workload for a checkpoint `checkpointLead`, 5 min, before it with a
//! `nodes.patch` of the node's metadata) and the maintenance runs at the window, or
//! `simulateMaintenanceEvent` starts an unannounced one at once. Two notices in three may be
//! moved (`canReschedule`): the slice's container checkpoints into its `CHECKPOINT_DIR`, so the
//! operator starts those itself (`nodes.performMaintenance`, or
//! `queuedResources.performMaintenanceQueuedResource` for a queued slice) once the checkpoint it
//! asked for is committed, before the window. The step ends once the slice's
//! status shows the maintenance over. Kills land in each part: while the notice stands, while
//! the checkpoint is asked (the clock standing still at the time it is due), and while the
//! maintenance runs.
//!
//! What it checks: the checkpoint is asked at most once per window and node (the successful
//! `nodes.patch` calls with `metadata` in their mask), the node's request names the window
//! (its value is the window's start), and the maintenance is counted as one maintenance restart,
//! never as a preemption (`preemptions`-side counts unchanged: `recreations`,
//! `lastPreemptionTime`); a window is started early at most once (successful start calls), and
//! never one that may not be moved or was not announced.

use kube::ResourceExt;
use rand::Rng;
use serde_json::json;
use std::time::Duration;

use tpu_operator_api::tpu_slice::{
    CHECKPOINT_REQUEST_METADATA, DEFAULT_CHECKPOINT_LEAD, MaintenanceState, TpuSlice, TpuSliceStatus,
};

use super::{STEP, driver::Run};

/// How long the maintenance lasts in cloud time: long enough (120 ticks of 15 s) that the
/// operator, restarted after every kill, sees it under way and not only over.
const DURATION_SECS: u64 = 1800;

/// How the node's maintenance came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A notice (`ScheduleMaintenance`), then the maintenance at its window.
    Announced,
    /// `simulateMaintenanceEvent`: unannounced, under way at once.
    Simulated,
}

/// What one run's maintenance step saw.
#[derive(Clone, Debug)]
pub struct MaintenanceSeen {
    pub how: How,
    /// Successful `nodes.patch` calls on the node with `metadata` in their `updateMask` (the
    /// checkpoint requests).
    pub checkpoint_patches: usize,
    /// The notice let the customer start it earlier (`canReschedule`).
    pub reschedulable: bool,
    /// Successful calls that started the maintenance early, and every such call (refusals too).
    pub early_starts: usize,
    pub start_calls: usize,
    /// Of the successful early starts, those through a queued resource (a queued slice's node).
    pub queued_starts: usize,
    /// `status.maintenanceRestarts` after the step minus before.
    pub restarts_counted: i32,
    /// `status.recreations` after minus before (a preemption would count there).
    pub recreations_counted: i32,
    /// Whether the step finished (the slice's status shows the maintenance over).
    pub ended: bool,
}

impl Run<'_> {
    /// The maintenance step of slice `s`, each of its parts under `lo..=hi` kills. Records
    /// violations; returns what it saw, or `None` when the slice had no node to maintain.
    pub(super) async fn maintenance(&mut self, lo: u32, hi: u32) -> Option<MaintenanceSeen> {
        let before = slice_status(self).await?;
        let node = before.node_name.clone()?;
        let how = if self.rng.random_bool(0.75) {
            How::Announced
        } else {
            How::Simulated
        };
        let start_in = self.rng.random_range(360..=900);
        let reschedulable = how == How::Announced && self.rng.random_bool(2.0 / 3.0);
        let patches_before = metadata_patches(&self.world.gcp, &node);
        let starts_before = start_calls(&self.world.gcp);
        let window = match how {
            How::Announced => {
                let window = announce(self, &node, start_in, reschedulable);
                self.until_asked(&window, lo, hi).await;
                Some(window)
            }
            How::Simulated => {
                simulate(self, &node).await;
                None
            }
        };
        let kills = self.rng.random_range(lo..=hi);
        let ended = self
            .phase("maintenance", kills, |s| {
                let st = s.slices.iter().find(|o| o.name_any() == "s");
                st.and_then(|o| o.status.as_ref()).is_some_and(|st| {
                    st.maintenance_restarts > before.maintenance_restarts
                        && st
                            .maintenance
                            .as_ref()
                            .is_some_and(|m| m.state == MaintenanceState::Ended)
                })
            })
            .await
            .is_some();
        let after = slice_status(self).await.unwrap_or_default();
        let starts = start_calls(&self.world.gcp);
        let seen = MaintenanceSeen {
            how,
            reschedulable,
            early_starts: starts.0 - starts_before.0,
            start_calls: starts.1 - starts_before.1,
            queued_starts: starts.2 - starts_before.2,
            checkpoint_patches: metadata_patches(&self.world.gcp, &node) - patches_before,
            restarts_counted: after.maintenance_restarts - before.maintenance_restarts,
            recreations_counted: after.recreations - before.recreations,
            ended,
        };
        self.check_maintenance(&seen, &before, &after, &node, window);
        Some(seen)
    }

    /// An announced window: the cloud clock runs until the checkpoint is due (`checkpointLead`
    /// before `window`), then stands still until the slice's status shows it asked. The
    /// operator's timers run on the wall clock while the harness moves the cloud's 15 s a tick,
    /// so a running clock would be past the window before the timer fired; the real service's
    /// clock is the wall clock.
    async fn until_asked(&mut self, window: &str, lo: u32, hi: u32) {
        let window = chrono::DateTime::parse_from_rfc3339(window).expect("a window start");
        let due = window.to_utc() - chrono::Duration::from_std(DEFAULT_CHECKPOINT_LEAD).unwrap();
        let clock = self.world.gcp.clock();
        let kills = self.rng.random_range(0..=hi);
        self.phase("maintenance notice", kills, |_| clock.now() >= due)
            .await;
        let kills = self.rng.random_range(lo..=hi);
        self.step = Duration::ZERO;
        self.phase("checkpoint request", kills, |s| {
            let st = s.slices.iter().find(|o| o.name_any() == "s");
            st.and_then(|o| o.status.as_ref())
                .and_then(|st| st.maintenance.as_ref())
                .is_some_and(|m| m.checkpoint_request_time.is_some())
        })
        .await;
        self.step = STEP;
    }

    fn check_maintenance(
        &mut self,
        seen: &MaintenanceSeen,
        before: &TpuSliceStatus,
        after: &TpuSliceStatus,
        node: &str,
        window: Option<String>,
    ) {
        let mut v = Vec::new();
        if seen.checkpoint_patches > 1 {
            v.push(format!(
                "checkpoint asked {} times for one window of {node}",
                seen.checkpoint_patches
            ));
        }
        let value = self
            .world
            .gcp
            .nodes()
            .into_iter()
            .find(|n| n["name"] == json!(node))
            .and_then(|n| {
                n["metadata"][CHECKPOINT_REQUEST_METADATA]
                    .as_str()
                    .map(str::to_owned)
            });
        if seen.checkpoint_patches > 0 && value != window {
            v.push(format!(
                "{node}'s checkpoint request {value:?} does not name the window {window:?}"
            ));
        }
        if seen.early_starts > 1 {
            v.push(format!(
                "one window of {node} started early {} times",
                seen.early_starts
            ));
        }
        if !seen.reschedulable && seen.start_calls > 0 {
            v.push(format!(
                "{} early starts asked of {node}, whose maintenance may not be moved",
                seen.start_calls
            ));
        }
        if seen.ended && seen.restarts_counted != 1 {
            v.push(format!(
                "one maintenance counted as {} maintenance restarts",
                seen.restarts_counted
            ));
        }
        if seen.recreations_counted != 0 || after.last_preemption_time != before.last_preemption_time {
            v.push(format!(
                "maintenance counted as a preemption: recreations +{}, lastPreemptionTime {:?} → {:?}",
                seen.recreations_counted, before.last_preemption_time, after.last_preemption_time
            ));
        }
        for s in v {
            self.violations.push(format!("maintenance ({:?}): {s}", seen.how));
        }
    }
}

/// Slice `s`'s status now.
async fn slice_status(run: &Run<'_>) -> Option<TpuSliceStatus> {
    let api = run.world.api::<TpuSlice>();
    api.get("s").await.ok().and_then(|s| s.status)
}

/// Announces maintenance on `node`, its window `start_in` seconds of cloud time from now and
/// movable or not; returns the window's start as the node shows it.
fn announce(run: &Run<'_>, node: &str, start_in: u64, can_reschedule: bool) -> String {
    let notice = gcp_emulator::Fault::ScheduleMaintenance {
        name: node.to_owned(),
        start_in_secs: start_in,
        duration_secs: DURATION_SECS,
        can_reschedule,
        unscheduled: false,
    };
    run.world.gcp.inject(notice).expect("announce maintenance");
    run.world
        .gcp
        .nodes()
        .into_iter()
        .find(|n| n["name"] == json!(node))
        .and_then(|n| {
            n["upcomingMaintenance"]["windowStartTime"]
                .as_str()
                .map(str::to_owned)
        })
        .expect("the notice on the node")
}

/// v2alpha1 `simulateMaintenanceEvent` on `node`'s worker 0, lasting [`DURATION_SECS`].
async fn simulate(run: &Run<'_>, node: &str) {
    let gcp = &run.world.gcp;
    let mut cfg = gcp.config();
    cfg.durations.maintenance = Duration::from_secs(DURATION_SECS);
    gcp.set_config(cfg);
    let url = format!("{}/tpu/v2alpha1/{node}:simulateMaintenanceEvent", gcp.url());
    let reply = reqwest::Client::new()
        .post(url)
        .json(&json!({"workerIds": ["0"]}))
        .send()
        .await
        .expect("simulateMaintenanceEvent");
    assert!(
        reply.status().is_success(),
        "simulateMaintenanceEvent on {node}: {}",
        reply.text().await.unwrap_or_default()
    );
}

/// Successful `nodes.patch` calls on `node` whose `updateMask` names `metadata`.
fn metadata_patches(gcp: &gcp_emulator::Emulator, node: &str) -> usize {
    gcp.calls()
        .iter()
        .filter(|c| c.service == "tpu" && c.method == "nodes.patch" && c.status < 300)
        .filter(|c| c.path.ends_with(node) && c.query.contains("metadata"))
        .count()
}

/// The calls that start a maintenance early (the run has one slice, whose node is maintained):
/// (successful, all, successful through a queued resource).
fn start_calls(gcp: &gcp_emulator::Emulator) -> (usize, usize, usize) {
    let starts = [
        "nodes.performMaintenance",
        "queuedResources.performMaintenanceQueuedResource",
    ];
    let calls: Vec<_> = gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "tpu" && starts.contains(&c.method.as_str()))
        .collect();
    let ok = calls.iter().filter(|c| c.status < 300);
    let queued = ok.clone().filter(|c| c.method == starts[1]).count();
    (ok.count(), calls.len(), queued)
}
