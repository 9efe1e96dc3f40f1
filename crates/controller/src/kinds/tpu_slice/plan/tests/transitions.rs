//! Recreation, failed creates, drift, adoption, limits and deletion.

use tpu_operator_gcp::tpu_v2::model::{node::Health as H, node::State as S};

use super::*;

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
    assert_eq!(summary(&r.plan()).0, Action::Nothing);
    assert_eq!(r.plan().verdict.phase, P::Recreating);
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
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(p.verdict.said().reason, reasons::RECREATIONS_EXHAUSTED);
    assert_eq!(p.verdict.said().progress, Progress::Stalled);
}

#[test]
fn pending_create_operations() {
    let mut c = Case::spot();
    c.observed.operation = Some(OperationView::Running);
    assert_eq!(summary(&c.plan()).0, Action::Nothing);

    let err = |kind| GcpError::new(kind, Service::Tpu, "operation", "op", "boom");
    c.observed.operation = Some(OperationView::Failed(err(ErrorKind::ResourceExhausted)));
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason),
        (Action::CreateNode, reasons::WAITING_FOR_CAPACITY)
    );
    c.observed.operation = Some(OperationView::Failed(err(ErrorKind::PermissionDenied)));
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason),
        (Action::Nothing, reasons::PERMISSION_DENIED)
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
        // No usable credentials is not a missing role: the binding is what to fix.
        (
            ErrorKind::Unauthenticated,
            Some((Progress::Stalled, reasons::CREDENTIALS_UNAVAILABLE)),
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
        let got = on_action_error(&Action::CreateNode, &err(kind))
            .map(|a| (a.verdict.said().progress, a.verdict.said().reason));
        assert_eq!(got, want, "{kind:?}");
    }
    let mut rate_limited = err(ErrorKind::ResourceExhausted);
    rate_limited.reason = Some("RATE_LIMIT_EXCEEDED".into());
    let waits = on_create_error(&rate_limited).unwrap();
    assert_eq!(
        (
            waits.verdict.said().progress,
            waits.verdict.said().reason,
            waits.verdict.requeue
        ),
        (Progress::Reconciling, reasons::RATE_LIMITED, Requeue::Capacity)
    );
    let delete = Action::DeleteNode("n".into());
    let denied = on_action_error(&delete, &err(ErrorKind::PermissionDenied)).unwrap();
    assert_eq!(denied.verdict.said().reason, reasons::PERMISSION_DENIED);
    let no_token = on_action_error(&delete, &err(ErrorKind::Unauthenticated)).unwrap();
    assert_eq!(no_token.verdict.said().reason, reasons::CREDENTIALS_UNAVAILABLE);
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
    assert_eq!(p.verdict.said().progress, Progress::Ready);
    c.observed.operation = Some(OperationView::Running);
    assert_eq!(c.plan().action, Action::Nothing);

    let mut m = Case::spot().with_node(S::Ready, H::Healthy);
    m.observed.node.as_mut().unwrap().runtime_version = "other".into();
    assert!(m.plan().details.drift.unwrap().contains("runtimeVersion"));
}

#[test]
fn adopted_nodes_are_never_created_or_recreated() {
    let mut c = Case::spot();
    c.slice.spec.adopt_node_id = Some("existing".into());
    let p = c.plan();
    assert_eq!(
        (p.action.clone(), p.verdict.said().reason),
        (Action::Nothing, reasons::NOT_FOUND)
    );
    let c = c.with_node(S::Preempted, H::Unspecified);
    assert_eq!(c.plan().verdict.said().reason, reasons::PREEMPTED);
    assert_eq!(c.plan().action, Action::Nothing);
}

#[test]
fn invalid_shape_stalls() {
    let mut c = Case::spot();
    c.slice.spec.accelerator_type = Some("v6e-3".into());
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason),
        (Action::Nothing, reasons::INVALID_SPEC)
    );
}

