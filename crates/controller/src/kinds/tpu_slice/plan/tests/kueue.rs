//! The Kueue gate: nothing is created before admission, an eviction deletes the node before the
//! reservation is released, and every stop is counted once.

use tpu_operator_api::kueue::KueueStatus;

use super::*;
use crate::{kinds::tpu_slice::queue::Queued, kueue::Gate};

fn gated(gate: Gate) -> Queued {
    Queued {
        workload: "tpuslice-s-uid-1".into(),
        local_queue: "tpu".into(),
        gate,
        found: None,
        desired: None,
        position: Some(2),
        estimated_start: None,
        priority: Ok(None),
    }
}

fn pending() -> Gate {
    Gate::Pending {
        message: "insufficient unused quota for google.com/tpu in flavor v6e, 8 more needed".into(),
    }
}

fn evicted() -> Gate {
    Gate::Evicted {
        reason: "Preempted".into(),
        message: "Preempted to accommodate a workload".into(),
    }
}

fn with_status(mut c: Case, node_name: Option<&str>, stopped: bool) -> Case {
    c.slice.status = Some(TpuSliceStatus {
        node_name: node_name.map(String::from),
        kueue: Some(KueueStatus {
            stopped,
            ..Default::default()
        }),
        ..Default::default()
    });
    c
}

#[test]
fn nothing_is_created_before_kueue_admits_the_workload() {
    let mut c = Case::spot();
    c.observed.queue = Some(gated(Gate::Missing));
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::CreateWorkload,
            Progress::Reconciling,
            reasons::QUEUED_IN_KUEUE,
            P::Queued
        )
    );
    c.observed.queue = Some(gated(pending()));
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::Nothing,
            Progress::Reconciling,
            reasons::QUEUED_IN_KUEUE,
            P::Queued
        )
    );
    assert!(
        p.verdict
            .said()
            .message
            .contains("LocalQueue tpu (position 2): insufficient unused quota"),
        "{}",
        p.verdict.said().message
    );
    assert_eq!(p.verdict.requeue, Requeue::Capacity);
    // With an estimate, the message and status.kueue give it.
    let mut estimated = gated(pending());
    estimated.estimated_start = DateTime::from_timestamp(1_800_000_000, 0);
    let kueue = crate::kinds::tpu_slice::queue::status(&Default::default(), Some(&estimated), false);
    let eta = kueue.and_then(|k| k.estimated_start_time);
    assert_eq!(eta.map(|t| t.0.as_second()), Some(1_800_000_000));
    c.observed.queue = Some(estimated);
    let p = c.plan();
    let message = &p.verdict.said().message;
    assert!(
        message.contains("(position 2, estimated start 2027-01-15T08:00:00Z): insufficient"),
        "{message}"
    );
    c.observed.queue = Some(gated(Gate::Admitted {
        cluster_queue: "cq".into(),
    }));
    assert_eq!(c.plan().action, Action::CreateNode);
}

#[test]
fn a_missing_priority_class_stalls_without_a_workload() {
    let mut c = Case::spot();
    let mut q = gated(Gate::Missing);
    q.priority =
        Err("WorkloadPriorityClass urgent (label kueue.x-k8s.io/priority-class) does not exist".into());
    c.observed.queue = Some(q);
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::Nothing,
            Progress::Stalled,
            reasons::PRIORITY_CLASS_NOT_FOUND,
            P::Pending
        )
    );
}

#[test]
fn an_eviction_deletes_the_node_counts_the_stop_then_releases_the_quota() {
    let mut c = with_status(Case::spot(), Some("projects/p/locations/z/nodes/s"), false)
        .with_node(S::Ready, H::Healthy);
    let node = c.observed.node.clone().unwrap().name;
    c.observed.queue = Some(gated(evicted()));
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::DeleteNode(node.clone()),
            Progress::Reconciling,
            reasons::EVICTED,
            P::Deleting
        )
    );
    assert!(
        p.verdict
            .said()
            .message
            .starts_with("evicted by Kueue (Preempted)"),
        "{}",
        p.verdict.said().message
    );

    c.observed.node = Some(Node::new().set_name(node).set_state(S::Deleting));
    assert_eq!(c.plan().action, Action::Nothing, "waits for the node to go");

    c.observed.node = None;
    assert_eq!(
        c.plan().action,
        Action::RecordSuspension,
        "the stop is counted before the quota goes"
    );
    let mut c = with_status(c, Some("projects/p/locations/z/nodes/s"), true);
    c.observed.queue = Some(gated(evicted()));
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::ReleaseWorkload,
            Progress::Reconciling,
            reasons::EVICTED,
            P::Queued
        )
    );
}

#[test]
fn a_node_that_runs_without_admission_is_deleted_and_counted_once() {
    let mut c = with_status(Case::spot(), Some("projects/p/locations/z/nodes/s"), false)
        .with_node(S::Ready, H::Healthy);
    c.observed.queue = Some(gated(pending()));
    assert!(matches!(c.plan().action, Action::DeleteNode(_)));
    c.observed.node = None;
    assert_eq!(c.plan().action, Action::RecordSuspension);
    let mut c = with_status(c, Some("projects/p/locations/z/nodes/s"), true);
    c.observed.queue = Some(gated(pending()));
    assert_eq!(c.plan().action, Action::Nothing);
}

#[test]
fn suspend_wins_over_an_admission() {
    let mut c = Case::spot();
    c.slice.spec.suspend = true;
    c.observed.queue = Some(gated(Gate::Admitted {
        cluster_queue: "cq".into(),
    }));
    assert_eq!(c.plan().verdict.said().reason, reasons::SUSPENDED);
}

#[test]
fn a_suspended_slice_deletes_its_workload_once_the_node_is_gone_and_the_stop_counted() {
    let mut c = with_status(Case::spot(), Some("projects/p/locations/z/nodes/s"), false)
        .with_node(S::Ready, H::Healthy);
    c.slice.spec.suspend = true;
    let mut admitted = gated(Gate::Admitted {
        cluster_queue: "cq".into(),
    });
    admitted.found = Some(crate::kueue::workload::Workload::new(
        "tpuslice-s-uid-1",
        Default::default(),
    ));
    c.observed.queue = Some(admitted.clone());
    assert!(
        matches!(c.plan().action, Action::DeleteNode(_)),
        "the node goes first"
    );
    c.observed.node = None;
    assert_eq!(c.plan().action, Action::RecordSuspension);
    c.slice.status.as_mut().unwrap().phase = P::Suspended;
    assert_eq!(c.plan().action, Action::DeleteWorkload, "then the quota");
    c.observed.queue = Some(gated(Gate::Missing));
    let p = c.plan();
    assert_eq!(
        p.action,
        Action::Nothing,
        "and no Workload is written while suspended"
    );
    assert_eq!(p.verdict.phase, P::Suspended);
}
