//! A maintenance notice on a READY node: the workload is asked for a checkpoint once, within
//! `checkpointLead` of the window, and never for a window under way or a slice running nothing.

use super::*;
use crate::kinds::tpu_slice::{maintenance, observe::Observed};
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::{CHECKPOINT_REQUEST_METADATA, MaintenanceState},
};

/// `n` with a notice whose window starts at `start` (RFC 3339), as the TPU API lists it.
fn noticed(n: Node, start: &str, status: &str) -> Node {
    let mut wire = serde_json::to_value(&n).unwrap();
    wire["upcomingMaintenance"] = json!({
        "type": "SCHEDULED", "canReschedule": false, "maintenanceStatus": status,
        "windowStartTime": start, "windowEndTime": "2026-03-02T12:00:00Z",
        "latestWindowStartTime": start,
    });
    serde_json::from_value(wire).unwrap()
}

fn running_case(start: &str, status: &str) -> Case {
    let mut c = Case::spot();
    c.slice.spec.startup_script = Some("#!/bin/bash\ntrain".into());
    let n = c.node(S::Ready, H::Healthy);
    c.observed.node = Some(noticed(n, start, status));
    c
}

#[test]
fn a_checkpoint_is_asked_once_within_the_lead_and_not_before() {
    // now() is 10:00; the default lead is 5 minutes.
    let early = running_case("2026-03-02T10:06:00Z", "PENDING");
    assert_eq!(early.plan().action, Action::Nothing, "6 min ahead: not yet");
    assert_eq!(
        maintenance::next_request(&early.slice.spec, &early.observed).map(|t| t.to_rfc3339()),
        Some("2026-03-02T10:01:00+00:00".into()),
        "the slice is woken when the request is due"
    );

    let due = running_case("2026-03-02T10:04:00Z", "PENDING");
    let p = due.plan();
    let Action::RequestCheckpoint { node, metadata } = &p.action else {
        panic!("expected a checkpoint request: {p:?}");
    };
    assert_eq!(node, &due.names().current.node);
    assert_eq!(metadata[CHECKPOINT_REQUEST_METADATA], "2026-03-02T10:04:00Z");
    assert_eq!(
        metadata["startup-script"], "#!/bin/bash\ntrain",
        "the node's other metadata is sent back whole"
    );
    assert_eq!(
        p.verdict.said().progress,
        Progress::Ready,
        "the slice stays Ready"
    );

    let mut asked = due;
    let n = asked.observed.node.as_mut().unwrap();
    n.metadata
        .insert(CHECKPOINT_REQUEST_METADATA.into(), "2026-03-02T10:04:00Z".into());
    assert_eq!(asked.plan().action, Action::Nothing, "asked once per window");
    assert_eq!(
        maintenance::next_request(&asked.slice.spec, &asked.observed),
        None
    );
}

#[test]
fn nothing_is_asked_under_way_without_a_workload_or_with_a_zero_lead() {
    assert_eq!(
        running_case("2026-03-02T09:59:00Z", "ONGOING").plan().action,
        Action::Nothing
    );
    let mut bare = running_case("2026-03-02T10:01:00Z", "PENDING");
    bare.slice.spec.startup_script = None;
    let n = bare.node(S::Ready, H::Healthy);
    bare.observed.node = Some(noticed(n, "2026-03-02T10:01:00Z", "PENDING"));
    assert_eq!(
        bare.plan().action,
        Action::Nothing,
        "nothing runs that could checkpoint"
    );
    let mut zero = running_case("2026-03-02T10:01:00Z", "PENDING");
    zero.slice.spec.maintenance = Some(serde_json::from_value(json!({"checkpointLead": "0s"})).unwrap());
    assert_eq!(zero.plan().action, Action::Nothing, "0s never asks");
}

fn reported(old: &TpuSliceStatus, observed: &Observed) -> TpuSliceStatus {
    let mut st = old.clone();
    maintenance::report(&mut st, old, observed, &Action::Nothing, false, now());
    st
}

