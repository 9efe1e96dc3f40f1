//! Planning once the current node exists: its state and health decide; READY nodes get their
//! labels / metadata / tags corrected; PREEMPTED ones are recreated within the limit.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{Node, node};

use super::{Action, Assessment, Input, OperationView, Plan, Requeue, drift_mask, immutable_drift};
use crate::kinds::tpu_slice::{early_start, maintenance, spec::Desired};
use tpu_operator_api::tpu_slice::CHECKPOINT_REQUEST_METADATA;

/// The current node exists.
pub(super) fn plan_node(input: &Input<'_>, n: &Node) -> Plan {
    use TpuSlicePhase as P;
    use node::State as S;
    let mut plan = match n.state {
        S::Ready => plan_ready(input, n),
        S::Stopped => Plan::new(
            Action::StartNode,
            Assessment::new(
                Progress::Reconciling,
                reasons::PROVISIONING,
                P::Degraded,
                "node is STOPPED: starting it",
            ),
        ),
        S::Preempted | S::Terminated => plan_preempted(input, &state_name(n)),
        S::Unknown => Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::NODE_UNHEALTHY,
            P::Failed,
            "node is UNKNOWN after a failed repair; delete the TpuSlice to replace it",
        )),
        _ => Plan::report(waiting_on(n)),
    };
    if n.state != S::Creating {
        plan.assessment.capacity = Some(!matches!(n.state, S::Preempted | S::Terminated));
    }
    plan.assessment.drift = immutable_drift(input, n);
    plan
}

/// A node in a state that ends without the operator (being created, started, repaired, held by
/// the TPU service, deleted by someone else), or one not reported or not recognized yet: say so
/// and look again, soon while it changes, at the capacity interval while the service holds it.
fn waiting_on(n: &Node) -> Assessment {
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
    Assessment::new(Progress::Reconciling, reason, phase, message).requeue(requeue)
}

/// Multislice, its queued resource ACTIVE: all or nothing. Every node must exist and be READY
/// and HEALTHY for the slice to be Ready; a PREEMPTED / TERMINATED node is a preemption of the
/// whole run (the queued resource is recreated, [`plan_preempted`]); otherwise the first node
/// that is not there yet decides what is reported. Once all are READY each node gets its slice
/// id and the coordinator's address (slice 0 host 0, `<ip>:MEGASCALE_PORT`) in its metadata,
/// one `nodes.patch` per pass, and drift of any node is corrected the same way.
pub(super) fn plan_multislice(input: &Input<'_>, first: &Node) -> Plan {
    let nodes: Vec<Option<&Node>> = std::iter::once(Some(first))
        .chain(input.observed.other_slices.iter().map(Option::as_ref))
        .collect();
    let total = nodes.len();
    let mut plan = plan_all_slices(input, &nodes);
    if plan.assessment.progress == Progress::Ready {
        plan.assessment.capacity = Some(true);
    }
    plan.assessment.drift = immutable_drift(input, first);
    if plan.assessment.progress != Progress::Ready {
        plan.assessment.message = format!("multislice of {total}: {}", plan.assessment.message);
    }
    plan
}

fn plan_all_slices(input: &Input<'_>, nodes: &[Option<&Node>]) -> Plan {
    if let Some(k) = nodes.iter().position(Option::is_none) {
        return Plan::report(Assessment::new(
            Progress::Reconciling,
            reasons::PROVISIONING,
            TpuSlicePhase::Provisioning,
            format!("queued resource is ACTIVE; the node of slice {k} is not visible yet"),
        ));
    }
    let nodes: Vec<&Node> = nodes.iter().flatten().copied().collect();
    if let Some(plan) = slice_preempted(input, &nodes).or_else(|| slice_not_ready(input, &nodes)) {
        return plan;
    }
    let Some(ip) = nodes[0]
        .network_endpoints
        .first()
        .map(|e| e.ip_address.as_str())
        .filter(|ip| !ip.is_empty())
    else {
        return Plan::report(Assessment::new(
            Progress::Reconciling,
            reasons::PROVISIONING,
            TpuSlicePhase::Provisioning,
            "slice 0 reports no worker address yet",
        ));
    };
    let coordinator = format!("{ip}:{}", crate::kinds::tpu_slice::spec::MEGASCALE_PORT);
    tell_slices(input, &nodes, &coordinator)
}

/// A PREEMPTED / TERMINATED node of any slice is a preemption of the whole multislice.
fn slice_preempted(input: &Input<'_>, nodes: &[&Node]) -> Option<Plan> {
    use node::State as S;
    let (k, n) = nodes
        .iter()
        .enumerate()
        .find(|(_, n)| matches!(n.state, S::Preempted | S::Terminated))?;
    let mut p = plan_preempted(
        input,
        &format!(
            "{} (the node of slice {k}; a multislice runs all or nothing)",
            state_name(n)
        ),
    );
    p.assessment.capacity = Some(false);
    Some(p)
}

/// The first node that is not READY and HEALTHY decides what is reported, as a plain node
/// would; of its actions only starting slice 0's node is kept.
fn slice_not_ready(input: &Input<'_>, nodes: &[&Node]) -> Option<Plan> {
    use node::{Health as H, State as S};
    let (k, n) = nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.state != S::Ready || n.health != H::Healthy)?;
    let mut p = plan_node(input, n);
    // Only slice 0's node is the one `StartNode` acts on; a READY but unhealthy node waits
    // (its metadata is compared below, once all are healthy).
    if !(k == 0 && p.action == Action::StartNode) {
        p.action = Action::Nothing;
    }
    p.assessment.message = format!("slice {k}: {}", p.assessment.message);
    Some(p)
}

