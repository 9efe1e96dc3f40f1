//! Planning a multislice whose queued resource is ACTIVE: all its nodes, one per slice, run or
//! none does; once all are READY and HEALTHY each is told its slice id and the coordinator's
//! address.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{Node, node};

use super::{
    Action, Input, OperationView, Plan, Requeue, Verdict, doing, drift_mask, immutable_drift,
    on_node::{maintenance_step, plan_node, plan_preempted, state_name},
    prefix, report,
};
use crate::kinds::tpu_slice::spec::Desired;

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
    let ready = plan.verdict.progress() == Some(Progress::Ready);
    if ready {
        plan.details.capacity = Some(true);
    }
    plan.details.drift = immutable_drift(input, first);
    if !ready {
        prefix(&mut plan.verdict, format_args!("multislice of {total}: "));
    }
    plan
}

fn plan_all_slices(input: &Input<'_>, nodes: &[Option<&Node>]) -> Plan {
    if let Some(k) = nodes.iter().position(Option::is_none) {
        return report(Verdict::new(
            TpuSlicePhase::Provisioning,
            Progress::Reconciling,
            reasons::PROVISIONING,
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
        return report(Verdict::new(
            TpuSlicePhase::Provisioning,
            Progress::Reconciling,
            reasons::PROVISIONING,
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
    p.details.capacity = Some(false);
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
    prefix(&mut p.verdict, format_args!("slice {k}: "));
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
        let verdict = if told(n, k, coordinator) {
            ready(total).requeue(Requeue::Active)
        } else {
            Verdict::new(
                TpuSlicePhase::Provisioning,
                Progress::Reconciling,
                reasons::PROVISIONING,
                format!(
                    "all {total} nodes are READY: telling slice {k} its slice id and the coordinator {coordinator}"
                ),
            )
        };
        if operation_running {
            return report(verdict.requeue(Requeue::Active));
        }
        let metadata = crate::kinds::tpu_slice::spec::patched_metadata(&d, &n.metadata);
        let patch = Desired { metadata, ..d };
        return doing(
            Action::PatchSliceNode {
                node: n.name.clone(),
                mask,
                patch,
            },
            verdict,
        );
    }
    let a = ready(total);
    if operation_running {
        return report(a.requeue(Requeue::Active));
    }
    match nodes.iter().find_map(|n| maintenance_step(input, n)) {
        Some(ask) => doing(ask, a.requeue(Requeue::Active)),
        None => report(a),
    }
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

fn ready(total: usize) -> Verdict {
    Verdict::new(
        TpuSlicePhase::Ready,
        Progress::Ready,
        reasons::NODE_READY,
        format!("all {total} slices of the multislice are READY and HEALTHY"),
    )
}
