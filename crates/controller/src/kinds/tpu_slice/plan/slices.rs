//! Planning for a multislice provisioned as one queued resource per slice. A lost slice (its node
//! preempted, or its queued resource suspended by the TPU service) is replaced alone: its loss
//! is counted, its queued resource deleted, and a queued resource of its own asked for under the
//! slice's next name, while the other slices keep their nodes. No slice's workload runs until
//! every slice is READY: while one is replaced the coordinator's address is taken off the others' metadata
//! (their startup script stops the container and waits for it), and once all are READY every
//! node is told it again, so the run starts over on all slices from its last committed
//! checkpoint.
//!
//! Does not touch Kubernetes or Google Cloud.

use std::iter;

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::{MEGASCALE_COORDINATOR_METADATA, TpuSlicePhase},
};
use tpu_operator_gcp::tpu_v2::model::{Node, QueuedResource, node, queued_resource_state};

use super::{
    Action, CleanupStep, Input, Observed, OperationView, Plan, Requeue, Verdict, doing, is_qr_deleting,
    plan_absent, plan_cleanup, plan_multislice, prefix, queued, report,
};
use crate::kinds::tpu_slice::spec::{Desired, patched_metadata, slice_desired};

/// One slice's queued resource and node, as observed.
#[derive(Clone, Copy)]
struct Slice<'a> {
    queue: Option<&'a QueuedResource>,
    node: Option<&'a Node>,
}

/// The slice exists (not being deleted) and runs one queued resource per slice.
pub(super) fn plan(input: &Input<'_>) -> Plan {
    let slices = slices(input.observed);
    if let Some(plan) = given_up(input) {
        return plan;
    }
    if slices.iter().all(|s| s.queue.is_none()) {
        return plan_absent(input, Action::CreateSliceQueuedResource(0));
    }
    // The lost queued resource's deletion is started first, then the replacement (a name of its
    // own) is asked for while it is still being deleted, then the others are stopped: the
    // replacement's provisioning is the long wait, so it starts as early as it safely can.
    newly_lost(input, &slices)
        .or_else(|| failed_slice(input, &slices))
        .or_else(|| delete_lost(input))
        .or_else(|| replace(input, &slices))
        .or_else(|| stop_survivors(input, &slices))
        .unwrap_or_else(|| all_queued(input, &slices))
}

fn slices(o: &Observed) -> Vec<Slice<'_>> {
    let nodes = iter::once(o.node.as_ref())
        .chain(o.other_slices.iter().map(Option::as_ref))
        .chain(iter::repeat(None));
    iter::once(o.queued.as_ref())
        .chain(o.other_queues.iter().map(Option::as_ref))
        .zip(nodes)
        .map(|(queue, node)| Slice { queue, node })
        .collect()
}

/// What lost slice `s`, if it is lost: its node preempted or terminated, or its queued resource
/// suspended by the TPU service (capacity reclaimed).
fn lost(s: &Slice<'_>) -> Option<String> {
    use queued_resource_state::{State as Q, StateInitiator};
    if let Some(n) = s
        .node
        .filter(|n| matches!(n.state, node::State::Preempted | node::State::Terminated))
    {
        return Some(format!("{} (its node)", super::state_name(n)));
    }
    let state = s.queue?.state.as_ref()?;
    let by_service = state.state_initiator == StateInitiator::Service;
    (by_service && matches!(state.state, Q::Suspending | Q::Suspended)).then(|| {
        let name = state.state.name().unwrap_or("SUSPENDED");
        format!("{name} by the TPU service (capacity reclaimed)")
    })
}

/// Progress while a lost slice is replaced.
fn recreating(message: impl Into<String>) -> Verdict {
    Verdict::new(
        TpuSlicePhase::Recreating,
        Progress::Reconciling,
        reasons::RECREATING,
        message,
    )
}

fn restarts(input: &Input<'_>, k: usize) -> i32 {
    input.slice_restarts.get(k).copied().unwrap_or(0)
}

fn replacing(input: &Input<'_>, k: usize) -> bool {
    input.replacing.contains(&(k as i32))
}

