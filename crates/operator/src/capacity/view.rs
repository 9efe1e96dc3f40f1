//! The capacity view, pure: the leader's stockout memory (as published, or read in-process by
//! `local`) beside the slices that wait, grouped by place and reason, and what could not be read.
//! Built from what the caller read and the time it reads it at; [`super::render`] prints it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::{TpuSlice, TpuSlicePhase},
};
use tpu_operator_controller::runtime::capacity::snapshot::Snapshot;

/// Everything `tpu-operator capacity` shows.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// What "blocked" and "in 4m" are relative to: when the caller looked (see [`judged_at`]).
    pub now: DateTime<Utc>,
    /// The stockout memory, when it could be read.
    pub memory: Option<Snapshot>,
    /// Slices that wait, grouped by place and reason.
    pub waiting: Vec<WaitingGroup>,
    /// What could not be read, and why: the rest of the view stands without it.
    pub unread: Vec<String>,
}

/// The time the view is judged at: the caller's clock, or the snapshot's when that is ahead.
/// A snapshot ahead of the caller was taken on another clock: `local` runs the operator on
/// emulated time, many times faster than the wall clock, and in a cluster the leader's clock may
/// be a few seconds ahead of the admin's. Judged on the caller's clock alone, a block would read
/// as starting in the future. Behind (the usual case) the caller's clock is right: a snapshot is
/// at most one publish tick old while the leader lives.
pub fn judged_at(caller: DateTime<Utc>, memory: Option<&Snapshot>) -> DateTime<Utc> {
    memory
        .and_then(|m| m.generated_at)
        .map_or(caller, |taken| caller.max(taken))
}

/// Where a slice asks for capacity, as its spec names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlicePlace {
    /// `None`: the spec names none, so the operator's default project is used.
    pub project: Option<String>,
    pub zone: String,
    pub accelerator: String,
    /// The `spec.capacity` member (`onDemand` when none is set).
    pub kind: String,
}

/// The slices waiting at one place for one reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingGroup {
    pub place: SlicePlace,
    /// Why they wait: their `Reconciling` reason (or `Ready`'s, else the phase), with
    /// `CapacityAvailable`'s reason when it is False and says more (`WaitingForCapacity
    /// (Stockout)`).
    pub reason: String,
    /// `namespace/name`, sorted.
    pub slices: Vec<String>,
    /// When the longest wait among them started (its condition's last transition), if known.
    pub since: Option<DateTime<Utc>>,
}

