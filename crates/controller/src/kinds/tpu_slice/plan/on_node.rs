//! Planning once the current node exists: its state and health decide; READY nodes get their
//! labels / metadata / tags corrected; PREEMPTED ones are recreated within the limit.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{Node, node};

use super::{
    Action, Input, OperationView, Plan, Requeue, Verdict, doing, drift_mask, immutable_drift, report,
};
use crate::kinds::tpu_slice::{early_start, maintenance};
use tpu_operator_api::tpu_slice::CHECKPOINT_REQUEST_METADATA;

/// The current node exists.
pub(super) fn plan_node(input: &Input<'_>, n: &Node) -> Plan {
    use TpuSlicePhase as P;
    use node::State as S;
    let mut plan = match n.state {
        S::Ready => plan_ready(input, n),
        S::Stopped => doing(
            Action::StartNode,
            Verdict::new(
                P::Degraded,
                Progress::Reconciling,
                reasons::PROVISIONING,
                "node is STOPPED: starting it",
            ),
        ),
        S::Preempted | S::Terminated => plan_preempted(input, &state_name(n)),
        S::Unknown => report(Verdict::new(
            P::Failed,
            Progress::Stalled,
            reasons::NODE_UNHEALTHY,
            "node is UNKNOWN after a failed repair; delete the TpuSlice to replace it",
        )),
        _ => report(waiting_on(n)),
    };
    if n.state != S::Creating {
        plan.details.capacity = Some(!matches!(n.state, S::Preempted | S::Terminated));
    }
    plan.details.drift = immutable_drift(input, n);
    plan
}

/// A node in a state that ends without the operator (being created, started, repaired, held by
/// the TPU service, deleted by someone else), or one not reported or not recognized yet: say so
/// and look again, soon while it changes, at the capacity interval while the service holds it.
fn waiting_on(n: &Node) -> Verdict {
    use TpuSlicePhase as P;
    use node::State as S;
    let (reason, phase, requeue, what) = match n.state {
        S::Creating => (
            reasons::CREATING,
            P::Provisioning,
            Requeue::Active,
            "being created",
        ),
        S::Starting => (
            reasons::PROVISIONING,
            P::Provisioning,
            Requeue::Active,
            "starting",
        ),
        S::Restarting | S::Reimaging | S::Repairing => (
            reasons::NODE_UNHEALTHY,
            P::Degraded,
            Requeue::Active,
            "waiting for it to come back",
        ),
        S::Stopping => (
            reasons::PROVISIONING,
            P::Degraded,
            Requeue::Active,
            "will be started once stopped",
        ),
        S::Hiding | S::Hidden | S::Unhiding => (
            reasons::NODE_UNHEALTHY,
            P::Degraded,
            Requeue::Capacity,
            "held by the TPU service",
        ),
        S::Deleting => (
            reasons::RECREATING,
            P::Recreating,
            Requeue::Active,
            "deleted outside the operator; it is recreated once gone",
        ),
        S::Unspecified => (
            reasons::PROVISIONING,
            P::Provisioning,
            Requeue::Capacity,
            "state not reported yet",
        ),
        _ => (
            reasons::PROVISIONING,
            P::Degraded,
            Requeue::Capacity,
            "unrecognized state",
        ),
    };
    let message = format!("node is {}: {what}", state_name(n));
    Verdict::new(phase, Progress::Reconciling, reason, message).requeue(requeue)
}

/// What a READY node's announced maintenance asks for now: its start once the asked checkpoint
/// is committed ([`early_start::start_due`]), or the patch asking for it ([`maintenance::checkpoint_due`]).
pub(super) fn maintenance_step(input: &Input<'_>, n: &Node) -> Option<Action> {
    if early_start::start_due(n, input.observed.committed_checkpoint.as_deref()) {
        return Some(Action::PerformMaintenance {
            node: n.name.clone(),
            queued: queue_of(input, n),
        });
    }
    let value = maintenance::checkpoint_due(input.spec, n, input.now)?;
    let mut metadata: std::collections::BTreeMap<String, String> =
        n.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    metadata.insert(CHECKPOINT_REQUEST_METADATA.to_string(), value);
    Some(Action::RequestCheckpoint {
        node: n.name.clone(),
        metadata,
    })
}