/// One slice was lost more often than `maxSliceRestarts` allows (sticky: status keeps the count):
/// delete every queued resource as deletion does (the lost ones too), one per pass, so nothing
/// bills, and report the failure.
fn given_up(input: &Input<'_>) -> Option<Plan> {
    let max = input.max_slice_restarts();
    let k = input.slice_restarts.iter().position(|r| *r > max)?;
    let mut a = Verdict::new(
        TpuSlicePhase::Failed,
        Progress::Stalled,
        reasons::SLICE_RESTARTS_EXHAUSTED,
        format!(
            "slice {k} was lost {} times (spec.multislice.maxSliceRestarts = {max}): the run is given up; delete or change the TpuSlice to run again",
            restarts(input, k)
        ),
    );
    let cleanup = plan_cleanup(input.observed);
    if cleanup != CleanupStep::Done {
        if let Some(said) = a.kstatus.as_mut() {
            said.message.push_str("; deleting its queued resources");
        }
        a.requeue = Requeue::Active;
    }
    Some(match cleanup {
        CleanupStep::Delete(delete) => doing(delete, a),
        CleanupStep::Wait(_) | CleanupStep::Done => report(a),
    })
}

/// The first lost slice whose loss is not counted yet: count it (status only), which also
/// decides whether it may be replaced.
fn newly_lost(input: &Input<'_>, slices: &[Slice<'_>]) -> Option<Plan> {
    let (k, what) = slices
        .iter()
        .enumerate()
        .filter(|(k, _)| !replacing(input, *k))
        .find_map(|(k, s)| lost(s).map(|what| (k, what)))?;
    let (count, max) = (restarts(input, k) + 1, input.max_slice_restarts());
    let a = if count > max {
        Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reasons::SLICE_RESTARTS_EXHAUSTED,
            format!(
                "slice {k} is {what} and was already replaced {} time(s) (spec.multislice.maxSliceRestarts = {max}): giving up",
                count - 1
            ),
        )
    } else {
        let others = slices.len() - 1;
        recreating(format!(
            "slice {k} is {what}: replacing it alone ({count} of at most {max}); the other {others} slices keep their nodes"
        ))
    };
    Some(doing(Action::RecordSliceLoss(k), a.requeue(Requeue::Active)))
}

/// A slice's queued resource FAILED (no capacity before `validUntil`, or refused): the run cannot
/// start, so it is reported as that failure and the other slices' queued resources are deleted,
/// one per pass, so that nothing bills for a run that will not start.
fn failed_slice(input: &Input<'_>, slices: &[Slice<'_>]) -> Option<Plan> {
    let failed = |q: &QueuedResource| {
        q.state
            .as_ref()
            .is_some_and(|s| s.state == queued_resource_state::State::Failed)
    };
    let (k, q) = slices
        .iter()
        .enumerate()
        .find_map(|(k, s)| s.queue.filter(|q| failed(q)).map(|q| (k, q)))?;
    let mut plan = queued::plan_queued(input, q);
    prefix(&mut plan.verdict, format_args!("slice {k}: "));
    let other = slices
        .iter()
        .filter_map(|s| s.queue)
        .find(|o| !failed(o) && !is_qr_deleting(o));
    if let Some(other) = other {
        plan.action = Action::DeleteQueuedResource(other.name.clone());
        if let Some(said) = plan.verdict.kstatus.as_mut() {
            said.message
                .push_str("; deleting the other slices' queued resources");
        }
        plan.verdict.requeue = Requeue::Active;
    }
    Some(plan)
}

/// The queued resource is ACTIVE (its capacity granted and provisioned).
fn active(q: &QueuedResource) -> bool {
    q.state
        .as_ref()
        .is_some_and(|st| st.state == queued_resource_state::State::Active)
}

/// While a slice is not up (replaced, or missing for another reason), the first READY node that
/// still carries the coordinator's address has it taken off: its startup script stops the
/// container (a run missing a slice cannot go on) and waits until every slice is told the
/// coordinator again.
fn stop_survivors(input: &Input<'_>, slices: &[Slice<'_>]) -> Option<Plan> {
    let up = |s: &Slice<'_>| s.node.is_some() && s.queue.is_some_and(active);
    if slices.iter().all(up) {
        return None;
    }
    let (k, n) = slices.iter().enumerate().find_map(|(k, s)| {
        s.node
            .filter(|n| {
                n.state == node::State::Ready && n.metadata.contains_key(MEGASCALE_COORDINATOR_METADATA)
            })
            .map(|n| (k, n))
    })?;
    let d = slice_desired(input.desired, k, None);
    let mut metadata = patched_metadata(&d, &n.metadata);
    // Taken off even where the node's managed-key list does not name it.
    metadata.remove(MEGASCALE_COORDINATOR_METADATA);
    let a = recreating(format!(
        "a slice is being replaced: stopping slice {k}'s workload until every slice is READY again"
    ));
    Some(doing(
        Action::PatchSliceNode {
            node: n.name.clone(),
            mask: vec!["metadata"],
            patch: Desired { metadata, ..d },
        },
        a.requeue(Requeue::Active),
    ))
}