/// A spec the create request cannot carry (here a queued duration `parse_duration` refuses,
/// which an object admitted before the schema's pattern existed can hold) stalls before any
/// create is planned, naming the field: act only ever fails for cloud reasons.
#[test]
fn unmappable_request_stalls_before_a_create_naming_the_field() {
    let mut c = Case::queued();
    let queued = c.slice.spec.capacity.as_mut().unwrap().queued.as_mut().unwrap();
    queued.valid_until_duration = Some("99999999999999999999h".into());
    let p = c.plan();
    assert_eq!(
        (&p.action, p.verdict.said().reason),
        (&Action::Nothing, reasons::INVALID_SPEC)
    );
    assert!(
        p.verdict
            .said()
            .message
            .starts_with("spec.capacity.queued.validUntilDuration"),
        "{}",
        p.verdict.said().message
    );
    // The same slice with a duration the request can carry plans its create.
    let ok = Case::queued();
    assert_eq!(ok.plan().action, Action::CreateQueuedResource);
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
fn deletion_deletes_then_waits_then_releases_what_was_shared() {
    let node = Node::new().set_name("n").set_state(S::Ready);
    let mut o = Observed {
        node: Some(node),
        ..Default::default()
    };
    let p = plan_deletion(&o);
    assert_eq!(p.action, Action::DeleteNode("n".into()));
    assert_eq!(p.verdict.phase, P::Deleting);
    assert_eq!(p.verdict.said().reason, reasons::DELETING);
    o.node = Some(Node::new().set_name("n").set_state(S::Deleting));
    let p = plan_deletion(&o);
    assert_eq!(p.action, Action::Nothing);
    assert!(p.verdict.said().message.contains("node n is being deleted"));
    // Every incarnation gone: what they shared is released, still `Deleting` until it is.
    let p = plan_deletion(&Observed::default());
    assert_eq!(p.action, Action::ReleaseShared);
    assert_eq!(p.verdict.phase, P::Deleting);
    assert_eq!(p.verdict.said().progress, Progress::Reconciling);
}

#[test]
fn max_run_duration_deletes_then_stalls_without_recreating() {
    let mut c = Case::spot().with_node(S::Ready, H::Healthy);
    c.slice.spec.max_run_duration = Some("2h".into());
    c.ready_since = Some(now() - chrono::Duration::hours(1));
    assert_eq!(c.plan().action, Action::Nothing, "within the limit");
    c.ready_since = Some(now() - chrono::Duration::hours(3));
    let node = c.names().current.node;
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason),
        (Action::DeleteNode(node), reasons::MAX_RUN_DURATION_EXCEEDED)
    );
    c.observed.node = None;
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::Nothing,
            Progress::Stalled,
            reasons::MAX_RUN_DURATION_EXCEEDED,
            P::Failed
        )
    );
}

#[test]
fn idle_timeout_counts_from_the_workloads_end_then_deletes_and_stalls() {
    let mut c = Case::spot().with_node(S::Ready, H::Healthy);
    c.slice.spec.idle_timeout = Some("30m".into());
    c.ready_since = Some(now() - chrono::Duration::hours(2));
    assert_eq!(c.plan().action, Action::Nothing, "the workload has not finished");
    c.last_active = Some(now() - chrono::Duration::minutes(10));
    assert_eq!(c.plan().action, Action::Nothing, "idle for 10 of 30 minutes");
    // A marker from before this node became READY belongs to an earlier incarnation.
    c.last_active = Some(now() - chrono::Duration::hours(3));
    assert_eq!(c.plan().action, Action::Nothing, "stale marker");
    c.last_active = Some(now() - chrono::Duration::minutes(31));
    let node = c.names().current.node;
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason, p.verdict.phase),
        (Action::DeleteNode(node), reasons::IDLE_TIMEOUT, P::Deleting)
    );
    c.observed.node = None;
    let p = c.plan();
    assert_eq!(
        summary(&p),
        (
            Action::Nothing,
            Progress::Stalled,
            reasons::IDLE_TIMEOUT,
            P::Failed
        )
    );
    assert!(
        p.verdict.said().message.contains("spec.idleTimeout"),
        "{}",
        p.verdict.said().message
    );
}

/// Issue 21 item 4: an exhausted quota is not a capacity wait. It is Stalled/QuotaExceeded
/// (naming the quota) and still retried, slowly; a stockout (or an error that says neither)
/// stays Reconciling/WaitingForCapacity. Both shapes: a refused create and a failed operation.
#[test]
fn quota_failures_stall_and_stockouts_wait() {
    let mut quota = GcpError::new(
        ErrorKind::ResourceExhausted,
        Service::Tpu,
        "nodes.create",
        "p",
        "Quota limit 'TPUV6EPodPerProjectPerZoneForTPUAPI' has been exceeded.",
    );
    let a = on_create_error(&quota).unwrap();
    assert_eq!(
        (a.verdict.said().progress, a.verdict.said().reason),
        (Progress::Stalled, reasons::QUOTA_EXCEEDED)
    );
    assert_eq!(
        (a.verdict.requeue, a.details.capacity),
        (Requeue::Stable, Some(false))
    );
    quota.reason = Some("RESOURCE_QUOTA_EXCEEDED".into());
    quota.quota = Some(Box::new(tpu_operator_gcp::QuotaDetails {
        metric: Some("tpu.googleapis.com/v6e_chips".into()),
        quota_failure: true,
        ..Default::default()
    }));
    quota.message = "exhausted".into();
    let a = on_create_error(&quota).unwrap();
    assert_eq!(a.verdict.said().reason, reasons::QUOTA_EXCEEDED);
    assert!(
        a.verdict.said().message.contains("tpu.googleapis.com/v6e_chips"),
        "{}",
        a.verdict.said().message
    );
    assert!(
        a.verdict.said().message.contains("quota increase"),
        "{}",
        a.verdict.said().message
    );

    let mut stockout = quota.clone();
    stockout.reason = Some("STOCKOUT".into());
    stockout.quota = None;
    let a = on_create_error(&stockout).unwrap();
    assert_eq!(
        (a.verdict.said().progress, a.verdict.said().reason),
        (Progress::Reconciling, reasons::WAITING_FOR_CAPACITY)
    );
    assert_eq!(a.verdict.requeue, Requeue::Capacity);

    // The create operation failed with code 8 and quota details: still retried, but Stalled.
    let mut c = Case::spot();
    let mut op_quota = quota.clone();
    op_quota.method = "operation";
    c.observed.operation = Some(OperationView::Failed(op_quota));
    let p = c.plan();
    assert_eq!(
        (p.action, p.verdict.said().reason),
        (Action::CreateNode, reasons::QUOTA_EXCEEDED)
    );
    assert_eq!(p.verdict.said().progress, Progress::Stalled);
}

