use std::collections::BTreeMap;

use google_cloud_compute_v1::model::{
    self as compute, Instance, InstanceGroupManager, InstanceGroupManagerResizeRequest, ManagedInstance,
    NetworkInterface, Scheduling, instance, managed_instance, scheduling,
};
use google_cloud_tpu_v2::model::{node, queued_resource_state};

use super::*;

fn request(hosts: u32, provisioning: Provisioning) -> SliceRequest {
    SliceRequest {
        project: "p".into(),
        zone: "us-east5-b".into(),
        id: "team-a-train-1234abcd".into(),
        machine_type: "ct6e-standard-4t".into(),
        hosts,
        topology: "4x4".into(),
        accelerator_type: "v6e-16".into(),
        image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts".into(),
        boot_disk_gb: 100,
        provisioning,
        labels: BTreeMap::from([("tpu-operator-uid".into(), "u1".into())]),
        metadata: BTreeMap::from([("startup-script".into(), "echo".into())]),
        network: None,
        subnetwork: None,
        external_ips: false,
        tags: vec![],
        service_account: None,
        description: "tpu-operator TpuSlice team-a/train".into(),
    }
}

#[test]
fn names_and_regions() {
    assert_eq!(region_of("us-east5-b"), "us-east5");
    assert_eq!(
        parse_tpu_name("projects/p/locations/us-east5-b/nodes/n1", "nodes"),
        Some(("p", "us-east5-b", "n1"))
    );
    assert_eq!(
        parse_tpu_name("projects/p/locations/z/queuedResources/q", "nodes"),
        None
    );
    assert_eq!(base_instance_name(&"a-".repeat(40)).len(), 57);
}

#[test]
fn layout_and_bodies() {
    let single = SliceRequest {
        hosts: 1,
        machine_type: "ct6e-standard-8t".into(),
        ..request(1, Provisioning::Spot)
    };
    assert_eq!(single.layout(), Layout::Instance);
    let body = instance_body(&single);
    assert_eq!(
        body.machine_type.as_deref(),
        Some("zones/us-east5-b/machineTypes/ct6e-standard-8t")
    );
    let s = body.scheduling.unwrap();
    assert_eq!(s.provisioning_model, Some(scheduling::ProvisioningModel::Spot));
    assert_eq!(
        s.instance_termination_action,
        Some(scheduling::InstanceTerminationAction::Stop)
    );

    let multi = request(4, Provisioning::Standard);
    assert_eq!(multi.layout(), Layout::Group);
    let group = manager_body(&multi);
    assert_eq!(group.target_size, Some(4));
    assert_eq!(
        group.resource_policies.unwrap().workload_policy.as_deref(),
        Some("projects/p/regions/us-east5/resourcePolicies/team-a-train-1234abcd")
    );
    let policy = policy_body(&multi).workload_policy.unwrap();
    assert_eq!(policy.accelerator_topology.as_deref(), Some("4x4"));

    let flex = request(1, Provisioning::FlexStart { run_seconds: 3600 });
    assert_eq!(flex.layout(), Layout::Group, "resize requests need a group");
    assert!(!needs_policy(&flex));
    assert_eq!(manager_body(&flex).target_size, Some(0));
    assert_eq!(resize_body(&flex, 3600).resize_by, Some(1));
}

fn vm(name: &str, status: instance::Status, spot: bool) -> Instance {
    let mut i = Instance::new()
        .set_name(name)
        .set_status(status)
        .set_network_interfaces([NetworkInterface::new().set_network_ip(format!("10.0.0.{}", name.len()))]);
    if spot {
        i = i.set_scheduling(Scheduling::new().set_provisioning_model(scheduling::ProvisioningModel::Spot));
    }
    i
}

#[test]
fn instance_states_map_to_node_states() {
    use instance::Status as S;
    for (status, spot, want) in [
        (S::Provisioning, false, node::State::Creating),
        (S::Running, false, node::State::Ready),
        (S::Stopping, false, node::State::Deleting),
        (S::Terminated, true, node::State::Preempted),
        (S::Terminated, false, node::State::Terminated),
    ] {
        let n = instance_node("projects/p/locations/z/nodes/n", "v6e-8", &vm("n", status, spot));
        assert_eq!(n.state, want);
    }
}

#[test]
fn a_group_is_ready_only_with_every_host_running() {
    let manager = InstanceGroupManager::new().set_target_size(2);
    let member = |action| ManagedInstance::new().set_current_action(action);
    let up = [
        vm("g-aaaa", instance::Status::Running, false),
        vm("g-bbbb", instance::Status::Running, false),
    ];
    let none = managed_instance::CurrentAction::None;
    let node = group_node(
        "n",
        "v6e-16",
        &manager,
        None,
        &[member(none.clone()), member(none.clone())],
        &up,
    );
    assert_eq!(node.state, node::State::Ready);
    assert_eq!(node.network_endpoints.len(), 2);
    let half = group_node("n", "v6e-16", &manager, None, &[member(none.clone())], &up[..1]);
    assert_eq!(half.state, node::State::Creating);
    let preempted = [
        vm("g-aaaa", instance::Status::Running, true),
        vm("g-bbbb", instance::Status::Terminated, true),
    ];
    let node = group_node(
        "n",
        "v6e-16",
        &manager,
        None,
        &[member(none.clone()), member(none)],
        &preempted,
    );
    assert_eq!(node.state, node::State::Preempted);
    let deleting = member(managed_instance::CurrentAction::Deleting);
    let node = group_node("n", "v6e-16", &manager, None, &[deleting], &up[..1]);
    assert_eq!(node.state, node::State::Deleting);
    let empty = group_node(
        "n",
        "v6e-16",
        &InstanceGroupManager::new().set_target_size(0),
        None,
        &[],
        &[],
    );
    assert_eq!(empty.state, node::State::Stopped);
}

