//! What deletion does next: the queued resource first, then a node, each gone before the next,
//! and what the incarnations shared released last.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{QueuedResource, node, queued_resource_state};

use super::{Action, Observed, Plan, Verdict, doing};

/// What deletion does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupStep {
    /// Issue this delete.
    Delete(Action),
    /// A delete is in progress.
    Wait(String),
    /// Nothing is left in the cloud.
    Done,
}

/// Deletion: the queued resource first (force: its nodes go with it), then a node; each must be
/// gone before the finalizer is dropped.
pub fn plan_cleanup(observed: &Observed) -> CleanupStep {
    let qrs = std::iter::once(&observed.queued)
        .chain(&observed.other_queues)
        .chain(observed.replaced.iter().map(|(_, q)| q))
        .chain([&observed.previous_queued]);
    // Every slice's queued resource of a multislice is deleted before any is waited for.
    let mut qrs: Vec<&QueuedResource> = qrs.flatten().collect();
    qrs.sort_by_key(|q| is_qr_deleting(q));
    if let Some(qr) = qrs.first() {
        return if is_qr_deleting(qr) {
            CleanupStep::Wait(format!("queued resource {} is being deleted", qr.name))
        } else {
            CleanupStep::Delete(Action::DeleteQueuedResource(qr.name.clone()))
        };
    }
    match [&observed.node, &observed.previous_node]
        .into_iter()
        .flatten()
        .next()
    {
        Some(n) if n.state == node::State::Deleting => {
            CleanupStep::Wait(format!("node {} is being deleted", n.name))
        }
        Some(n) => CleanupStep::Delete(Action::DeleteNode(n.name.clone())),
        None => CleanupStep::Done,
    }
}

/// A deletion pass's plan (policy `Delete`): the next delete, a wait for one in progress, or,
/// once every incarnation is gone, the release of what they shared.
pub fn plan_deletion(observed: &Observed) -> Plan {
    match plan_cleanup(observed) {
        CleanupStep::Delete(action) => doing(action, deleting("deleting the cloud resources")),
        CleanupStep::Wait(message) => doing(Action::Nothing, deleting(message)),
        CleanupStep::Done => doing(
            Action::ReleaseShared,
            deleting("releasing what the slice's incarnations shared"),
        ),
    }
}

/// The verdict while the slice's cloud objects are being deleted.
pub fn deleting(message: impl Into<String>) -> Verdict {
    Verdict::new(
        TpuSlicePhase::Deleting,
        Progress::Reconciling,
        reasons::DELETING,
        message,
    )
}

/// The queued resource is being deleted.
pub(super) fn is_qr_deleting(qr: &QueuedResource) -> bool {
    matches!(
        qr.state.as_ref().map(|s| &s.state),
        Some(queued_resource_state::State::Deleting)
    )
}
