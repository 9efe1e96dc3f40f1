//! Maintenance Google announces for the slice's nodes: what status shows of it, when the
//! workload is asked for a checkpoint before it, how maintenance restarts are counted, and the
//! Events. Starting a maintenance early is [`super::early_start`]'s.
//!
//! The notice is read from the nodes every pass already reads (and the cloud watch's listings,
//! which wake the slice when a READY node's notice or health changes), so watching for
//! maintenance costs no call of its own. The request is one metadata patch per window and node,
//! and it is idempotent: its value is the window's start, so a node already carrying it was
//! asked, whether or not the status write that followed survived.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{condition, find_condition, reasons, set_condition, types},
    tpu_slice::{
        CHECKPOINT_REQUEST_METADATA, MaintenanceState, MaintenanceStatus, TpuSliceSpec, TpuSliceStatus,
    },
};
use tpu_operator_gcp::{
    maintenance::{UpcomingMaintenance, parse, upcoming_maintenance},
    tpu_v2::model::{Node, node},
};

use super::{observe::Observed, plan::Action};
use crate::{reconcile::report::Transition, runtime::clock::k8s_time as time};

/// The slice's nodes that exist, with their slice id.
fn nodes(observed: &Observed) -> impl Iterator<Item = (usize, &Node)> {
    std::iter::once(observed.node.as_ref())
        .chain(observed.other_slices.iter().map(Option::as_ref))
        .enumerate()
        .filter_map(|(k, n)| n.map(|n| (k, n)))
}

/// A node's maintenance as status says it: the notice, or a node under maintenance without one
/// (its health says so: an unannounced emergency).
fn of_node(n: &Node) -> Option<UpcomingMaintenance> {
    let notice = upcoming_maintenance(n);
    if n.health == node::Health::UnhealthyMaintenance {
        let mut m = notice.unwrap_or_else(|| UpcomingMaintenance {
            kind: "UNSCHEDULED".into(),
            ..UpcomingMaintenance::default()
        });
        m.maintenance_status = "ONGOING".into();
        return Some(m);
    }
    notice
}

/// The maintenance status shows: one under way first, else the earliest window.
fn shown(observed: &Observed) -> Option<(usize, UpcomingMaintenance)> {
    nodes(observed)
        .filter_map(|(k, n)| of_node(n).map(|m| (k, m)))
        .min_by_key(|(_, m)| (!m.ongoing(), m.window_start()))
}

/// When node `n` is to be asked for a checkpoint, and the value of
/// [`CHECKPOINT_REQUEST_METADATA`] that asks (its announced window's start): `checkpointLead`
/// before the window, unless `n` already carries that request. `None` with nothing running the
/// operator could ask (no `workload` or `startupScript`), a lead of `0s`, or maintenance already
/// under way.
fn request(spec: &TpuSliceSpec, n: &Node) -> Option<(DateTime<Utc>, String)> {
    if spec.workload.is_none() && spec.startup_script.is_none() {
        return None;
    }
    let lead = spec.maintenance.clone().unwrap_or_default().checkpoint_lead();
    let lead = chrono::Duration::from_std(lead).ok().filter(|l| !l.is_zero())?;
    let m = upcoming_maintenance(n).filter(|m| !m.ongoing())?;
    let due = m.window_start()? - lead;
    let value = m.window_start_time?;
    (!carries_request(n, Some(&value))).then_some((due, value))
}

/// Whether node `n` carries the checkpoint request for the window starting at `window` (the
/// request's value is the window's start).
pub fn carries_request(n: &Node, window: Option<&String>) -> bool {
    window.is_some_and(|w| n.metadata.get(CHECKPOINT_REQUEST_METADATA) == Some(w))
}

/// The request ([`request`]) node `n` is due now.
pub fn checkpoint_due(spec: &TpuSliceSpec, n: &Node, now: DateTime<Utc>) -> Option<String> {
    request(spec, n)
        .filter(|(due, _)| now >= *due)
        .map(|(_, value)| value)
}

/// When the next checkpoint request of a node under notice is due (to wake the slice then).
pub fn next_request(spec: &TpuSliceSpec, observed: &Observed) -> Option<DateTime<Utc>> {
    nodes(observed)
        .filter_map(|(_, n)| request(spec, n))
        .map(|(due, _)| due)
        .min()
}

