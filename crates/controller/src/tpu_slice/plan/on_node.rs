//! Planning once the current node exists: its state and health decide; READY nodes get their
//! labels / metadata / tags corrected; PREEMPTED ones are recreated within the limit.
//!
//! Does not touch Kubernetes or Google Cloud.

use std::collections::BTreeMap;

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{Node, node};

use super::{Action, Assessment, Input, OperationView, Plan, Requeue};
use crate::tpu_slice::spec::{CapacityMode, Desired};

/// The current node exists.
pub(super) fn plan_node(input: &Input<'_>, n: &Node) -> Plan {
    use TpuSlicePhase as P;
    use node::State as S;
    let state = state_name(n);
    let busy = |reason, phase, what: &str| {
        Plan::report(Assessment::new(
            Progress::Reconciling,
            reason,
            phase,
            format!("node is {state}: {what}"),
        ))
    };
    let mut plan = match n.state {
        S::Ready => plan_ready(input, n),
        S::Creating => busy(reasons::CREATING, P::Provisioning, "being created"),
        S::Starting => busy(reasons::PROVISIONING, P::Provisioning, "starting"),
        S::Restarting | S::Reimaging | S::Repairing => busy(
            reasons::NODE_UNHEALTHY,
            P::Degraded,
            "waiting for it to come back",
        ),
        S::Stopping => busy(reasons::PROVISIONING, P::Degraded, "will be started once stopped"),
        S::Hiding | S::Hidden | S::Unhiding => {
            let mut p = busy(reasons::NODE_UNHEALTHY, P::Degraded, "held by the TPU service");
            p.assessment.requeue = Requeue::Capacity;
            p
        }
        S::Stopped => Plan::new(
            Action::StartNode,
            Assessment::new(
                Progress::Reconciling,
                reasons::PROVISIONING,
                P::Degraded,
                "node is STOPPED: starting it",
            ),
        ),
        S::Deleting => busy(
            reasons::RECREATING,
            P::Recreating,
            "deleted outside the operator; it is recreated once gone",
        ),
        S::Preempted | S::Terminated => plan_preempted(input, &state),
        S::Unknown => Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::NODE_UNHEALTHY,
            P::Failed,
            "node is UNKNOWN after a failed repair; delete the TpuSlice to replace it",
        )),
        S::Unspecified => {
            let mut p = busy(reasons::PROVISIONING, P::Provisioning, "state not reported yet");
            p.assessment.requeue = Requeue::Capacity;
            p
        }
        _ => {
            let mut p = busy(reasons::PROVISIONING, P::Degraded, "unrecognized state");
            p.assessment.requeue = Requeue::Capacity;
            p
        }
    };
    if n.state != S::Creating {
        plan.assessment.capacity = Some(!matches!(n.state, S::Preempted | S::Terminated));
    }
    plan.assessment.drift = immutable_drift(input, n);
    plan
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
        H::Timeout | H::UnhealthyTensorflow | H::UnhealthyMaintenance => Assessment::new(
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
    let what = if CapacityMode::preemptible(input.spec) {
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

/// The update mask of the fields that differ (empty when in sync). Labels the TPU service adds
/// itself (`goog-*`) are not ours to remove.
pub fn drift_mask(desired: &Desired, n: &Node) -> Vec<&'static str> {
    let mut mask = Vec::new();
    let labels: BTreeMap<_, _> = n
        .labels
        .iter()
        .filter(|(k, _)| !k.starts_with("goog-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if labels != desired.labels {
        mask.push("labels");
    }
    // Only the keys the operator set: `ssh-keys` and anything else added by others stay.
    if crate::tpu_slice::spec::metadata_drift(desired, &n.metadata) {
        mask.push("metadata");
    }
    if n.tags != desired.tags {
        mask.push("tags");
    }
    mask
}

/// Immutable fields that differ between the node and the spec (the CRD refuses such edits; this
/// catches the ones that slipped through, and adopted nodes that do not match).
fn immutable_drift(input: &Input<'_>, n: &Node) -> Option<String> {
    let mut out = Vec::new();
    if let Ok(shape) = input.shape {
        let want = shape.accelerator_type();
        if !n.accelerator_type.is_empty() && n.accelerator_type != want {
            out.push(format!(
                "acceleratorType is {} on the node, {want} in the spec",
                n.accelerator_type
            ));
        }
    }
    if !n.runtime_version.is_empty() && n.runtime_version != input.spec.runtime_version {
        out.push(format!(
            "runtimeVersion is {} on the node, {} in the spec",
            n.runtime_version, input.spec.runtime_version
        ));
    }
    (!out.is_empty()).then(|| {
        format!(
            "{} (not changed in place; recreate the TpuSlice to apply)",
            out.join("; ")
        )
    })
}

/// `READY`, `PREEMPTED`, ... as GCP spells it.
pub fn state_name(n: &Node) -> String {
    n.state.name().unwrap_or("UNRECOGNIZED").to_string()
}

pub fn health_name(n: &Node) -> String {
    n.health.name().unwrap_or("UNRECOGNIZED").to_string()
}
