//! Table tests of the pure planning functions: every TPU node state, every queued-resource state,
//! the recreation window, creates that fail, drift and deletion.

use chrono::{DateTime, Utc};
use kube::api::ObjectMeta;
use serde_json::json;
use tpu_operator_api::{
    conditions::{Progress, reasons},
    naming::ObjectIdentity,
    tpu_slice::{TpuSlice, TpuSlicePhase as P, TpuSliceSpec, TpuSliceStatus},
};
use tpu_operator_gcp::{
    ErrorKind, GcpError, Service,
    tpu_v2::model::{Node, QueuedResource, node::Health as H, node::State as S},
};

use super::*;
use crate::tpu_slice::{observe::Names, spec};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

struct Case {
    slice: TpuSlice,
    observed: Observed,
    ready_since: Option<DateTime<Utc>>,
}

impl Case {
    fn new(capacity: serde_json::Value) -> Self {
        let spec: TpuSliceSpec = serde_json::from_value(json!({
            "zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": capacity, "preemption": {"maxRecreations": 2}
        }))
        .unwrap();
        let slice = TpuSlice {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec,
            status: None,
        };
        Self {
            slice,
            observed: Observed::default(),
            ready_since: None,
        }
    }

    fn spot() -> Self {
        Self::new(json!({"spot": {}}))
    }

    fn queued() -> Self {
        Self::new(json!({"queued": {"tier": "Spot", "validUntilDuration": "1h"}}))
    }

    fn recreations(mut self, n: i32) -> Self {
        self.slice.status = Some(TpuSliceStatus {
            recreations: n,
            ..Default::default()
        });
        self
    }

    fn identity() -> ObjectIdentity {
        ObjectIdentity::new("default", "s", "uid-1")
    }

    fn names(&self) -> Names {
        Names::new(&self.slice, &Self::identity(), "p".into())
    }

    fn desired(&self) -> spec::Desired {
        spec::desired(&self.slice.spec, &Self::identity(), "c", None)
    }

    /// A node at the current id carrying exactly the desired labels / metadata / tags.
    fn node(&self, state: S, health: H) -> Node {
        let d = self.desired();
        Node::new()
            .set_name(self.names().current.node)
            .set_state(state)
            .set_health(health)
            .set_labels(d.labels)
            .set_metadata(d.metadata)
            .set_tags(d.tags)
    }

    fn with_node(mut self, state: S, health: H) -> Self {
        self.observed.node = Some(self.node(state, health));
        self
    }

    fn plan(&self) -> Plan {
        let names = self.names();
        let desired = self.desired();
        let shape = spec::shape(&self.slice.spec);
        plan(&Input {
            spec: &self.slice.spec,
            names: &names,
            observed: &self.observed,
            desired: &desired,
            shape: &shape,
            recreations: self.slice.status.as_ref().map_or(0, |s| s.recreations),
            ready_since: self.ready_since,
            now: now(),
        })
    }
}

fn qr(name: &str, state: &str, initiator: &str) -> QueuedResource {
    serde_json::from_value(json!({
        "name": name,
        "createTime": "2026-03-02T09:30:00Z",
        "state": {"state": state, "stateInitiator": initiator}
    }))
    .unwrap()
}

fn summary(p: &Plan) -> (Action, Progress, &'static str, P) {
    (
        p.action.clone(),
        p.assessment.progress,
        p.assessment.reason,
        p.assessment.phase,
    )
}

