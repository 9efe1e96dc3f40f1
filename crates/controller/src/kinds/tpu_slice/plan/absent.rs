//! The slice's node (or queued resource) does not exist: create it, unless the incarnation
//! before it is still there (go back to its granted request, or delete it first), the spec
//! adopts a node that is gone, or the last create failed in a way a retry does not fix.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::node;

use super::{Action, Input, Plan, Verdict, doing, is_qr_deleting, on_create_error, report};
use crate::kinds::tpu_slice::observe::OperationView;

/// Neither the current node nor its queued resource exists.
pub(super) fn plan_absent(input: &Input<'_>, create: Action) -> Plan {
    use TpuSlicePhase as P;
    if input.names.adopted {
        return report(Verdict::new(
            P::Failed,
            Progress::Stalled,
            reasons::NOT_FOUND,
            format!(
                "node {} named by spec.adoptNodeId does not exist",
                input.names.current.node
            ),
        ));
    }
    if let Some(plan) = previous_incarnation(input) {
        return plan;
    }
    let observed = input.observed;
    match &observed.operation {
        Some(OperationView::Running) => {
            return report(Verdict::new(
                P::Provisioning,
                Progress::Reconciling,
                reasons::CREATING,
                "create operation in progress",
            ));
        }
        Some(OperationView::Failed(err)) => {
            if let Some(a) = on_create_error(err) {
                // A quota failure is Stalled but still retried (slowly): a raised quota needs
                // no change to the object.
                let said = a.verdict.kstatus.as_ref();
                let retry = said.is_some_and(|k| {
                    k.progress == Progress::Reconciling || k.reason == reasons::QUOTA_EXCEEDED
                });
                return a.plan(if retry { create } else { Action::Nothing });
            }
        }
        Some(OperationView::Succeeded | OperationView::Gone | OperationView::Unread) | None => {}
    }
    let (phase, message) = match create {
        Action::CreateQueuedResource | Action::CreateSliceQueuedResource(_) => {
            (P::Queued, "requesting a queued resource")
        }
        _ => (P::Provisioning, "creating the TPU node"),
    };
    let phase = if input.recreations > 0 {
        P::Recreating
    } else {
        phase
    };
    doing(
        create,
        Verdict::new(phase, Progress::Reconciling, reasons::CREATING, message),
    )
}

/// The incarnation before this one is still there (after a preemption, or a move along the
/// capacity plan): go back to its request if it was granted just after the move, else delete it
/// first.
fn previous_incarnation(input: &Input<'_>) -> Option<Plan> {
    use TpuSlicePhase as P;
    let observed = input.observed;
    let moved = input.spec_moved;
    if let Some(prev) = observed.previous_queued.as_ref().filter(|q| moved && granted(q)) {
        return Some(doing(
            Action::ReturnToGranted,
            Verdict::new(
                P::Provisioning,
                Progress::Reconciling,
                reasons::PROVISIONING,
                format!(
                    "queued resource {} was granted just after the slice moved on: going back to it",
                    prev.name
                ),
            ),
        ));
    }
    if let Some(prev) = &observed.previous_queued {
        return Some(previous_step(
            is_qr_deleting(prev),
            Action::DeleteQueuedResource(prev.name.clone()),
            moved,
        ));
    }
    if let Some(prev) = &observed.previous_node {
        return Some(previous_step(
            prev.state == node::State::Deleting,
            Action::DeleteNode(prev.name.clone()),
            moved,
        ));
    }
    None
}

/// A queued resource whose capacity was granted (provisioning or running its nodes).
fn granted(qr: &tpu_operator_gcp::tpu_v2::model::QueuedResource) -> bool {
    use tpu_operator_gcp::tpu_v2::model::queued_resource_state::State;
    matches!(
        qr.state.as_ref().map(|s| &s.state),
        Some(State::Provisioning | State::Active)
    )
}

/// A recreation waits for the previous incarnation to be deleted before creating the next one,
/// so that one slice never holds two cloud objects; so does a move along the capacity plan
/// (`moved`), whose previous incarnation is the request left on the rung before.
fn previous_step(deleting: bool, delete: Action, moved: bool) -> Plan {
    let message = if moved {
        "deleting the request left on the capacity plan's previous rung before asking the next"
    } else {
        "deleting the preempted incarnation before recreating the slice"
    };
    let a = Verdict::new(
        TpuSlicePhase::Recreating,
        Progress::Reconciling,
        reasons::RECREATING,
        message,
    );
    doing(if deleting { Action::Nothing } else { delete }, a)
}
