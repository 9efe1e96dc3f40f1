//! The Kueue gate (pure): a slice whose Workload Kueue has not admitted holds nothing in the
//! cloud. Pending: the Workload is created if missing, and a node that exists anyway (the label
//! was added to a running slice) is deleted. Evicted: the node is deleted whatever the deletion
//! policy, the stop is counted (`RecordSuspension`: the next admission creates a new node with a
//! request id of its own), then the reservation is released for Kueue to give to another.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};

use super::{Action, Input, Plan, Requeue, Verdict, cleanup::CleanupStep, doing, plan_cleanup, report};
use crate::kueue::Gate;

/// The plan while Kueue does not let the slice run; `None`: admitted (or not gated), go on.
pub(super) fn gated(input: &Input<'_>) -> Option<Plan> {
    let (reason, why) = input.queue?.holding()?;
    let stopping =
        |message: String| Verdict::new(TpuSlicePhase::Deleting, Progress::Reconciling, reason, message);
    Some(match plan_cleanup(input.observed) {
        CleanupStep::Delete(action) => doing(
            action,
            stopping(format!("{why}; deleting the node so that nothing bills")),
        ),
        CleanupStep::Wait(message) => report(stopping(format!("{why}; {message}"))),
        CleanupStep::Done if input.ran_node && !input.queue_stopped => doing(
            Action::RecordSuspension,
            queued_for(reason, format!("{why}; the node is gone")),
        ),
        CleanupStep::Done => after_stop(input, reason, why),
    })
}

/// Nothing bills (and any stop is counted): create the Workload, release the eviction, or wait.
fn after_stop(input: &Input<'_>, reason: &'static str, why: String) -> Plan {
    let queued = input.queue.expect("gated checked it");
    match (&queued.gate, &queued.priority) {
        (Gate::Missing, Err(message)) => report(Verdict::new(
            TpuSlicePhase::Pending,
            Progress::Stalled,
            reasons::PRIORITY_CLASS_NOT_FOUND,
            message.clone(),
        )),
        (Gate::Missing, Ok(_)) => doing(
            Action::CreateWorkload,
            queued_for(
                reason,
                format!(
                    "Workload {} created in LocalQueue {}; waiting for Kueue to admit it",
                    queued.workload, queued.local_queue
                ),
            ),
        ),
        (Gate::Foreign { .. }, _) => doing(
            Action::DeleteWorkload,
            queued_for(reason, format!("{why}; deleting it to write the slice's own")),
        ),
        (Gate::Evicted { .. }, _) => doing(
            Action::ReleaseWorkload,
            queued_for(
                reason,
                format!("{why}; quota released, waiting to be admitted again"),
            ),
        ),
        _ => report(queued_for(reason, why)),
    }
}

/// Queued in Kueue: `Reconciling` (the wait is progress, not a failure), looked at again at the
/// capacity interval for the position; an admission wakes the slice through its Workload watch.
fn queued_for(reason: &'static str, message: String) -> Verdict {
    Verdict::new(TpuSlicePhase::Queued, Progress::Reconciling, reason, message).requeue(Requeue::Capacity)
}