/// A counted loss whose queued resource is still there (and not being deleted yet): delete it.
fn delete_lost(input: &Input<'_>) -> Option<Plan> {
    let (k, q) = input
        .observed
        .replaced
        .iter()
        .find_map(|(k, q)| q.as_ref().filter(|q| !is_qr_deleting(q)).map(|q| (*k, q)))?;
    let message = format!("slice {k}: deleting the queued resource it was lost in");
    Some(doing(
        Action::DeleteQueuedResource(q.name.clone()),
        recreating(message),
    ))
}

/// A slice without its queued resource is asked for it: a lost one under its next name once the
/// queued resource it was lost in is being deleted (so the two never both hold capacity), and a
/// slice missing for another reason likewise (slices are asked for one per pass).
fn replace(input: &Input<'_>, slices: &[Slice<'_>]) -> Option<Plan> {
    let k = slices.iter().position(|s| s.queue.is_none())?;
    let create = Action::CreateSliceQueuedResource(k);
    let mut plan = plan_absent(input, create.clone());
    prefix(&mut plan.verdict, format_args!("slice {k}: "));
    if replacing(input, k) {
        plan.verdict.phase = TpuSlicePhase::Recreating;
        // The operation running is the lost queued resource's deletion (or a patch), not this
        // slice's create: a replacement is asked for at once.
        if matches!(input.observed.operation, Some(OperationView::Running)) {
            plan = doing(
                create,
                recreating(format!("slice {k}: asking for its replacement")),
            );
        }
    }
    Some(plan)
}

/// Every slice's queued resource exists: the first not ACTIVE with its node says what the run
/// waits for; once all are, the nodes decide as for any multislice.
fn all_queued(input: &Input<'_>, slices: &[Slice<'_>]) -> Plan {
    for (k, s) in slices.iter().enumerate() {
        let Some(q) = s.queue else { continue };
        let granted = active(q);
        if granted && s.node.is_some() {
            continue;
        }
        let mut plan = match granted {
            true => queued::in_queue(&queued_resource_state::State::Active, "ACTIVE").report(),
            false => queued::plan_queued(input, q),
        };
        prefix(&mut plan.verdict, format_args!("slice {k}: "));
        return plan;
    }
    match slices.first().and_then(|s| s.node) {
        Some(first) => plan_multislice(input, first),
        None => queued::in_queue(&queued_resource_state::State::Active, "ACTIVE").report(),
    }
}

/// `status.sliceRestarts` and `status.replacingSlices` after this pass: a counted loss adds one
/// to its slice and marks it replaced; a replaced slice whose queued resource is there again
/// (asked for anew, not lost) is no longer pending.
pub fn slice_restarts(
    old_restarts: &[i32],
    old_replacing: &[i32],
    observed: &Observed,
    action: &Action,
) -> (Vec<i32>, Vec<i32>) {
    let mut counts = old_restarts.to_vec();
    let mut replacing = old_replacing.to_vec();
    if let Action::RecordSliceLoss(k) = action {
        if counts.len() <= *k {
            counts.resize(k + 1, 0);
        }
        counts[*k] += 1;
        replacing.push(*k as i32);
    }
    let slices = slices(observed);
    // The replacement is there (not lost) and the queued resource it replaces is going or gone.
    let asked_anew = |k: &i32| {
        let Ok(k) = usize::try_from(*k) else { return false };
        let old_going = observed
            .replaced
            .iter()
            .filter(|(slice, _)| *slice == k)
            .all(|(_, q)| q.as_ref().is_none_or(is_qr_deleting));
        let s = slices.get(k);
        old_going && s.is_some_and(|s| s.queue.is_some_and(|q| !is_qr_deleting(q)) && lost(s).is_none())
    };
    replacing.retain(|k| !asked_anew(k));
    replacing.sort_unstable();
    replacing.dedup();
    (counts, replacing)
}
