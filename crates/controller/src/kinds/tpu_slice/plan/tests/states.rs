//! Every TPU node state and every queued-resource state.

use tpu_operator_gcp::tpu_v2::model::{node::Health as H, node::State as S};

use super::*;

/// A node state row: (state, health, action, progress, reason, phase).
type NodeRow = (S, H, Action, Progress, &'static str, P);

/// Plans a spot slice whose node is in each row's state and health, and checks the outcome.
fn check_node_states(table: impl IntoIterator<Item = NodeRow>) {
    for (state, health, action, progress, reason, phase) in table {
        let p = Case::spot().with_node(state.clone(), health.clone()).plan();
        assert_eq!(
            summary(&p),
            (action, progress, reason, phase),
            "node {state:?} / {health:?}: {p:?}"
        );
    }
}

/// A node on its way up, or up and healthy.
#[test]
fn node_states_coming_up_and_ready() {
    use Progress::{Ready as Rdy, Reconciling as Rec};
    check_node_states([
        (
            S::Creating,
            H::Unspecified,
            Action::Nothing,
            Rec,
            reasons::CREATING,
            P::Provisioning,
        ),
        (
            S::Ready,
            H::Healthy,
            Action::Nothing,
            Rdy,
            reasons::NODE_READY,
            P::Ready,
        ),
        (
            S::Ready,
            H::Unspecified,
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        (
            S::Starting,
            H::Unspecified,
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        (
            S::Unspecified,
            H::Unspecified,
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
    ]);
}

/// A node that exists but is not serving: unhealthy, restarting, reimaging, repairing or hidden.
#[test]
fn node_states_unhealthy() {
    use Progress::Reconciling as Rec;
    check_node_states([
        (
            S::Ready,
            H::Timeout,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Ready,
            H::UnhealthyTensorflow,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Ready,
            H::UnhealthyMaintenance,
            Action::Nothing,
            Rec,
            reasons::MAINTENANCE_ONGOING,
            P::Degraded,
        ),
        (
            S::Restarting,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Reimaging,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Repairing,
            H::Timeout,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Hiding,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Hidden,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Unhiding,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
    ]);
}

/// A node stopped, preempted, being deleted, or in a state the operator does not know.
#[test]
fn node_states_stopped_preempted_deleting_or_unknown() {
    use Progress::{Reconciling as Rec, Stalled as Stl};
    check_node_states([
        (
            S::Deleting,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::RECREATING,
            P::Recreating,
        ),
        (
            S::Stopped,
            H::Unspecified,
            Action::StartNode,
            Rec,
            reasons::PROVISIONING,
            P::Degraded,
        ),
        (
            S::Stopping,
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Degraded,
        ),
        (
            S::Preempted,
            H::Unspecified,
            Action::RecordPreemption,
            Rec,
            reasons::RECREATING,
            P::Preempted,
        ),
        (
            S::Terminated,
            H::Unspecified,
            Action::RecordPreemption,
            Rec,
            reasons::RECREATING,
            P::Preempted,
        ),
        (
            S::Unknown,
            H::Unspecified,
            Action::Nothing,
            Stl,
            reasons::NODE_UNHEALTHY,
            P::Failed,
        ),
        (
            S::from(99),
            H::Healthy,
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Degraded,
        ),
    ]);
}

#[test]
fn polling_follows_the_state() {
    let stable = Case::spot().with_node(S::Ready, H::Healthy).plan();
    assert_eq!(stable.verdict.requeue, Requeue::Stable);
    let creating = Case::spot().with_node(S::Creating, H::Unspecified).plan();
    assert_eq!(creating.verdict.requeue, Requeue::Active);
    let hidden = Case::spot().with_node(S::Hidden, H::Healthy).plan();
    assert_eq!(hidden.verdict.requeue, Requeue::Capacity);
}

/// A queued-resource state row: (state, initiator, action, progress, reason, phase).
type QueuedRow = (&'static str, &'static str, Action, Progress, &'static str, P);

/// Plans a queued slice whose queued resource is in each row's state (with a ready node when
/// ACTIVE), and checks the outcome.
fn check_queued_states(table: impl IntoIterator<Item = QueuedRow>) {
    for (state, initiator, action, progress, reason, phase) in table {
        let mut c = Case::queued();
        let names = c.names();
        c.observed.queued = Some(qr(names.current.queued.as_deref().unwrap(), state, initiator));
        if state == "ACTIVE" {
            c = c.with_node(S::Ready, H::Healthy);
        }
        let p = c.plan();
        assert_eq!(
            summary(&p),
            (action, progress, reason, phase),
            "queued resource {state} by {initiator}: {p:?}"
        );
    }
}

/// A queued resource waiting for capacity, provisioning, or active.
#[test]
fn queued_resource_states_waiting_and_active() {
    use Progress::{Ready as Rdy, Reconciling as Rec};
    check_queued_states([
        (
            "STATE_UNSPECIFIED",
            "USER",
            Action::Nothing,
            Rec,
            reasons::QUEUED,
            P::Queued,
        ),
        (
            "CREATING",
            "USER",
            Action::Nothing,
            Rec,
            reasons::CREATING,
            P::Queued,
        ),
        (
            "ACCEPTED",
            "USER",
            Action::Nothing,
            Rec,
            reasons::QUEUED,
            P::Queued,
        ),
        (
            "WAITING_FOR_RESOURCES",
            "USER",
            Action::Nothing,
            Rec,
            reasons::WAITING_FOR_CAPACITY,
            P::Queued,
        ),
        (
            "PROVISIONING",
            "USER",
            Action::Nothing,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        (
            "ACTIVE",
            "USER",
            Action::Nothing,
            Rdy,
            reasons::NODE_READY,
            P::Ready,
        ),
    ]);
}

/// A queued resource suspended (by the service or the user), failed, or being deleted.
#[test]
fn queued_resource_states_suspended_failed_or_deleting() {
    use Progress::{Reconciling as Rec, Stalled as Stl};
    check_queued_states([
        (
            "SUSPENDING",
            "SERVICE",
            Action::RecordPreemption,
            Rec,
            reasons::RECREATING,
            P::Preempted,
        ),
        (
            "SUSPENDED",
            "SERVICE",
            Action::RecordPreemption,
            Rec,
            reasons::RECREATING,
            P::Preempted,
        ),
        (
            "SUSPENDED",
            "USER",
            Action::Nothing,
            Stl,
            reasons::FAILED,
            P::Failed,
        ),
        (
            "FAILED",
            "SERVICE",
            Action::Nothing,
            Stl,
            reasons::FAILED,
            P::Failed,
        ),
        (
            "DELETING",
            "USER",
            Action::Nothing,
            Rec,
            reasons::RECREATING,
            P::Recreating,
        ),
    ]);
}

/// Issue 21 item 6: an expired `validUntil` is told by the deadline the spec set (the TPU API
/// documents FAILED for it, not the error code), and the service's message is kept either way.
#[test]
fn queued_expiry_is_queue_expired() {
    let mut c = Case::queued();
    let name = c.names().current.queued.unwrap();
    let failed_with = |code: i32, created: &str| {
        let mut failed = serde_json::to_value(qr(&name, "FAILED", "SERVICE")).unwrap();
        failed["createTime"] = json!(created);
        failed["state"]["failedData"] = json!({"error": {"code": code, "message": "constraints unmet"}});
        serde_json::from_value(failed).unwrap()
    };
    // Created 09:00 with validUntilDuration 1h; now is 10:00: expired, whatever the code.
    for code in [8, 9, 13] {
        c.observed.queued = Some(failed_with(code, "2026-03-02T09:00:00Z"));
        let p = c.plan();
        assert_eq!(p.verdict.said().reason, reasons::QUEUE_EXPIRED, "code {code}");
        assert_eq!(p.verdict.said().progress, Progress::Stalled);
        assert!(
            p.verdict.said().message.contains("constraints unmet"),
            "{}",
            p.verdict.said().message
        );
    }
    // Created 09:30: the window is still open, so a FAILED with code 8 is a plain failure.
    c.observed.queued = Some(failed_with(8, "2026-03-02T09:30:00Z"));
    let p = c.plan();
    assert_eq!(p.verdict.said().reason, reasons::FAILED);
    assert!(
        p.verdict.said().message.contains("constraints unmet"),
        "{}",
        p.verdict.said().message
    );

    // Past validUntil (created 09:30 + 1h) while still waiting: the operator does not wait for
    // the service to notice.
    let mut late = Case::queued();
    let mut waiting = qr(&name, "WAITING_FOR_RESOURCES", "USER");
    waiting.create_time = Some(tpu_operator_gcp::wkt::Timestamp::clamp(
        now().timestamp() - 3601,
        0,
    ));
    late.observed.queued = Some(waiting);
    assert_eq!(late.plan().verdict.said().reason, reasons::QUEUE_EXPIRED);
}