#[test]
fn every_node_state() {
    use Progress::{Ready as Rdy, Reconciling as Rec, Stalled as Stl};
    let table = [
        (
            S::Creating,
            H::Unspecified,
            Action::None,
            Rec,
            reasons::CREATING,
            P::Provisioning,
        ),
        (
            S::Ready,
            H::Healthy,
            Action::None,
            Rdy,
            reasons::NODE_READY,
            P::Ready,
        ),
        (
            S::Ready,
            H::Unspecified,
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        (
            S::Ready,
            H::Timeout,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Ready,
            H::UnhealthyTensorflow,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Ready,
            H::UnhealthyMaintenance,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Restarting,
            H::Healthy,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Reimaging,
            H::Healthy,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Deleting,
            H::Healthy,
            Action::None,
            Rec,
            reasons::RECREATING,
            P::Recreating,
        ),
        (
            S::Repairing,
            H::Timeout,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
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
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Degraded,
        ),
        (
            S::Starting,
            H::Unspecified,
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
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
            S::Hiding,
            H::Healthy,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Hidden,
            H::Healthy,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Unhiding,
            H::Healthy,
            Action::None,
            Rec,
            reasons::NODE_UNHEALTHY,
            P::Degraded,
        ),
        (
            S::Unknown,
            H::Unspecified,
            Action::None,
            Stl,
            reasons::NODE_UNHEALTHY,
            P::Failed,
        ),
        (
            S::Unspecified,
            H::Unspecified,
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        (
            S::from(99),
            H::Healthy,
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Degraded,
        ),
    ];
    for (state, health, action, progress, reason, phase) in table {
        let p = Case::spot().with_node(state.clone(), health.clone()).plan();
        assert_eq!(
            summary(&p),
            (action, progress, reason, phase),
            "node {state:?} / {health:?}: {p:?}"
        );
    }
}

#[test]
fn polling_follows_the_state() {
    let stable = Case::spot().with_node(S::Ready, H::Healthy).plan();
    assert_eq!(stable.assessment.requeue, Requeue::Stable);
    let creating = Case::spot().with_node(S::Creating, H::Unspecified).plan();
    assert_eq!(creating.assessment.requeue, Requeue::Active);
    let hidden = Case::spot().with_node(S::Hidden, H::Healthy).plan();
    assert_eq!(hidden.assessment.requeue, Requeue::Capacity);
}

#[test]
fn every_queued_resource_state() {
    use Progress::{Ready as Rdy, Reconciling as Rec, Stalled as Stl};
    let table = [
        (
            "STATE_UNSPECIFIED",
            "USER",
            Action::None,
            Rec,
            reasons::QUEUED,
            P::Queued,
        ),
        (
            "CREATING",
            "USER",
            Action::None,
            Rec,
            reasons::CREATING,
            P::Queued,
        ),
        ("ACCEPTED", "USER", Action::None, Rec, reasons::QUEUED, P::Queued),
        (
            "WAITING_FOR_RESOURCES",
            "USER",
            Action::None,
            Rec,
            reasons::WAITING_FOR_CAPACITY,
            P::Queued,
        ),
        (
            "PROVISIONING",
            "USER",
            Action::None,
            Rec,
            reasons::PROVISIONING,
            P::Provisioning,
        ),
        ("ACTIVE", "USER", Action::None, Rdy, reasons::NODE_READY, P::Ready),
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
        ("SUSPENDED", "USER", Action::None, Stl, reasons::FAILED, P::Failed),
        ("FAILED", "SERVICE", Action::None, Stl, reasons::FAILED, P::Failed),
        (
            "DELETING",
            "USER",
            Action::None,
            Rec,
            reasons::RECREATING,
            P::Recreating,
        ),
    ];
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

#[test]
fn queued_expiry_is_queue_expired() {
    let mut c = Case::queued();
    let name = c.names().current.queued.unwrap();
    let mut failed = serde_json::to_value(qr(&name, "FAILED", "SERVICE")).unwrap();
    failed["state"]["failedData"] = json!({"error": {"code": 8, "message": "insufficient capacity"}});
    c.observed.queued = Some(serde_json::from_value(failed).unwrap());
    let p = c.plan();
    assert_eq!(p.assessment.reason, reasons::QUEUE_EXPIRED);
    assert_eq!(p.assessment.progress, Progress::Stalled);

    // Past validUntil (created 09:30 + 1h) while still waiting: the operator does not wait for
    // the service to notice.
    let mut late = Case::queued();
    let mut waiting = qr(&name, "WAITING_FOR_RESOURCES", "USER");
    waiting.create_time = Some(tpu_operator_gcp::wkt::Timestamp::clamp(
        now().timestamp() - 3601,
        0,
    ));
    late.observed.queued = Some(waiting);
    assert_eq!(late.plan().assessment.reason, reasons::QUEUE_EXPIRED);
}

#[test]
fn absent_objects_are_created_once_the_previous_incarnation_is_gone() {
    let c = Case::spot();
    assert_eq!(c.plan().action, Action::CreateNode);
    assert_eq!(Case::queued().plan().action, Action::CreateQueuedResource);

    // After a preemption (recreations = 1) the old node is deleted first, then waited for.
    let mut r = Case::spot().recreations(1);
    let prev = r.names().previous.unwrap();
    assert!(r.names().current.node.ends_with("-r1"));
    r.observed.previous_node = Some(Node::new().set_name(prev.node.clone()).set_state(S::Preempted));
    assert_eq!(r.plan().action, Action::DeleteNode(prev.node.clone()));
    r.observed.previous_node = Some(Node::new().set_name(prev.node.clone()).set_state(S::Deleting));
    assert_eq!(summary(&r.plan()).0, Action::None);
    assert_eq!(r.plan().assessment.phase, P::Recreating);
    r.observed.previous_node = None;
    assert_eq!(r.plan().action, Action::CreateNode);

    let mut q = Case::queued().recreations(1);
    let prev = q.names().previous.unwrap().queued.unwrap();
    q.observed.previous_queued = Some(qr(&prev, "SUSPENDED", "SERVICE"));
    assert_eq!(q.plan().action, Action::DeleteQueuedResource(prev));
}

#[test]
fn recreations_stop_at_the_limit() {
    let p = Case::spot()
        .recreations(2)
        .with_node(S::Preempted, H::Unspecified)
        .plan();
    assert_eq!(p.action, Action::None);
    assert_eq!(p.assessment.reason, reasons::RECREATIONS_EXHAUSTED);
    assert_eq!(p.assessment.progress, Progress::Stalled);
}

#[test]
fn pending_create_operations() {
    let mut c = Case::spot();
    c.observed.operation = Some(OperationView::Running);
    assert_eq!(summary(&c.plan()).0, Action::None);

    let err = |kind| GcpError::new(kind, Service::Tpu, "operation", "op", "boom");
    c.observed.operation = Some(OperationView::Failed(err(ErrorKind::ResourceExhausted)));
    let p = c.plan();
    assert_eq!(
        (p.action, p.assessment.reason),
        (Action::CreateNode, reasons::WAITING_FOR_CAPACITY)
    );
    c.observed.operation = Some(OperationView::Failed(err(ErrorKind::PermissionDenied)));
    let p = c.plan();
    assert_eq!(
        (p.action, p.assessment.reason),
        (Action::None, reasons::PERMISSION_DENIED)
    );
    c.observed.operation = Some(OperationView::Gone);
    assert_eq!(c.plan().action, Action::CreateNode);
}

#[test]
fn create_errors_are_classified() {
    let err = |kind| GcpError::new(kind, Service::Tpu, "nodes.create", "p", "x");
    let table = [
        (
            ErrorKind::ResourceExhausted,
            Some((Progress::Reconciling, reasons::WAITING_FOR_CAPACITY)),
        ),
        (
            ErrorKind::AlreadyExists,
            Some((Progress::Reconciling, reasons::CREATING)),
        ),
        (
            ErrorKind::PermissionDenied,
            Some((Progress::Stalled, reasons::PERMISSION_DENIED)),
        ),
        (
            ErrorKind::Unauthenticated,
            Some((Progress::Stalled, reasons::PERMISSION_DENIED)),
        ),
        (
            ErrorKind::InvalidArgument,
            Some((Progress::Stalled, reasons::INVALID_SPEC)),
        ),
        (
            ErrorKind::FailedPrecondition,
            Some((Progress::Stalled, reasons::INVALID_SPEC)),
        ),
        (ErrorKind::Transient, None),
        (ErrorKind::NotFound, None),
        (ErrorKind::Cancelled, None),
        (ErrorKind::Other, None),
    ];
    for (kind, want) in table {
        let got = on_action_error(&Action::CreateNode, &err(kind)).map(|a| (a.progress, a.reason));
        assert_eq!(got, want, "{kind:?}");
    }
    let mut rate_limited = err(ErrorKind::ResourceExhausted);
    rate_limited.reason = Some("RATE_LIMIT_EXCEEDED".into());
    assert_eq!(on_create_error(&rate_limited), None);
    let delete = Action::DeleteNode("n".into());
    let denied = on_action_error(&delete, &err(ErrorKind::PermissionDenied)).unwrap();
    assert_eq!(denied.reason, reasons::PERMISSION_DENIED);
    assert_eq!(on_action_error(&delete, &err(ErrorKind::Transient)), None);
}

#[test]
fn drift_is_patched_with_one_masked_call_and_not_while_an_operation_runs() {
    let mut c = Case::spot().with_node(S::Ready, H::Healthy);
    let n = c.observed.node.as_mut().unwrap();
    n.labels.insert("team".into(), "old".into());
    n.tags = vec!["stray".into()];
    n.labels.insert("goog-managed".into(), "x".into());
    let p = c.plan();
    assert_eq!(p.action, Action::PatchNode(vec!["labels", "tags"]));
    assert_eq!(p.assessment.progress, Progress::Ready);
    c.observed.operation = Some(OperationView::Running);
    assert_eq!(c.plan().action, Action::None);

    let mut m = Case::spot().with_node(S::Ready, H::Healthy);
    m.observed.node.as_mut().unwrap().runtime_version = "other".into();
    assert!(m.plan().assessment.drift.unwrap().contains("runtimeVersion"));
}

#[test]
fn adopted_nodes_are_never_created_or_recreated() {
    let mut c = Case::spot();
    c.slice.spec.adopt_node_id = Some("existing".into());
    let p = c.plan();
    assert_eq!(
        (p.action.clone(), p.assessment.reason),
        (Action::None, reasons::NOT_FOUND)
    );
    let c = c.with_node(S::Preempted, H::Unspecified);
    assert_eq!(c.plan().assessment.reason, reasons::PREEMPTED);
    assert_eq!(c.plan().action, Action::None);
}

#[test]
fn invalid_shape_stalls() {
    let mut c = Case::spot();
    c.slice.spec.accelerator_type = Some("v6e-3".into());
    let p = c.plan();
    assert_eq!(
        (p.action, p.assessment.reason),
        (Action::None, reasons::INVALID_SPEC)
    );
}

#[test]
fn cleanup_deletes_queued_resource_then_node_then_is_done() {
    let c = Case::queued();
    let qr_name = c.names().current.queued.unwrap();
    let node_name = c.names().current.node;
    let mut o = Observed {
        queued: Some(qr("q", "ACTIVE", "USER")),
        node: Some(Node::new().set_name(node_name.clone()).set_state(S::Ready)),
        ..Default::default()
    };
    o.queued.as_mut().unwrap().name = qr_name.clone();
    assert_eq!(
        plan_cleanup(&o),
        CleanupStep::Delete(Action::DeleteQueuedResource(qr_name))
    );
    o.queued = Some(qr("q", "DELETING", "USER"));
    assert!(matches!(plan_cleanup(&o), CleanupStep::Wait(_)));
    o.queued = None;
    assert_eq!(
        plan_cleanup(&o),
        CleanupStep::Delete(Action::DeleteNode(node_name.clone()))
    );
    o.node = Some(Node::new().set_name(node_name).set_state(S::Deleting));
    assert!(matches!(plan_cleanup(&o), CleanupStep::Wait(_)));
    assert_eq!(plan_cleanup(&Observed::default()), CleanupStep::Done);
    let prev = Observed {
        previous_node: Some(Node::new().set_name("old").set_state(S::Preempted)),
        ..Default::default()
    };
    assert_eq!(
        plan_cleanup(&prev),
        CleanupStep::Delete(Action::DeleteNode("old".into()))
    );
}

#[test]
fn max_run_duration_deletes_then_stalls_without_recreating() {
    let mut c = Case::spot().with_node(S::Ready, H::Healthy);
    c.slice.spec.max_run_duration = Some("2h".into());
    c.ready_since = Some(now() - chrono::Duration::hours(1));
    assert_eq!(c.plan().action, Action::None, "within the limit");
    c.ready_since = Some(now() - chrono::Duration::hours(3));
    let node = c.names().current.node;
    let p = c.plan();
    assert_eq!(
        (p.action, p.assessment.reason),
        (Action::DeleteNode(node), reasons::MAX_RUN_DURATION_EXCEEDED)
    );
    c.observed.node = None;
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::None,
            Progress::Stalled,
            reasons::MAX_RUN_DURATION_EXCEEDED,
            P::Failed
        )
    );
}
