//! The Events a pass publishes: one for each real transition between the old status and the new
//! (a create requested, a preemption, Ready, Stalled, a stockout, Kueue's decisions, deletion),
//! never one for a pass that changed nothing.

use tpu_operator_api::{
    conditions::{describing, find_condition, is_true, reasons, types},
    tpu_slice::{TpuSlicePhase, TpuSliceStatus},
};

use crate::reconcile::report::Transition;

/// Events for what changed between two statuses (never for a pass that changed nothing).
pub fn transitions(old: &TpuSliceStatus, new: &TpuSliceStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    let message = new.message.clone().unwrap_or_default();
    if new.pending_operation.is_some() && new.pending_operation != old.pending_operation {
        let what = new.queued_resource_name.as_ref().or(new.node_name.as_ref());
        if new.phase != TpuSlicePhase::Deleting && old.node_name.is_none() && what.is_some() {
            out.push(Transition::normal(
                "Created",
                format!("requested {}", what.cloned().unwrap_or_default()),
            ));
        }
    }
    if new.recreations > old.recreations {
        out.push(Transition::warning(reasons::PREEMPTED, message.clone()));
    }
    if new.plan_moves() > old.plan_moves() {
        out.push(Transition::normal(
            reasons::MOVED_ON_CAPACITY_PLAN,
            message.clone(),
        ));
    }
    let became = |t: &str| is_true(&new.conditions, t) && !is_true(&old.conditions, t);
    if became(types::READY) {
        out.push(Transition::normal("Ready", message.clone()));
    }
    if became(types::STALLED) {
        // Reasons that ask a person for something specific keep their name in the Event.
        let reason = match find_condition(&new.conditions, types::STALLED).map(|c| c.reason.as_str()) {
            Some(reasons::POLICY_DENIED) => reasons::POLICY_DENIED,
            Some(reasons::QUOTA_EXCEEDED) => reasons::QUOTA_EXCEEDED,
            Some(reasons::INVALID_SPEC) => reasons::INVALID_SPEC,
            Some(reasons::PERMISSION_DENIED) => reasons::PERMISSION_DENIED,
            Some(reasons::CREDENTIALS_UNAVAILABLE) => reasons::CREDENTIALS_UNAVAILABLE,
            _ => reasons::FAILED,
        };
        out.push(Transition::warning(reason, message.clone()));
    }
    // A stockout waits as `WaitingForCapacity` (the wait's own Warning); what made it wait is
    // named too, so every create failure has an Event of its own reason.
    let capacity = |s: &TpuSliceStatus| {
        find_condition(&s.conditions, types::CAPACITY_AVAILABLE)
            .filter(|c| c.status == "False")
            .map(|c| c.reason.clone())
    };
    if capacity(new).as_deref() == Some(reasons::STOCKOUT)
        && capacity(old).as_deref() != Some(reasons::STOCKOUT)
    {
        out.push(Transition::warning(reasons::STOCKOUT, message.clone()));
    }
    out.extend(kueue_transitions(old, new, &message));
    if new.phase == TpuSlicePhase::Deleting && old.phase != TpuSlicePhase::Deleting {
        out.push(Transition::normal(reasons::DELETING, message));
    }
    out
}

/// Kueue's decisions as Events: `Evicted` (Warning: the node is deleted) once per eviction,
/// `QueuedInKueue` when the slice starts waiting, `Admitted` when Kueue lets it run.
fn kueue_transitions(old: &TpuSliceStatus, new: &TpuSliceStatus, message: &str) -> Vec<Transition> {
    let Some(now) = new.kueue.as_ref() else {
        return Vec::new();
    };
    let reason = |s: &TpuSliceStatus| describing(&s.conditions).map(|c| c.reason.clone());
    let entered = |r: &str| reason(new).as_deref() == Some(r) && reason(old).as_deref() != Some(r);
    let mut out = Vec::new();
    if entered(reasons::EVICTED) {
        out.push(Transition::warning(reasons::EVICTED, message.to_string()));
    }
    if entered(reasons::QUEUED_IN_KUEUE) {
        out.push(Transition::normal(reasons::QUEUED_IN_KUEUE, message.to_string()));
    }
    if now.admitted && !old.kueue.as_ref().is_some_and(|k| k.admitted) {
        let queue = now.cluster_queue.clone().unwrap_or_default();
        out.push(Transition::normal(
            "Admitted",
            format!("Kueue admitted Workload {} in ClusterQueue {queue}", now.workload),
        ));
    }
    out
}