/// The queued resource holding node `n`, through which Google maintains it: its slice's own
/// in a multislice of one per slice, else the slice's; `None` for a node of its own.
fn queue_of(input: &Input<'_>, n: &Node) -> Option<String> {
    let current = &input.names.current;
    if !current.per_slice_queues() {
        return current.queued.clone();
    }
    let k = std::iter::once(&current.node)
        .chain(&current.other_slices)
        .position(|name| *name == n.name)?;
    current.slice_queue(k).map(str::to_string)
}

/// READY: Ready when also HEALTHY; keeps labels / metadata / tags in sync.
fn plan_ready(input: &Input<'_>, n: &Node) -> Plan {
    use TpuSlicePhase as P;
    use node::Health as H;
    let verdict = match n.health {
        H::Healthy => Verdict::new(
            P::Ready,
            Progress::Ready,
            reasons::NODE_READY,
            "node is READY and HEALTHY",
        ),
        H::Unspecified => Verdict::new(
            P::Provisioning,
            Progress::Reconciling,
            reasons::PROVISIONING,
            "node is READY; waiting for its health to be reported",
        ),
        // Maintenance is not a failure of the node: it says so, and a pipeline keeps its run
        // `Training` through it.
        H::UnhealthyMaintenance => Verdict::new(
            P::Degraded,
            Progress::Reconciling,
            reasons::MAINTENANCE_ONGOING,
            "node is READY but under maintenance (UNHEALTHY_MAINTENANCE); its workload starts again when it is over",
        )
        .requeue(Requeue::Capacity),
        H::Timeout | H::UnhealthyTensorflow => Verdict::new(
            P::Degraded,
            Progress::Reconciling,
            reasons::NODE_UNHEALTHY,
            format!("node is READY but {}", health_name(n)),
        )
        .requeue(Requeue::Capacity),
        _ => Verdict::new(
            P::Degraded,
            Progress::Reconciling,
            reasons::NODE_UNHEALTHY,
            format!("node is READY with unrecognized health {}", health_name(n)),
        )
        .requeue(Requeue::Capacity),
    };
    let operation_running = matches!(input.observed.operation, Some(OperationView::Running));
    let mask = drift_mask(input.desired, n);
    if operation_running || mask.is_empty() {
        let mut a = verdict;
        if operation_running && a.progress() == Some(Progress::Ready) {
            a.requeue = Requeue::Active;
        }
        if let Some(ask) = maintenance_step(input, n).filter(|_| !operation_running) {
            return doing(ask, a.requeue(Requeue::Active));
        }
        return report(a);
    }
    doing(Action::PatchNode(mask), verdict.requeue(Requeue::Active))
}

/// PREEMPTED / TERMINATED (or a queued resource suspended by the service): recreate within the
/// limit, else stall.
pub(super) fn plan_preempted(input: &Input<'_>, what: &str) -> Plan {
    use TpuSlicePhase as P;
    if input.names.adopted {
        return report(Verdict::new(
            P::Preempted,
            Progress::Stalled,
            reasons::PREEMPTED,
            format!("adopted node is {what}; adopted nodes are not recreated"),
        ));
    }
    let max = input.max_recreations();
    let what = if input.spec.preemptible() {
        what.to_string()
    } else {
        format!("{what} (maintenance or end of life of on-demand capacity)")
    };
    if input.recreations >= max {
        return report(Verdict::new(
            P::Failed,
            Progress::Stalled,
            reasons::RECREATIONS_EXHAUSTED,
            format!(
                "slice is {what} and was already recreated {} time(s) (spec.preemption.maxRecreations = {max})",
                input.recreations
            ),
        ));
    }
    doing(
        Action::RecordPreemption,
        Verdict::new(
            P::Preempted,
            Progress::Reconciling,
            reasons::RECREATING,
            format!(
                "slice is {what}: recreating it ({} of at most {max})",
                input.recreations + 1
            ),
        ),
    )
}

/// `READY`, `PREEMPTED`, ... as GCP spells it.
pub fn state_name(n: &Node) -> String {
    n.state.name().unwrap_or("UNRECOGNIZED").to_string()
}

pub fn health_name(n: &Node) -> String {
    n.health.name().unwrap_or("UNRECOGNIZED").to_string()
}