#[test]
fn status_counts_one_restart_per_maintenance_and_says_when_it_is_over() {
    let pending = running_case("2026-03-02T11:00:00Z", "PENDING");
    let s1 = reported(&TpuSliceStatus::default(), &pending.observed);
    let m = s1.maintenance.as_ref().unwrap();
    assert_eq!(
        (m.kind.as_str(), m.state),
        ("Scheduled", MaintenanceState::Pending)
    );
    let c = find_condition(&s1.conditions, types::MAINTENANCE_PENDING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "MaintenanceScheduled")
    );
    let events = maintenance::transitions(&TpuSliceStatus::default(), &s1);
    assert_eq!(events.len(), 1, "{events:?}");

    let mut ongoing = running_case("2026-03-02T11:00:00Z", "ONGOING");
    ongoing.observed.node.as_mut().unwrap().health = H::UnhealthyMaintenance;
    let s2 = reported(&s1, &ongoing.observed);
    assert_eq!(s2.maintenance_restarts, 1);
    let s3 = reported(&s2, &ongoing.observed);
    assert_eq!(
        s3.maintenance_restarts, 1,
        "counted once however many passes see it"
    );
    assert!(maintenance::transitions(&s2, &s3).is_empty());

    let over = Case::spot().with_node(S::Ready, H::Healthy);
    let s4 = reported(&s3, &over.observed);
    let last = s4.maintenance.as_ref().expect("the last maintenance is kept");
    assert_eq!(
        (last.state, s4.maintenance_restarts),
        (MaintenanceState::Ended, 1)
    );
    let c = find_condition(&s4.conditions, types::MAINTENANCE_PENDING).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "NoMaintenance"));
    let events = maintenance::transitions(&s3, &s4);
    assert_eq!(events.len(), 1, "{events:?}");
}

/// `n` under a reschedulable notice whose window starts at `start`, its checkpoint asked for
/// (the node carries the request).
fn reschedulable(n: Node, start: &str) -> Node {
    let mut wire = serde_json::to_value(noticed(n, start, "PENDING")).unwrap();
    wire["upcomingMaintenance"]["canReschedule"] = json!(true);
    let mut n: Node = serde_json::from_value(wire).unwrap();
    n.metadata
        .insert(CHECKPOINT_REQUEST_METADATA.into(), start.into());
    n
}

/// A reschedulable notice whose checkpoint was asked for (the node carries the request).
fn asked_reschedulable(start: &str) -> Case {
    let mut c = running_case(start, "PENDING");
    let n = c.observed.node.take().unwrap();
    c.observed.node = Some(reschedulable(n, start));
    c
}

#[test]
fn a_reschedulable_maintenance_is_started_once_the_asked_checkpoint_is_committed() {
    let waiting = asked_reschedulable("2026-03-02T10:04:00Z");
    assert_eq!(waiting.plan().action, Action::Nothing, "no commit seen yet");

    let mut committed = asked_reschedulable("2026-03-02T10:04:00Z");
    committed.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let p = committed.plan();
    assert_eq!(
        p.action,
        Action::PerformMaintenance {
            node: committed.names().current.node,
            queued: None,
        }
    );
    assert_eq!(
        p.verdict.said().progress,
        Progress::Ready,
        "the slice stays Ready"
    );

    let mut fixed = asked_reschedulable("2026-03-02T10:04:00Z");
    fixed.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let n = fixed.observed.node.as_mut().unwrap();
    let mut wire = serde_json::to_value(&*n).unwrap();
    wire["upcomingMaintenance"]["canReschedule"] = json!(false);
    *n = serde_json::from_value(wire).unwrap();
    assert_eq!(
        fixed.plan().action,
        Action::Nothing,
        "Google does not let it move"
    );
}

#[test]
fn an_early_start_is_reported_once_with_the_checkpoint_it_followed() {
    let mut c = asked_reschedulable("2026-03-02T10:04:00Z");
    c.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let before = reported(&TpuSliceStatus::default(), &c.observed);
    let action = Action::PerformMaintenance {
        node: c.names().current.node,
        queued: None,
    };
    let mut st = before.clone();
    maintenance::report(&mut st, &before, &c.observed, &action, true, now());
    let m = st.maintenance.as_ref().unwrap();
    assert!(m.start_request_time.is_some(), "{m:?}");
    assert_eq!(m.committed_checkpoint.as_deref(), Some("gs://b/c/150/"));
    let events = maintenance::transitions(&before, &st);
    assert!(
        events.iter().any(|e| e.reason == "MaintenanceStartedEarly"),
        "{events:?}"
    );
    // The next pass sees it under way, its window now starting when it began: the same
    // maintenance, its request and start kept, and nothing announced again.
    let mut ongoing = running_case("2026-03-02T10:00:00Z", "ONGOING");
    ongoing.observed.node.as_mut().unwrap().health = H::UnhealthyMaintenance;
    let next = reported(&st, &ongoing.observed);
    let n = next.maintenance.as_ref().unwrap();
    assert_eq!(n.state, MaintenanceState::Ongoing);
    assert_eq!(n.start_request_time, m.start_request_time);
    assert_eq!(n.checkpoint_request_time, m.checkpoint_request_time);
    assert_eq!(next.maintenance_restarts, 1);
    let again = maintenance::transitions(&st, &next);
    assert!(again.is_empty(), "{again:?}");
}