/// Every node is READY and HEALTHY: the first one whose labels / metadata / tags differ from its
/// slice's (slice id and coordinator included) is patched, one per pass; Ready once none does.
/// While an operation runs nothing is patched, and the slice is looked at again soon.
fn tell_slices(input: &Input<'_>, nodes: &[&Node], coordinator: &str) -> Plan {
    let total = nodes.len();
    let operation_running = matches!(input.observed.operation, Some(OperationView::Running));
    for (k, n) in nodes.iter().enumerate() {
        let d = crate::kinds::tpu_slice::spec::slice_desired(input.desired, k, Some(coordinator));
        let mask = drift_mask(&d, n);
        if mask.is_empty() {
            continue;
        }
        let assessment = if told(n, k, coordinator) {
            ready(total).requeue(Requeue::Active)
        } else {
            Assessment::new(
                Progress::Reconciling,
                reasons::PROVISIONING,
                TpuSlicePhase::Provisioning,
                format!(
                    "all {total} nodes are READY: telling slice {k} its slice id and the coordinator {coordinator}"
                ),
            )
        };
        if operation_running {
            return Plan::report(assessment.requeue(Requeue::Active));
        }
        let metadata = crate::kinds::tpu_slice::spec::patched_metadata(&d, &n.metadata);
        let patch = Desired { metadata, ..d };
        return Plan::new(
            Action::PatchSliceNode {
                node: n.name.clone(),
                mask,
                patch,
            },
            assessment,
        );
    }
    let a = ready(total);
    if operation_running {
        return Plan::report(a.requeue(Requeue::Active));
    }
    match nodes.iter().find_map(|n| maintenance_step(input, n)) {
        Some(ask) => Plan::new(ask, a.requeue(Requeue::Active)),
        None => Plan::report(a),
    }
}

/// What a READY node's announced maintenance asks for now: its start once the asked checkpoint
/// is committed ([`early_start::start_due`]), or the patch asking for it ([`maintenance::checkpoint_due`]).
fn maintenance_step(input: &Input<'_>, n: &Node) -> Option<Action> {
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

/// Node `n` of slice `k` already carries its slice id and the coordinator's address.
fn told(n: &Node, k: usize, coordinator: &str) -> bool {
    n.metadata
        .get(tpu_operator_api::tpu_slice::MEGASCALE_COORDINATOR_METADATA)
        .is_some_and(|c| c == coordinator)
        && n.metadata
            .get(tpu_operator_api::tpu_slice::MEGASCALE_SLICE_ID_METADATA)
            .is_some_and(|id| id == &k.to_string())
}

fn ready(total: usize) -> Assessment {
    Assessment::new(
        Progress::Ready,
        reasons::NODE_READY,
        TpuSlicePhase::Ready,
        format!("all {total} slices of the multislice are READY and HEALTHY"),
    )
}

/// READY: Ready when also HEALTHY; keeps labels / metadata / tags in sync.
fn plan_ready(input: &Input<'_>, n: &Node) -> Plan {
    use TpuSlicePhase as P;
    use node::Health as H;
    let assessment = match n.health {
        H::Healthy => Assessment::new(
            Progress::Ready,
            reasons::NODE_READY,
            P::Ready,
            "node is READY and HEALTHY",
        ),
        H::Unspecified => Assessment::new(
            Progress::Reconciling,
            reasons::PROVISIONING,
            P::Provisioning,
            "node is READY; waiting for its health to be reported",
        ),
        // Maintenance is not a failure of the node: it says so, and a pipeline keeps its run
        // `Training` through it.
        H::UnhealthyMaintenance => Assessment::new(
            Progress::Reconciling,
            reasons::MAINTENANCE_ONGOING,
            P::Degraded,
            "node is READY but under maintenance (UNHEALTHY_MAINTENANCE); its workload starts again when it is over",
        )
        .requeue(Requeue::Capacity),
        H::Timeout | H::UnhealthyTensorflow => Assessment::new(
            Progress::Reconciling,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
            format!("node is READY but {}", health_name(n)),
        )
        .requeue(Requeue::Capacity),
        _ => Assessment::new(
            Progress::Reconciling,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
            format!("node is READY with unrecognized health {}", health_name(n)),
        )
        .requeue(Requeue::Capacity),
    };
    let operation_running = matches!(input.observed.operation, Some(OperationView::Running));
    let mask = drift_mask(input.desired, n);
    if operation_running || mask.is_empty() {
        let mut a = assessment;
        if operation_running && a.progress == Progress::Ready {
            a.requeue = Requeue::Active;
        }
        if let Some(ask) = maintenance_step(input, n).filter(|_| !operation_running) {
            return Plan::new(ask, a.requeue(Requeue::Active));
        }
        return Plan::report(a);
    }
    Plan::new(Action::PatchNode(mask), assessment.requeue(Requeue::Active))
}

/// PREEMPTED / TERMINATED (or a queued resource suspended by the service): recreate within the
/// limit, else stall.
pub(super) fn plan_preempted(input: &Input<'_>, what: &str) -> Plan {
    use TpuSlicePhase as P;
    if input.names.adopted {
        return Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::PREEMPTED,
            P::Preempted,
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
        return Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::RECREATIONS_EXHAUSTED,
            P::Failed,
            format!(
                "slice is {what} and was already recreated {} time(s) (spec.preemption.maxRecreations = {max})",
                input.recreations
            ),
        ));
    }
    Plan::new(
        Action::RecordPreemption,
        Assessment::new(
            Progress::Reconciling,
            reasons::RECREATING,
            P::Preempted,
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