#[test]
fn resize_request_states_map_to_queued_states() {
    use compute::instance_group_manager_resize_request::State as R;
    use queued_resource_state::State as Q;
    let state = |r: R, members| {
        resize_queued(
            "q",
            &InstanceGroupManagerResizeRequest::new().set_state(r),
            members,
        )
        .state
        .unwrap()
    };
    assert_eq!(state(R::Accepted, 0).state, Q::WaitingForResources);
    assert_eq!(state(R::Creating, 0).state, Q::Creating);
    assert_eq!(state(R::Succeeded, 2).state, Q::Active);
    let over = state(R::Succeeded, 0);
    assert_eq!(over.state, Q::Failed);
    assert_eq!(over.failed_data().unwrap().error.as_ref().unwrap().code, 4);
    assert_eq!(state(R::Cancelled, 0).state, Q::Suspended);
}

#[test]
fn failed_operations_carry_the_compute_code() {
    let op = compute::Operation::new()
        .set_status(compute::operation::Status::Done)
        .set_error(
            compute::operation::Error::new().set_errors([compute::operation::error::Errors::new()
                .set_code("ZONE_RESOURCE_POOL_EXHAUSTED")
                .set_message("no capacity")]),
        );
    let lro = operation("projects/p/zones/z/operations/o", &op);
    assert!(lro.done);
    let err = crate::operation_state(crate::Service::Compute, &lro);
    match err {
        crate::OperationState::Failed(e) => {
            assert_eq!(e.exhaustion(), Some(crate::Exhaustion::Stockout));
        }
        other => panic!("{other:?}"),
    }
    let running = compute::Operation::new().set_status(compute::operation::Status::Running);
    assert!(!operation("x", &running).done);
}

/// What a listing of the zone shows of a slice compares equal to the slice read by name while
/// nothing changes, and differs once a host is preempted or gets a notice.
#[test]
fn a_listed_slice_compares_like_the_slice_read_by_name() {
    let parent = "projects/p/locations/z";
    let seen = |n: &google_cloud_tpu_v2::model::Node| {
        let m =
            crate::maintenance::upcoming_maintenance(n).map(|m| (m.maintenance_status, m.window_start_time));
        (n.state.clone(), n.health.clone(), m)
    };
    let notice: compute::UpcomingMaintenance = serde_json::from_value(serde_json::json!({
        "type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": "PENDING",
        "windowStartTime": "2026-12-01T10:00:00Z"
    }))
    .unwrap();
    let mut host_b = vm("grp-slice-1-bbbb", instance::Status::Running, false);
    let hosts = vec![
        vm("grp-slice-1-aaaa", instance::Status::Running, false),
        host_b.clone(),
    ];
    let single = vm("one-slice-1", instance::Status::Running, false);
    let listing = |hosts: Vec<Instance>| {
        let mut all = hosts;
        all.push(single.clone());
        listed_slices(parent, all)
    };
    let find = |nodes: &[google_cloud_tpu_v2::model::Node], name: &str| {
        nodes.iter().find(|n| n.name == name).cloned().expect(name)
    };
    let group_name = watch_name(&format!("{parent}/nodes/grp-slice-1"), true).unwrap();
    let single_name = watch_name(&format!("{parent}/nodes/one-slice-1"), false).unwrap();
    let manager = InstanceGroupManager::new().set_target_size(2);
    let members = [ManagedInstance::new(), ManagedInstance::new()];
    let read = group_node("n", "v6e-16", &manager, None, &members, &hosts);
    let listed = listing(hosts.clone());
    assert_eq!(seen(&find(&listed, &group_name)), seen(&read));
    let one = instance_node("n", "v6e-8", &single);
    assert_eq!(seen(&find(&listed, &single_name)), seen(&one));

    // A notice on one host shows on the group as read and as listed alike.
    host_b.resource_status = Some(compute::ResourceStatus::new().set_upcoming_maintenance(notice));
    let noticed = vec![hosts[0].clone(), host_b];
    let read = group_node("n", "v6e-16", &manager, None, &members, &noticed);
    let listed = listing(noticed.clone());
    assert_eq!(seen(&find(&listed, &group_name)), seen(&read));
    assert_ne!(
        seen(&read),
        seen(&group_node("n", "v6e-16", &manager, None, &members, &hosts))
    );
    // A preempted host leaves READY.
    let preempted = vec![
        hosts[0].clone(),
        vm("grp-slice-1-bbbb", instance::Status::Terminated, true),
    ];
    assert_eq!(
        find(&listing(preempted), &group_name).state,
        node::State::Preempted
    );
}