/// Sets `status.maintenance`, `maintenanceRestarts` and the `MaintenancePending` condition of
/// `st` from the nodes this pass read.
pub fn report(
    st: &mut TpuSliceStatus,
    old: &TpuSliceStatus,
    observed: &Observed,
    action: &Action,
    asked: bool,
    now: DateTime<Utc>,
) {
    let slices = observed.other_slices.len();
    let now_shown = shown(observed).map(|(k, m)| {
        let mut s = status_of(&m, (slices > 0).then_some(k as i32));
        let same_window = old.maintenance.as_ref().filter(|o| o.same_as(&s));
        let just_asked = asked && matches!(action, Action::RequestCheckpoint { .. });
        let carried = nodes(observed).any(|(_, n)| carries_request(n, m.window_start_time.as_ref()));
        s.checkpoint_request_time = same_window
            .and_then(|o| o.checkpoint_request_time.clone())
            .or_else(|| (just_asked || carried).then(|| time(now)));
        let started = asked && matches!(action, Action::PerformMaintenance { .. });
        s.start_request_time = same_window
            .and_then(|o| o.start_request_time.clone())
            .or_else(|| started.then(|| time(now)));
        s.committed_checkpoint = same_window
            .and_then(|o| o.committed_checkpoint.clone())
            .or_else(|| observed.committed_checkpoint.clone().filter(|_| started));
        s
    });
    // Over once the nodes no longer report it: kept as the last one, `Ended`.
    st.maintenance = now_shown.or_else(|| {
        old.maintenance.clone().map(|mut m| {
            m.state = MaintenanceState::Ended;
            m
        })
    });
    let began = |s: &TpuSliceStatus| {
        s.maintenance
            .as_ref()
            .is_some_and(|m| m.state == MaintenanceState::Ongoing)
    };
    st.maintenance_restarts = old.maintenance_restarts + i32::from(began(st) && !began(old));
    set_pending_condition(st, observed.node.is_some(), now);
}

fn status_of(m: &UpcomingMaintenance, slice: Option<i32>) -> MaintenanceStatus {
    let at = |t: &Option<String>| parse(t.as_deref()).map(time);
    MaintenanceStatus {
        kind: if m.kind == "UNSCHEDULED" {
            "Unscheduled"
        } else {
            "Scheduled"
        }
        .into(),
        state: if m.ongoing() {
            MaintenanceState::Ongoing
        } else {
            MaintenanceState::Pending
        },
        window_start_time: at(&m.window_start_time),
        window_end_time: at(&m.window_end_time),
        latest_window_start_time: at(&m.latest_window_start_time),
        can_reschedule: m.can_reschedule,
        slice,
        ..MaintenanceStatus::default()
    }
}

/// `MaintenancePending`: `True` while a maintenance is announced or under way, `False` once a
/// slice with a node has none (kept off slices that never had a node).
fn set_pending_condition(st: &mut TpuSliceStatus, has_node: bool, now: DateTime<Utc>) {
    let had = find_condition(&st.conditions, types::MAINTENANCE_PENDING).is_some();
    let c = match st
        .maintenance
        .as_ref()
        .filter(|m| m.state != MaintenanceState::Ended)
    {
        Some(m) => {
            let reason = match (m.state, m.kind.as_str()) {
                (MaintenanceState::Ongoing, _) => reasons::MAINTENANCE_ONGOING,
                (_, "Unscheduled") => reasons::MAINTENANCE_UNSCHEDULED,
                _ => reasons::MAINTENANCE_SCHEDULED,
            };
            condition(
                types::MAINTENANCE_PENDING,
                true,
                reason,
                m.describe(),
                st.observed_generation,
                time(now),
            )
        }
        None if has_node || had => condition(
            types::MAINTENANCE_PENDING,
            false,
            reasons::NO_MAINTENANCE,
            "no maintenance announced",
            st.observed_generation,
            time(now),
        ),
        None => return,
    };
    set_condition(&mut st.conditions, c);
}

/// The Events: one when a maintenance is announced (or a new window replaces it), one when a
/// checkpoint is requested, one when it is over.
pub fn transitions(old: &TpuSliceStatus, new: &TpuSliceStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    let live = |s: &TpuSliceStatus| {
        s.maintenance
            .clone()
            .filter(|m| m.state != MaintenanceState::Ended)
    };
    match (live(old), live(new)) {
        (o, Some(m)) if o.as_ref().is_none_or(|o| !o.same_as(&m)) => {
            let reason = if m.kind == "Unscheduled" {
                reasons::MAINTENANCE_UNSCHEDULED
            } else {
                reasons::MAINTENANCE_SCHEDULED
            };
            out.push(Transition::warning(reason, m.describe()));
        }
        (Some(o), None) => {
            let whose = o.slice.map(|k| format!(" of slice {k}")).unwrap_or_default();
            let kind = o.kind.to_lowercase();
            out.push(Transition::normal(
                "MaintenanceEnded",
                format!("{kind} maintenance{whose} is over: no maintenance is announced now"),
            ))
        }
        _ => {}
    }
    // What the operator did about the maintenance: announced once per maintenance.
    type Field = fn(&MaintenanceStatus) -> bool;
    let steps: [(&str, Field); 2] = [
        ("CheckpointRequested", |m| m.checkpoint_request_time.is_some()),
        (reasons::MAINTENANCE_STARTED_EARLY, |m| {
            m.start_request_time.is_some()
        }),
    ];
    if let Some(m) = &new.maintenance {
        let was = old.maintenance.as_ref().filter(|o| o.same_as(m));
        for (reason, done) in steps {
            if done(m) && !was.is_some_and(done) {
                out.push(Transition::normal(reason, m.describe()));
            }
        }
    }
    out
}