/// Issue 21 item 8: a patch or start refused while another operation runs on the node is retried
/// soon, whichever of ABORTED (409) or FAILED_PRECONDITION the service uses; a create conflict is
/// not "busy".
#[test]
fn a_busy_node_is_retried_not_failed() {
    let mut aborted = GcpError::new(ErrorKind::Transient, Service::Tpu, "nodes.patch", "n", "busy");
    aborted.status = Some("ABORTED");
    aborted.http_status = Some(409);
    let precondition = GcpError::new(
        ErrorKind::FailedPrecondition,
        Service::Tpu,
        "nodes.patch",
        "n",
        "busy",
    );
    let patch = Action::PatchNode(vec!["labels"]);
    assert!(node_busy(&patch, &aborted));
    assert!(node_busy(&patch, &precondition));
    assert!(node_busy(&Action::StartNode, &aborted));
    assert!(!node_busy(&Action::CreateNode, &aborted));
    let unavailable = GcpError::new(ErrorKind::Transient, Service::Tpu, "nodes.patch", "n", "503");
    assert!(!node_busy(&patch, &unavailable));
}

/// Compute Engine has no node updates: a STOPPED slice or drifted labels plan no call, with the
/// assessment a TPU API slice gets (the call was refused before, and the plan stood).
#[test]
fn a_backend_without_node_updates_is_never_asked_for_one() {
    use tpu_operator_api::tpu_slice::{ComputeEngineOptions, Provisioner};
    let on = |provisioner, state| {
        let mut c = Case::spot();
        if provisioner == Provisioner::ComputeEngine {
            c.slice.spec.provisioner = provisioner;
            c.slice.spec.runtime_version = String::new();
            c.slice.spec.compute_engine = Some(ComputeEngineOptions {
                image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts".into(),
                boot_disk_size_gb: None,
            });
        }
        let mut c = c.with_node(state, H::Healthy);
        c.observed
            .node
            .as_mut()
            .unwrap()
            .labels
            .insert("team".into(), "old".into());
        c.plan()
    };
    for (state, update) in [
        (S::Stopped, Action::StartNode),
        (S::Ready, Action::PatchNode(vec!["labels"])),
    ] {
        let tpu = on(Provisioner::TpuApi, state.clone());
        let compute = on(Provisioner::ComputeEngine, state);
        assert_eq!(tpu.action, update);
        assert_eq!(compute.action, Action::Nothing);
        assert_eq!((compute.verdict, compute.details), (tpu.verdict, tpu.details));
    }
}

/// A capacity plan moved on from a queued rung, and the queued resource it left was granted
/// before it was deleted: the move is undone rather than the capacity thrown away. Not granted,
/// or left by a preemption, it is deleted before anything is created.
#[test]
fn a_queued_rung_granted_just_after_a_move_is_gone_back_to_not_deleted() {
    let prev = "projects/p/locations/us-east5-b/queuedResources/prev";
    let case = |state: &str, moved: bool| {
        let mut c = Case::spot().recreations(1);
        c.spec_moved = moved;
        c.observed.previous_queued = Some(qr(prev, state, "USER"));
        c.plan()
    };
    for state in ["PROVISIONING", "ACTIVE"] {
        let p = case(state, true);
        assert_eq!(p.action, Action::ReturnToGranted, "{state}");
        assert!(p.verdict.said().message.contains("going back"), "{:?}", p.verdict);
        assert_eq!(
            case(state, false).action,
            Action::DeleteQueuedResource(prev.into()),
            "{state}"
        );
    }
    assert_eq!(
        case("WAITING_FOR_RESOURCES", true).action,
        Action::DeleteQueuedResource(prev.into())
    );
}
