//! `spec.maintenance` and `status.maintenance`: the maintenance Google announces for a slice's
//! node (`Node.upcomingMaintenance` in the TPU API), and what the operator does before it: ask the
//! workload for a checkpoint shortly before the window, so a maintenance costs the steps of a few
//! minutes instead of those since the last periodic checkpoint.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::DURATION;

/// Node metadata key through which the operator asks the workload for a checkpoint before a
/// maintenance window. Its value is the window's start (RFC 3339); a new value is a new request.
/// The generated startup script watches it on every host and sends the workload container
/// `SIGTERM` (JAX's preemption sync point, Orbax's `reached_preemption`), then starts the
/// container again, which resumes from the checkpoint it just wrote (docs/training.md,
/// "Maintenance").
pub const CHECKPOINT_REQUEST_METADATA: &str = "tpu-operator-checkpoint-request";

/// Default of `spec.maintenance.checkpointLead`.
pub const DEFAULT_CHECKPOINT_LEAD: Duration = Duration::from_secs(5 * 60);

/// What the operator does when Google announces maintenance of the slice's node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// How long before the maintenance window starts the workload is asked for a checkpoint
    /// (default `5m`). The steps trained between the checkpoint and the window are lost, so keep
    /// it short, but long enough for one checkpoint to be written. `0s` never asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub checkpoint_lead: Option<String>,
    /// Whether the operator starts a maintenance Google lets the customer start early
    /// (`canReschedule`) itself, right after the checkpoint it asked for is committed, so the
    /// steps trained between that checkpoint and the window are not lost: `AfterCheckpoint`
    /// (default) or `Never` (the maintenance starts at its window). Needs a checkpoint request
    /// (`checkpointLead` above `0s`) and a `workload` whose env sets `CHECKPOINT_DIR`, where the
    /// commit is looked for. Any slice: a TPU API node, a queued resource's node (a multislice's
    /// slice alone), a Compute Engine slice's VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_early: Option<StartEarly>,
}

// When the operator starts a reschedulable maintenance itself. A plain comment, not a doc
// comment: schemars would put the type's doc over the field's (`spec.maintenance.startEarly`),
// which says more, including the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StartEarly {
    /// Right after a checkpoint written since the checkpoint request is committed in
    /// `CHECKPOINT_DIR` (TPU API `performMaintenance` or `performMaintenanceQueuedResource`,
    /// Compute Engine `instances.performMaintenance`).
    #[default]
    AfterCheckpoint,
    /// Never: the maintenance starts when Google starts it.
    Never,
}

impl MaintenanceSpec {
    /// `startEarly`, or its default.
    pub fn start_early(&self) -> StartEarly {
        self.start_early.unwrap_or_default()
    }

    /// `checkpointLead`, or its default when unset or unreadable (admission refuses the latter).
    pub fn checkpoint_lead(&self) -> Duration {
        self.checkpoint_lead
            .as_deref()
            .and_then(|d| crate::duration::parse_duration(d).ok())
            .unwrap_or(DEFAULT_CHECKPOINT_LEAD)
    }
}

/// Whether the announced maintenance is still ahead or under way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MaintenanceState {
    /// Announced; the window has not started.
    #[default]
    Pending,
    /// Under way: the node is unavailable until it ends.
    Ongoing,
    /// Over: the node no longer reports it (kept until the next notice, as the last one).
    Ended,
}

/// The maintenance Google announced for the slice's node (for a multislice, the earliest of its
/// nodes'), as the TPU API's `upcomingMaintenance` reports it; once over, the last one, `Ended`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// `Scheduled` (planned, announced days ahead) or `Unscheduled` (emergency).
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `Pending` until the window starts, then `Ongoing`, then `Ended`.
    #[serde(default)]
    pub state: MaintenanceState,
    /// When the window starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_time: Option<Time>,
    /// When the maintenance is over at the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end_time: Option<Time>,
    /// The latest the window may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_window_start_time: Option<Time>,
    /// Whether Google lets the customer start the maintenance earlier.
    #[serde(default)]
    pub can_reschedule: bool,
    /// Multislice: the slice whose node the maintenance is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<i32>,
    /// When the operator asked the workload for a checkpoint before this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_request_time: Option<Time>,
    /// When the operator started this maintenance itself (`spec.maintenance.startEarly`), once
    /// the checkpoint it asked for was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_request_time: Option<Time>,
    /// The committed checkpoint the early start followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_checkpoint: Option<String>,
}

impl MaintenanceStatus {
    /// Whether `new` is the maintenance `self` showed: the same window, or the one announced
    /// having started before its window (started early, by the operator or by Google), whose
    /// window then starts when it began.
    pub fn same_as(&self, new: &MaintenanceStatus) -> bool {
        let started_early = self.state == MaintenanceState::Pending
            && new.state == MaintenanceState::Ongoing
            && self.slice == new.slice
            && new.window_start_time.as_ref().map(|t| t.0) <= self.window_start_time.as_ref().map(|t| t.0);
        self.window_start_time == new.window_start_time || started_early
    }

    /// One line for the condition and the Events.
    pub fn describe(&self) -> String {
        let when = |t: &Option<Time>| t.as_ref().map_or_else(|| "?".to_string(), |t| t.0.to_string());
        let what = format!("{} maintenance", self.kind.to_lowercase());
        let whose = self.slice.map(|k| format!(" of slice {k}")).unwrap_or_default();
        let window = format!(
            "window {} to {}",
            when(&self.window_start_time),
            when(&self.window_end_time)
        );
        let mut line = match self.state {
            MaintenanceState::Ongoing => format!("{what}{whose} under way ({window})"),
            MaintenanceState::Pending => format!("{what}{whose} announced: {window}"),
            MaintenanceState::Ended => format!("{what}{whose} over ({window})"),
        };
        if self.can_reschedule {
            line.push_str("; Google lets it start earlier");
        }
        if let Some(t) = &self.checkpoint_request_time {
            line.push_str(&format!("; checkpoint requested at {}", t.0));
        }
        if let Some(t) = &self.start_request_time {
            let after = self.committed_checkpoint.as_deref().unwrap_or("the checkpoint");
            line.push_str(&format!(
                "; started early at {}, right after {after} was committed",
                t.0
            ));
        }
        line
    }
}