/// The waiting slices among `slices`, grouped by place and reason.
pub fn waiting(slices: &[TpuSlice]) -> Vec<WaitingGroup> {
    let mut groups: BTreeMap<(SlicePlace, String), WaitingGroup> = BTreeMap::new();
    for slice in slices {
        let Some((reason, since)) = waits(slice) else {
            continue;
        };
        let place = place_of(slice);
        let group = groups
            .entry((place.clone(), reason.clone()))
            .or_insert_with(|| WaitingGroup {
                place,
                reason,
                slices: Vec::new(),
                since: None,
            });
        let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        group.slices.push(format!("{ns}/{name}"));
        group.since = match (group.since, since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    let mut out: Vec<WaitingGroup> = groups.into_values().collect();
    for g in &mut out {
        g.slices.sort();
    }
    out
}

/// Why `slice` waits and since when, or `None` when it does not wait for capacity. A slice waits
/// when its phase is `Waiting` (a stockout, a quota, a rate limit, its namespace's policy) or
/// `Queued` (its queued resource waits in Google's queue).
fn waits(slice: &TpuSlice) -> Option<(String, Option<DateTime<Utc>>)> {
    let status = slice.status.as_ref()?;
    if !matches!(status.phase, TpuSlicePhase::Waiting | TpuSlicePhase::Queued) {
        return None;
    }
    let reconciling = find_condition(&status.conditions, types::RECONCILING).filter(|c| c.status == "True");
    let ready = find_condition(&status.conditions, types::READY);
    let main = reconciling.or(ready);
    let mut reason = main
        .map(|c| c.reason.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| format!("{:?}", status.phase));
    let capacity = find_condition(&status.conditions, types::CAPACITY_AVAILABLE)
        .filter(|c| c.status == "False" && !c.reason.is_empty() && c.reason != reason);
    if let Some(c) = capacity {
        reason = format!("{reason} ({})", c.reason);
    }
    let since = main.and_then(|c| DateTime::from_timestamp(c.last_transition_time.0.as_second(), 0));
    Some((reason, since))
}

fn place_of(slice: &TpuSlice) -> SlicePlace {
    let accelerator = slice
        .status
        .as_ref()
        .and_then(|s| s.accelerator_type.clone())
        .or_else(|| slice.spec.accelerator_type.clone())
        .unwrap_or_else(|| "-".into());
    // With a capacity plan, where the slice stands on it now.
    let here = slice.spec.at(slice.place_in_effect().as_ref());
    SlicePlace {
        project: slice.spec.project.clone(),
        zone: here.zone.clone(),
        accelerator,
        kind: here.capacity_mode().field().to_owned(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;

    /// A slice in `ns` at `zone` whose status is `status` (JSON).
    pub fn slice(ns: &str, name: &str, zone: &str, status: serde_json::Value) -> TpuSlice {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "TpuSlice",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "project": "team-a",
                "zone": zone,
                "acceleratorType": "v6e-8",
                "runtimeVersion": "v2-alpha-tpuv6e",
                "capacity": {"spot": {}},
            },
            "status": status,
        }))
        .expect("TpuSlice fixture")
    }

    pub fn stocked_out(since: &str) -> serde_json::Value {
        json!({
            "phase": "Waiting",
            "conditions": [
                {"type": "Reconciling", "status": "True", "reason": "WaitingForCapacity",
                 "message": "no v6e-8 spot capacity", "lastTransitionTime": since},
                {"type": "CapacityAvailable", "status": "False", "reason": "Stockout",
                 "message": "", "lastTransitionTime": since},
            ],
        })
    }

    #[test]
    fn waiting_slices_are_grouped_by_place_and_reason_and_ready_ones_left_out() {
        let slices = [
            slice("team-a", "b", "us-east5-b", stocked_out("2027-01-15T08:01:00Z")),
            slice("team-a", "a", "us-east5-b", stocked_out("2027-01-15T08:00:00Z")),
            slice(
                "team-b",
                "c",
                "us-central2-b",
                stocked_out("2027-01-15T08:02:00Z"),
            ),
            slice("team-a", "up", "us-east5-b", json!({"phase": "Ready"})),
            slice("team-a", "new", "us-east5-b", json!(null)),
        ];
        let groups = waiting(&slices);
        assert_eq!(groups.len(), 2, "{groups:#?}");
        let east = groups.iter().find(|g| g.place.zone == "us-east5-b").unwrap();
        assert_eq!(east.slices, ["team-a/a", "team-a/b"]);
        assert_eq!(east.reason, "WaitingForCapacity (Stockout)");
        assert_eq!(east.place.kind, "spot");
        assert_eq!(east.place.accelerator, "v6e-8");
        assert_eq!(east.place.project.as_deref(), Some("team-a"));
        assert_eq!(
            east.since.unwrap().to_rfc3339(),
            "2027-01-15T08:00:00+00:00",
            "the longest wait"
        );
    }

    #[test]
    fn a_snapshot_from_a_clock_ahead_sets_the_time_and_one_behind_does_not() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let taken = |at: &str| Snapshot {
            generated_at: Some(t(at)),
            ..Snapshot::default()
        };
        let caller = t("2027-01-15T08:00:00Z");
        assert_eq!(
            judged_at(caller, Some(&taken("2027-01-15T09:40:00Z"))),
            t("2027-01-15T09:40:00Z")
        );
        assert_eq!(judged_at(caller, Some(&taken("2027-01-15T07:59:55Z"))), caller);
        assert_eq!(judged_at(caller, None), caller);
    }

    #[test]
    fn a_queued_slice_waits_under_its_own_reason() {
        let queued = json!({
            "phase": "Queued",
            "conditions": [{"type": "Reconciling", "status": "True", "reason": "Queued",
                            "message": "", "lastTransitionTime": "2027-01-15T08:00:00Z"}],
        });
        let groups = waiting(&[slice("team-a", "q", "us-east5-b", queued)]);
        assert_eq!(groups[0].reason, "Queued");
    }
}