/// A queued slice's node is maintained through its queued resource, naming that node only.
#[test]
fn a_queued_slices_maintenance_is_started_through_its_queued_resource() {
    let mut c = Case::queued();
    c.slice.spec.startup_script = Some("#!/bin/bash\ntrain".into());
    let names = c.names();
    let queued = names.current.queued.clone().unwrap();
    c.observed.queued = Some(qr(&queued, "ACTIVE", "USER"));
    let n = c.node(S::Ready, H::Healthy);
    c.observed.node = Some(reschedulable(n, "2026-03-02T10:04:00Z"));
    assert_eq!(c.plan().action, Action::Nothing, "no commit seen yet");
    c.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    assert_eq!(
        c.plan().action,
        Action::PerformMaintenance {
            node: names.current.node,
            queued: Some(queued)
        }
    );
}

/// A multislice's slice under notice is started alone, through its own queued resource, once
/// every slice runs.
#[test]
fn a_multislice_slice_is_started_through_its_own_queued_resource() {
    let mut c = Case::queued();
    c.slice.spec.startup_script = Some("#!/bin/bash\ntrain".into());
    c.slice.spec.multislice = Some(tpu_operator_api::tpu_slice::Multislice {
        node_count: 3,
        max_slice_restarts: Some(2),
    });
    let names = c.names();
    let desired = c.desired();
    let coordinator = format!("10.0.0.2:{}", spec::MEGASCALE_PORT);
    let node = |k: usize, name: &str| {
        let d = spec::slice_desired(&desired, k, Some(&coordinator));
        let mut n = Node::new()
            .set_name(name)
            .set_state(S::Ready)
            .set_health(H::Healthy)
            .set_labels(d.labels)
            .set_metadata(d.metadata)
            .set_tags(d.tags);
        if k == 0 {
            n = n.set_network_endpoints([
                tpu_operator_gcp::tpu_v2::model::NetworkEndpoint::new().set_ip_address("10.0.0.2")
            ]);
        }
        n
    };
    let mut nodes: Vec<Option<Node>> = std::iter::once(&names.current.node)
        .chain(&names.current.other_slices)
        .enumerate()
        .map(|(k, name)| Some(node(k, name)))
        .collect();
    let ready = nodes[1].take().unwrap();
    nodes[1] = Some(reschedulable(ready, "2026-03-02T10:04:00Z"));
    let queue = |k: usize| qr(names.current.slice_queue(k).unwrap(), "ACTIVE", "USER");
    c.observed.queued = Some(queue(0));
    c.observed.other_queues = vec![Some(queue(1)), Some(queue(2))];
    c.observed.node = nodes[0].clone();
    c.observed.other_slices = nodes[1..].to_vec();
    assert_eq!(c.plan().action, Action::Nothing, "no commit seen yet");
    c.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let p = c.plan();
    assert_eq!(
        p.action,
        Action::PerformMaintenance {
            node: names.current.other_slices[0].clone(),
            queued: names.current.slice_queue(1).map(str::to_string),
        }
    );
    assert_eq!(p.verdict.said().progress, Progress::Ready, "{p:?}");
}

/// Compute Engine has no node updates, but starts a maintenance early as the TPU API does.
#[test]
fn a_compute_engine_slice_starts_its_maintenance_early_too() {
    use tpu_operator_api::tpu_slice::{ComputeEngineOptions, Provisioner};
    let mut c = asked_reschedulable("2026-03-02T10:04:00Z");
    c.slice.spec.provisioner = Provisioner::ComputeEngine;
    c.slice.spec.runtime_version = String::new();
    c.slice.spec.compute_engine = Some(ComputeEngineOptions {
        image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts".into(),
        boot_disk_size_gb: None,
    });
    c.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let p = c.plan();
    assert_eq!(
        p.action,
        Action::PerformMaintenance {
            node: c.names().current.node,
            queued: None
        }
    );
}

/// Once the maintenance is under way (started by this operator, whose status write may have
/// been lost, or by Google) nothing starts it again.
#[test]
fn a_maintenance_under_way_is_not_started_again() {
    let mut c = asked_reschedulable("2026-03-02T10:04:00Z");
    c.observed.committed_checkpoint = Some("gs://b/c/150/".into());
    let n = c.observed.node.as_mut().unwrap();
    let mut wire = serde_json::to_value(&*n).unwrap();
    wire["upcomingMaintenance"]["maintenanceStatus"] = json!("ONGOING");
    *n = serde_json::from_value(wire).unwrap();
    assert_eq!(c.plan().action, Action::Nothing);
    c.observed.node.as_mut().unwrap().health = H::UnhealthyMaintenance;
    assert_eq!(c.plan().action, Action::Nothing);
}
