//! Compute Engine v1 against the emulator, through Google's official Rust client
//! (`google-cloud-compute-v1`, REST): instances, regional instance templates, workload policies,
//! MIGs of TPU VMs, flex-start resize requests, operations, errors and faults.

use crate::common;

use common::*;
use gcp_emulator::{Emulator, Fault};
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_compute_v1::client::{
    InstanceGroupManagerResizeRequests, InstanceGroupManagers, Instances, RegionInstanceTemplates,
    ResourcePolicies, ZoneOperations,
};
use google_cloud_compute_v1::model::{
    Duration as CDuration, Instance, InstanceGroupManager, InstanceGroupManagerResizeRequest,
    InstanceGroupManagerResourcePolicies, InstanceProperties, InstanceTemplate, Metadata, Operation,
    ResourcePolicy, ResourcePolicyWorkloadPolicy, Scheduling, instance,
    instance_group_manager_resize_request, managed_instance, metadata, operation,
    resource_policy_workload_policy, scheduling,
};
use serde_json::json;

const P: &str = "p";
const ZONE: &str = "us-east5-b";
const REGION: &str = "us-east5";

struct Clients {
    instances: Instances,
    templates: RegionInstanceTemplates,
    policies: ResourcePolicies,
    igms: InstanceGroupManagers,
    resize: InstanceGroupManagerResizeRequests,
    ops: ZoneOperations,
}

macro_rules! client {
    ($t:ty, $emu:expr) => {
        <$t>::builder()
            .with_endpoint($emu.url())
            .with_credentials(Anonymous::new().build())
            .build()
            .await
            .expect("compute client")
    };
}

async fn clients(emu: &Emulator) -> Clients {
    Clients {
        instances: client!(Instances, emu),
        templates: client!(RegionInstanceTemplates, emu),
        policies: client!(ResourcePolicies, emu),
        igms: client!(InstanceGroupManagers, emu),
        resize: client!(InstanceGroupManagerResizeRequests, emu),
        ops: client!(ZoneOperations, emu),
    }
}

async fn zone_op(c: &Clients, op: &Operation) -> Operation {
    c.ops
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_operation(op.name.clone().expect("operation name"))
        .send()
        .await
        .expect("zoneOperations.get")
}

fn machine(t: &str) -> String {
    format!("zones/{ZONE}/machineTypes/{t}")
}

fn vm(name: &str, t: &str) -> Instance {
    Instance::new()
        .set_name(name)
        .set_machine_type(machine(t))
        .set_labels([("owner", "op"), ("slice", name)])
        .set_metadata(
            Metadata::new().set_items([metadata::Items::new()
                .set_key("startup-script")
                .set_value("echo hi")]),
        )
        .set_scheduling(
            Scheduling::new()
                .set_on_host_maintenance(scheduling::OnHostMaintenance::Terminate)
                .set_automatic_restart(false),
        )
}

async fn get_vm(c: &Clients, name: &str) -> Result<Instance, google_cloud_compute_v1::Error> {
    c.instances
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance(name)
        .send()
        .await
}

/// Inserts `vm-1` and checks the returned operation: RUNNING, an `insert`, targeting the VM.
async fn insert_vm_1(c: &Clients) -> Operation {
    let op = c
        .instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("vm-1", "ct6e-standard-4t"))
        .send()
        .await
        .expect("insert");
    assert_eq!(op.status, Some(operation::Status::Running));
    assert_eq!(op.operation_type.as_deref(), Some("insert"));
    assert!(
        op.target_link
            .as_deref()
            .unwrap()
            .ends_with("/zones/us-east5-b/instances/vm-1")
    );
    op
}

/// Walks `vm-1` through PROVISIONING (60s) and STAGING (30s) to RUNNING; returns the running VM.
async fn provision_vm_1(emu: &Emulator, c: &Clients) -> Instance {
    let v = get_vm(c, "vm-1").await.unwrap();
    assert_eq!(v.status, Some(instance::Status::Provisioning));
    emu.clock().advance(secs(60));
    assert_eq!(
        get_vm(c, "vm-1").await.unwrap().status,
        Some(instance::Status::Staging)
    );
    emu.clock().advance(secs(30));
    let v = get_vm(c, "vm-1").await.unwrap();
    assert_eq!(v.status, Some(instance::Status::Running));
    v
}

/// The running `vm-1` carries what was sent (machine type, labels, metadata, scheduling) and
/// what the service fills in (an internal IP, id, self link, creation time).
fn assert_vm_1_fields(v: &Instance) {
    assert!(
        v.machine_type
            .as_deref()
            .unwrap()
            .ends_with("/zones/us-east5-b/machineTypes/ct6e-standard-4t")
    );
    assert_eq!(v.labels.get("owner").map(String::as_str), Some("op"));
    let items = &v.metadata.as_ref().unwrap().items;
    assert_eq!(items[0].key.as_deref(), Some("startup-script"));
    assert!(
        v.network_interfaces[0]
            .network_ip
            .as_deref()
            .unwrap()
            .starts_with("10.128.")
    );
    assert!(v.id.is_some() && v.self_link.is_some() && v.creation_timestamp.is_some());
    assert_eq!(
        v.scheduling.as_ref().unwrap().automatic_restart,
        Some(false),
        "values at their default are kept as sent"
    );
}

/// With a second VM (`other`, unlabelled) inserted, `instances.list` filters on labels (equality,
/// presence, conjunction) and name, and a filter matching nothing gives an empty list.
async fn assert_list_filters(c: &Clients) {
    c.instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(
            Instance::new()
                .set_name("other")
                .set_machine_type(machine("ct6e-standard-1t")),
        )
        .send()
        .await
        .unwrap();
    let names = |l: google_cloud_compute_v1::model::InstanceList| -> Vec<String> {
        l.items.into_iter().filter_map(|i| i.name).collect()
    };
    let list = |f: &str| {
        c.instances
            .list()
            .set_project(P)
            .set_zone(ZONE)
            .set_filter(f.to_string())
            .send()
    };
    assert_eq!(names(list("labels.owner = \"op\"").await.unwrap()), ["vm-1"]);
    assert_eq!(names(list("labels.owner:*").await.unwrap()), ["vm-1"]);
    assert_eq!(
        names(
            list("labels.owner = \"op\" labels.slice = \"vm-1\"")
                .await
                .unwrap()
        ),
        ["vm-1"]
    );
    assert_eq!(names(list("name = \"other\"").await.unwrap()), ["other"]);
    assert_eq!(
        names(list("labels.owner = \"nobody\"").await.unwrap()),
        Vec::<String>::new()
    );
}

/// Deletes `vm-1`: STOPPING, then after 30s gone (404 "was not found") with its operation DONE.
async fn delete_vm_1_until_gone(emu: &Emulator, c: &Clients) {
    let del = c
        .instances
        .delete()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance("vm-1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        get_vm(c, "vm-1").await.unwrap().status,
        Some(instance::Status::Stopping)
    );
    emu.clock().advance(secs(30));
    let err = get_vm(c, "vm-1").await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(404));
    let status = err.status().expect("a service error");
    assert!(status.message.contains("was not found"), "{}", status.message);
    assert_eq!(zone_op(c, &del).await.status, Some(operation::Status::Done));
}

#[tokio::test]
async fn instance_lifecycle_labels_list_filter_and_delete() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    let op = insert_vm_1(&c).await;
    let v = provision_vm_1(&emu, &c).await;
    assert_vm_1_fields(&v);
    let done = zone_op(&c, &op).await;
    assert_eq!(done.status, Some(operation::Status::Done));
    assert!(done.error.is_none());

    // A second VM without the label; filters.
    assert_list_filters(&c).await;

    // Delete: STOPPING, then gone (404 notFound).
    delete_vm_1_until_gone(&emu, &c).await;
    assert_eq!(emu.resource_counts().instances, 1);
}

#[tokio::test]
async fn duplicate_is_409_already_exists_and_request_id_replays_the_operation() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    let insert = |rid: &str| {
        c.instances
            .insert()
            .set_project(P)
            .set_zone(ZONE)
            .set_request_id(rid.to_string())
            .set_body(vm("dup", "ct5p-hightpu-4t"))
            .send()
    };
    let a = insert("5ef2bd8e-6c1e-4d3b-9a53-8f4f6a1c2d3e").await.unwrap();
    let b = insert("5ef2bd8e-6c1e-4d3b-9a53-8f4f6a1c2d3e").await.unwrap();
    assert_eq!(a.name, b.name, "the same requestId returns the same operation");
    assert_eq!(emu.call_count("compute", "instances.insert"), 2);
    assert_eq!(
        insert("not-a-uuid").await.unwrap_err().http_status_code(),
        Some(400)
    );
    let err = insert("0b7c7a86-0f6a-4b9c-8f35-3f0d2f7e9a11").await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(409));
    let status = err.status().unwrap();
    // No `status` field in Compute's error body: the client reports Code::Unknown, the HTTP
    // status and the `errors[].reason` as an ErrorInfo detail.
    assert_eq!(status.code, google_cloud_gax::error::rpc::Code::Unknown);
    assert!(status.message.contains("already exists"), "{}", status.message);
    let reason = status.details.iter().find_map(|d| match d {
        google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(i) => Some(i.reason.clone()),
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some("alreadyExists"));
}

#[tokio::test]
async fn stockout_fails_the_insert_operation_with_zone_resource_pool_exhausted() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    emu.inject(Fault::Stockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    let op = c
        .instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("starved", "ct6e-standard-8t"))
        .send()
        .await
        .expect("the call is accepted");
    emu.clock().advance(secs(60));
    let done = zone_op(&c, &op).await;
    assert_eq!(done.status, Some(operation::Status::Done));
    let e = &done.error.as_ref().expect("operation error").errors[0];
    assert_eq!(e.code.as_deref(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
    assert!(
        e.message
            .as_deref()
            .unwrap()
            .contains("does not have enough resources")
    );
    assert_eq!(done.http_error_status_code, Some(503));
    assert_eq!(
        get_vm(&c, "starved").await.unwrap_err().http_status_code(),
        Some(404)
    );

    // A capacity limit (hosts per machine type) acts the same way.
    emu.clear_faults();
    emu.set_compute_capacity(ZONE, "ct5p-hightpu-4t", Some(1));
    for n in ["a", "b"] {
        c.instances
            .insert()
            .set_project(P)
            .set_zone(ZONE)
            .set_body(vm(n, "ct5p-hightpu-4t"))
            .send()
            .await
            .unwrap();
    }
    emu.clock().advance(secs(90));
    assert_eq!(
        get_vm(&c, "a").await.unwrap().status,
        Some(instance::Status::Running)
    );
    assert_eq!(get_vm(&c, "b").await.unwrap_err().http_status_code(), Some(404));
}

#[tokio::test]
async fn spot_preemption_stops_or_deletes_per_termination_action() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    for (name, action) in [
        ("spot-stop", scheduling::InstanceTerminationAction::Stop),
        ("spot-del", scheduling::InstanceTerminationAction::Delete),
    ] {
        let body = vm(name, "ct6e-standard-4t").set_scheduling(
            Scheduling::new()
                .set_provisioning_model(scheduling::ProvisioningModel::Spot)
                .set_instance_termination_action(action)
                .set_on_host_maintenance(scheduling::OnHostMaintenance::Terminate),
        );
        c.instances
            .insert()
            .set_project(P)
            .set_zone(ZONE)
            .set_body(body)
            .send()
            .await
            .unwrap();
    }
    c.instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("standard", "ct6e-standard-4t"))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(90));
    assert!(
        emu.preempt_instance("standard").is_err(),
        "only Spot VMs are preempted"
    );
    emu.preempt_instance("spot-stop").unwrap();
    emu.preempt_instance(&format!("projects/{P}/zones/{ZONE}/instances/spot-del"))
        .unwrap();
    assert_eq!(
        get_vm(&c, "spot-stop").await.unwrap().status,
        Some(instance::Status::Stopping)
    );
    emu.clock().advance(secs(30));
    assert_eq!(
        get_vm(&c, "spot-stop").await.unwrap().status,
        Some(instance::Status::Terminated)
    );
    assert_eq!(
        get_vm(&c, "spot-del").await.unwrap_err().http_status_code(),
        Some(404)
    );
}

async fn template(c: &Clients, name: &str, t: &str, flex: bool) {
    let mut sched = Scheduling::new().set_on_host_maintenance(scheduling::OnHostMaintenance::Terminate);
    if flex {
        sched = sched
            .set_provisioning_model(scheduling::ProvisioningModel::FlexStart)
            .set_instance_termination_action(scheduling::InstanceTerminationAction::Delete);
    }
    c.templates
        .insert()
        .set_project(P)
        .set_region(REGION)
        .set_body(
            InstanceTemplate::new().set_name(name).set_properties(
                InstanceProperties::new()
                    .set_machine_type(t)
                    .set_labels([("owner", "op")])
                    .set_metadata(
                        Metadata::new().set_items([metadata::Items::new()
                            .set_key("startup-script")
                            .set_value("train")]),
                    )
                    .set_scheduling(sched),
            ),
        )
        .send()
        .await
        .expect("template insert");
}

async fn policy(c: &Clients, name: &str, topology: &str) {
    c.policies
        .insert()
        .set_project(P)
        .set_region(REGION)
        .set_body(
            ResourcePolicy::new().set_name(name).set_workload_policy(
                ResourcePolicyWorkloadPolicy::new()
                    .set_type(resource_policy_workload_policy::Type::HighThroughput)
                    .set_accelerator_topology(topology),
            ),
        )
        .send()
        .await
        .expect("policy insert");
}

fn mig(name: &str, tpl: &str, pol: Option<&str>, size: i32) -> InstanceGroupManager {
    let mut m = InstanceGroupManager::new()
        .set_name(name)
        .set_base_instance_name(name)
        .set_instance_template(format!("projects/{P}/regions/{REGION}/instanceTemplates/{tpl}"))
        .set_target_size(size);
    if let Some(p) = pol {
        m = m.set_resource_policies(
            InstanceGroupManagerResourcePolicies::new()
                .set_workload_policy(format!("projects/{P}/regions/{REGION}/resourcePolicies/{p}")),
        );
    }
    m
}

async fn managed(c: &Clients, name: &str) -> Vec<google_cloud_compute_v1::model::ManagedInstance> {
    c.igms
        .list_managed_instances()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(name)
        .send()
        .await
        .expect("listManagedInstances")
        .managed_instances
}

async fn insert_mig(
    c: &Clients,
    m: InstanceGroupManager,
) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.igms
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(m)
        .send()
        .await
}

async fn get_mig(c: &Clients, name: &str) -> InstanceGroupManager {
    c.igms
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(name)
        .send()
        .await
        .expect("instanceGroupManagers.get")
}

async fn delete_template(c: &Clients, name: &str) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.templates
        .delete()
        .set_project(P)
        .set_region(REGION)
        .set_instance_template(name)
        .send()
        .await
}

async fn delete_policy(c: &Clients, name: &str) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.policies
        .delete()
        .set_project(P)
        .set_region(REGION)
        .set_resource_policy(name)
        .send()
        .await
}

/// Inserts the 2-host MIG `slice` on `tpl` + `wp`: creating both hosts, then (after 90s) stable
/// with its insert operation DONE.
async fn create_slice_until_stable(emu: &Emulator, c: &Clients) {
    let op = insert_mig(c, mig("slice", "tpl", Some("wp"), 2)).await.unwrap();
    let g = get_mig(c, "slice").await;
    assert_eq!(g.target_size, Some(2));
    assert_eq!(g.status.as_ref().unwrap().is_stable, Some(false));
    assert_eq!(g.current_actions.as_ref().unwrap().creating, Some(2));
    emu.clock().advance(secs(90));
    assert_eq!(zone_op(c, &op).await.status, Some(operation::Status::Done));
    let g = get_mig(c, "slice").await;
    assert_eq!(g.status.as_ref().unwrap().is_stable, Some(true));
    assert_eq!(g.current_actions.as_ref().unwrap().none, Some(2));
}

/// Both members of `slice` run, are named `slice-XXXX`, and carry the template's metadata and
/// labels plus a `created-by` pointing at the MIG.
async fn assert_slice_members_from_template(c: &Clients) {
    let members = managed(c, "slice").await;
    assert_eq!(members.len(), 2);
    for m in &members {
        assert_eq!(m.instance_status, Some(managed_instance::InstanceStatus::Running));
        assert_eq!(m.current_action, Some(managed_instance::CurrentAction::None));
        let name = m
            .instance
            .as_deref()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        assert!(
            name.starts_with("slice-") && name.len() == "slice-".len() + 4,
            "{name}"
        );
        let v = get_vm(c, &name).await.unwrap();
        let items = &v.metadata.as_ref().unwrap().items;
        let created_by = items
            .iter()
            .find(|i| i.key.as_deref() == Some("created-by"))
            .unwrap();
        assert!(
            created_by
                .value
                .as_deref()
                .unwrap()
                .ends_with("/zones/us-east5-b/instanceGroupManagers/slice")
        );
        assert!(items.iter().any(|i| i.key.as_deref() == Some("startup-script")));
        assert_eq!(v.labels.get("owner").map(String::as_str), Some("op"));
    }
}

/// Deleting `slice`: its operation RUNNING with the members DELETING, then (after 30s) DONE with
/// no instances and no MIG left.
async fn delete_slice_until_gone(emu: &Emulator, c: &Clients) {
    let del = c
        .igms
        .delete()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("slice")
        .send()
        .await
        .unwrap();
    assert_eq!(zone_op(c, &del).await.status, Some(operation::Status::Running));
    assert_eq!(
        managed(c, "slice").await[0].current_action,
        Some(managed_instance::CurrentAction::Deleting)
    );
    emu.clock().advance(secs(30));
    assert_eq!(zone_op(c, &del).await.status, Some(operation::Status::Done));
    assert!(emu.instances().is_empty());
    assert!(emu.instance_group_managers().is_empty());
}

#[tokio::test]
async fn multi_host_mig_with_workload_policy_then_cleanup_in_order() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    template(&c, "tpl", "ct6e-standard-4t", false).await;
    policy(&c, "wp", "2x4").await;
    policy(&c, "wp-wrong", "4x4").await;

    // 2 hosts x 4 chips must match the topology's 8 chips.
    let err = insert_mig(&c, mig("bad", "tpl", Some("wp-wrong"), 2))
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));
    assert!(err.status().unwrap().message.contains("4x4"));

    create_slice_until_stable(&emu, &c).await;
    assert_slice_members_from_template(&c).await;

    // Template and policy are in use while the MIG exists.
    let err = delete_template(&c, "tpl").await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));
    assert!(err.status().unwrap().message.contains("already being used by"));
    let err = delete_policy(&c, "wp").await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));

    delete_slice_until_gone(&emu, &c).await;
    delete_template(&c, "tpl").await.unwrap();
    delete_policy(&c, "wp").await.unwrap();
    let counts = emu.resource_counts();
    assert_eq!((counts.instance_templates, counts.resource_policies), (0, 1));
}

async fn resize_request(
    c: &Clients,
    mig: &str,
    name: &str,
    by: i32,
    run_secs: i64,
) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.resize
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(mig)
        .set_body(
            InstanceGroupManagerResizeRequest::new()
                .set_name(name)
                .set_resize_by(by)
                .set_requested_run_duration(CDuration::new().set_seconds(run_secs)),
        )
        .send()
        .await
}

async fn rr(c: &Clients, mig: &str, name: &str) -> InstanceGroupManagerResizeRequest {
    c.resize
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(mig)
        .set_resize_request(name)
        .send()
        .await
        .expect("resize request get")
}

async fn cancel_rr(c: &Clients, mig: &str, name: &str) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.resize
        .cancel()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(mig)
        .set_resize_request(name)
        .send()
        .await
}

async fn delete_rr(c: &Clients, mig: &str, name: &str) -> Result<Operation, google_cloud_compute_v1::Error> {
    c.resize
        .delete()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(mig)
        .set_resize_request(name)
        .send()
        .await
}

/// A flex-start MIG must start empty: size 2 is refused, size 0 (`f` on `flex` + `wp`) is created.
async fn create_empty_flex_mig(c: &Clients) {
    let err = insert_mig(c, mig("f", "flex", Some("wp"), 2)).await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));
    insert_mig(c, mig("f", "flex", Some("wp"), 0)).await.unwrap();
}

/// Resize requests for a size that does not fit the topology, or for under 10 minutes, are 400.
async fn assert_bad_resize_requests_refused(c: &Clients) {
    assert_eq!(
        resize_request(c, "f", "r0", 3, 3600)
            .await
            .unwrap_err()
            .http_status_code(),
        Some(400)
    );
    assert_eq!(
        resize_request(c, "f", "r0", 2, 60)
            .await
            .unwrap_err()
            .http_status_code(),
        Some(400)
    );
}

/// With no capacity, request `r1` goes CREATING, then ACCEPTED (its operation DONE) and waits
/// with no VMs.
async fn request_r1_without_capacity(emu: &Emulator, c: &Clients) {
    use instance_group_manager_resize_request::State;
    emu.set_compute_capacity(ZONE, "ct6e-standard-4t", Some(0));
    let op = resize_request(c, "f", "r1", 2, 3600).await.unwrap();
    assert_eq!(rr(c, "f", "r1").await.state, Some(State::Creating));
    emu.clock().advance(secs(600));
    assert_eq!(zone_op(c, &op).await.status, Some(operation::Status::Done));
    assert_eq!(
        rr(c, "f", "r1").await.state,
        Some(State::Accepted),
        "waits for capacity"
    );
    assert!(emu.instances().is_empty());
}

/// When capacity returns, the MIG grows by `resizeBy` with all VMs at once; 90s later `r1` has
/// SUCCEEDED with every VM RUNNING as FLEX_START.
async fn capacity_returns_and_r1_succeeds(emu: &Emulator, c: &Clients) {
    use instance_group_manager_resize_request::State;
    emu.set_compute_capacity(ZONE, "ct6e-standard-4t", None);
    let g = get_mig(c, "f").await;
    assert_eq!(g.target_size, Some(2), "target size grows by resizeBy");
    assert_eq!(emu.instances().len(), 2, "all VMs at once");
    emu.clock().advance(secs(90));
    assert_eq!(rr(c, "f", "r1").await.state, Some(State::Succeeded));
    for v in emu.instances() {
        assert_eq!(v["status"], "RUNNING");
        assert_eq!(v["scheduling"]["provisioningModel"], "FLEX_START");
    }
}

#[tokio::test]
async fn flex_start_resize_request_waits_for_capacity_runs_and_ends() {
    use instance_group_manager_resize_request::State;
    let emu = emulator().await;
    let c = clients(&emu).await;
    template(&c, "flex", "ct6e-standard-4t", true).await;
    policy(&c, "wp", "2x4").await;
    // A flex-start MIG starts empty.
    create_empty_flex_mig(&c).await;

    // Wrong size for the topology, and a run duration under 10 minutes, are refused.
    assert_bad_resize_requests_refused(&c).await;

    request_r1_without_capacity(&emu, &c).await;
    capacity_returns_and_r1_succeeds(&emu, &c).await;
    // A SUCCEEDED request cannot be cancelled.
    let err = cancel_rr(&c, "f", "r1").await.unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));

    // The run ends requestedRunDuration after provisioning: VMs deleted, target size back to 0.
    emu.clock().advance(secs(3600 - 90));
    emu.clock().advance(secs(30));
    assert!(emu.instances().is_empty());
    let g = get_mig(&c, "f").await;
    assert_eq!(g.target_size, Some(0));
    assert_eq!(rr(&c, "f", "r1").await.state, Some(State::Succeeded));
    delete_rr(&c, "f", "r1").await.unwrap();
    assert!(emu.resize_requests().is_empty());
}

#[tokio::test]
async fn resize_request_cancel_and_delete_rules_and_failure() {
    use instance_group_manager_resize_request::State;
    let emu = emulator().await;
    let c = clients(&emu).await;
    template(&c, "flex", "ct6e-standard-1t", true).await;
    c.igms
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(mig("f", "flex", None, 0))
        .send()
        .await
        .unwrap();
    emu.inject(Fault::Stockout {
        zone: ZONE.into(),
        accelerator: "ct6e-standard-1t".into(),
    })
    .unwrap();
    resize_request(&c, "f", "r1", 1, 3600).await.unwrap();
    resize_request(&c, "f", "r2", 1, 3600).await.unwrap();
    emu.clock().advance(secs(10));
    // Active requests cannot be deleted.
    let err = c
        .resize
        .delete()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("f")
        .set_resize_request("r1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));
    c.resize
        .cancel()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("f")
        .set_resize_request("r1")
        .send()
        .await
        .unwrap();
    assert_eq!(rr(&c, "f", "r1").await.state, Some(State::Cancelled));
    c.resize
        .delete()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("f")
        .set_resize_request("r1")
        .send()
        .await
        .unwrap();

    emu.inject(Fault::FailResizeRequest {
        name: format!("projects/{P}/zones/{ZONE}/instanceGroupManagers/f/resizeRequests/r2"),
        message: None,
    })
    .unwrap();
    let r2 = rr(&c, "f", "r2").await;
    assert_eq!(r2.state, Some(State::Failed));
    let e = r2.status.unwrap().error.unwrap();
    assert_eq!(e.errors[0].code.as_deref(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
    let left: Vec<_> = emu
        .list_resources()
        .into_iter()
        .filter(|r| r.kind == "compute.resizeRequest")
        .collect();
    assert_eq!(left.len(), 1);
}

#[tokio::test]
async fn unknown_fields_and_machine_types_are_refused_naming_the_field() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    let base = format!("{}/compute/v1/projects/{P}/zones/{ZONE}/instances", emu.url());
    let http = reqwest::Client::new();
    let r = http
        .post(&base)
        .json(&json!({"name": "x", "machineType": machine("ct6e-standard-4t"), "bogus": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains("bogus"),
        "{body}"
    );
    assert_eq!(body["error"]["errors"][0]["domain"], "global");
    assert!(body["error"].get("status").is_none());

    let err = c
        .instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("x", "ct9z-standard-4t"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(400));
    assert!(err.status().unwrap().message.contains("resource.machineType"));

    // Flex-start templates must delete at the end of the run.
    let err = c
        .templates
        .insert()
        .set_project(P)
        .set_region(REGION)
        .set_body(
            InstanceTemplate::new().set_name("t").set_properties(
                InstanceProperties::new()
                    .set_machine_type("ct6e-standard-4t")
                    .set_scheduling(
                        Scheduling::new().set_provisioning_model(scheduling::ProvisioningModel::FlexStart),
                    ),
            ),
        )
        .send()
        .await
        .unwrap_err();
    assert!(
        err.status()
            .unwrap()
            .message
            .contains("instanceTerminationAction")
    );
    let _ = emu.compute_operations();
}

#[tokio::test]
async fn stocked_out_mig_keeps_trying_and_spot_members_are_recreated() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    c.templates
        .insert()
        .set_project(P)
        .set_region(REGION)
        .set_body(
            InstanceTemplate::new().set_name("spot").set_properties(
                InstanceProperties::new()
                    .set_machine_type("ct6e-standard-4t")
                    .set_scheduling(
                        Scheduling::new()
                            .set_provisioning_model(scheduling::ProvisioningModel::Spot)
                            .set_instance_termination_action(scheduling::InstanceTerminationAction::Delete)
                            .set_on_host_maintenance(scheduling::OnHostMaintenance::Terminate),
                    ),
            ),
        )
        .send()
        .await
        .unwrap();
    policy(&c, "wp", "2x4").await;
    emu.inject(Fault::Stockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    c.igms
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(mig("s", "spot", Some("wp"), 2))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(600));
    let g = c
        .igms
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("s")
        .send()
        .await
        .unwrap();
    assert_eq!(g.current_actions.as_ref().unwrap().creating, Some(2));
    assert_eq!(g.status.as_ref().unwrap().is_stable, Some(false));
    let waiting = managed(&c, "s").await;
    assert_eq!(waiting.len(), 2);
    assert_eq!(
        waiting[0].current_action,
        Some(managed_instance::CurrentAction::Creating)
    );
    let errs = &waiting[0]
        .last_attempt
        .as_ref()
        .unwrap()
        .errors
        .as_ref()
        .unwrap()
        .errors;
    assert_eq!(errs[0].code.as_deref(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
    assert!(emu.instances().is_empty());

    emu.inject(Fault::LiftStockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    assert_eq!(
        emu.instances().len(),
        2,
        "both hosts at once when capacity returns"
    );
    emu.clock().advance(secs(90));
    let first = emu.instances()[0]["name"].as_str().unwrap().to_string();
    emu.preempt_instance(&first).unwrap();
    emu.clock().advance(secs(30));
    let names: Vec<String> = emu
        .instances()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "the MIG recreates the preempted member: {names:?}"
    );
    assert!(!names.contains(&first));
}

#[tokio::test]
async fn poller_lost_replies_and_failed_calls() {
    use google_cloud_lro::Poller as _;
    let emu = emulator().await;
    let c = clients(&emu).await;
    let _t = ticker(emu.clock(), secs(10));
    let op = c
        .instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("polled", "tpu7x-standard-4t"))
        .poller()
        .until_done()
        .await
        .expect("the poller follows zoneOperations.get to DONE");
    assert_eq!(op.status, Some(operation::Status::Done));
    drop(_t);

    emu.inject(Fault::LoseReply {
        service: "compute".into(),
        method: "instances.insert".into(),
        count: 1,
        code: None,
    })
    .unwrap();
    let err = c
        .instances
        .insert()
        .set_project(P)
        .set_zone(ZONE)
        .set_body(vm("lost", "ct6e-standard-4t"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(503));
    assert!(get_vm(&c, "lost").await.is_ok(), "the insert happened");

    emu.inject(Fault::FailCalls {
        service: "compute".into(),
        method: "instanceGroupManagers.get".into(),
        count: 1,
        code: gcp_emulator::Code::PermissionDenied,
        message: None,
    })
    .unwrap();
    let err = c
        .igms
        .get()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(403));

    // The admin HTTP API lists Compute resources too.
    let body: serde_json::Value = reqwest::get(format!("{}/emulator/v1/instances", emu.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["items"].as_array().unwrap().len(), 2);
    let r: serde_json::Value = reqwest::get(format!(
        "{}/emulator/v1/resources?kind=compute.instance",
        emu.url()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(r["resources"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn region_operations_and_paging() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    let region_ops = client!(google_cloud_compute_v1::client::RegionOperations, emu);
    let op = c
        .policies
        .insert()
        .set_project(P)
        .set_region(REGION)
        .set_body(
            ResourcePolicy::new().set_name("wp").set_workload_policy(
                ResourcePolicyWorkloadPolicy::new()
                    .set_type(resource_policy_workload_policy::Type::HighAvailability),
            ),
        )
        .send()
        .await
        .unwrap();
    assert!(op.region.as_deref().unwrap().ends_with("/regions/us-east5"));
    emu.clock().advance(secs(2));
    let done = region_ops
        .get()
        .set_project(P)
        .set_region(REGION)
        .set_operation(op.name.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(done.status, Some(operation::Status::Done));
    assert!(done.end_time.is_some() && done.insert_time.is_some());

    for i in 0..3 {
        c.instances
            .insert()
            .set_project(P)
            .set_zone(ZONE)
            .set_body(
                Instance::new()
                    .set_name(format!("vm-{i}"))
                    .set_machine_type(machine("ct6e-standard-1t")),
            )
            .send()
            .await
            .unwrap();
    }
    let page = c
        .instances
        .list()
        .set_project(P)
        .set_zone(ZONE)
        .set_max_results(2u32)
        .send()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    let rest = c
        .instances
        .list()
        .set_project(P)
        .set_zone(ZONE)
        .set_max_results(2u32)
        .set_page_token(page.next_page_token.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert!(rest.next_page_token.is_none());
}

/// `regionInstanceTemplates.list` returns both templates and `resourcePolicies.list` the policy
/// with its 2x2x2 topology.
async fn assert_templates_and_policy_listed(c: &Clients) {
    let t = c
        .templates
        .list()
        .set_project(P)
        .set_region(REGION)
        .send()
        .await
        .unwrap();
    assert_eq!(t.items.len(), 2);
    let p = c
        .policies
        .list()
        .set_project(P)
        .set_region(REGION)
        .send()
        .await
        .unwrap();
    assert_eq!(
        p.items[0]
            .workload_policy
            .as_ref()
            .unwrap()
            .accelerator_topology
            .as_deref(),
        Some("2x2x2")
    );
}

/// Posts a fault to the admin HTTP API (`/emulator/v1/faults`).
async fn post_fault(emu: &Emulator, body: serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/emulator/v1/faults", emu.url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn list_rr(c: &Clients, mig: &str) -> Vec<InstanceGroupManagerResizeRequest> {
    c.resize
        .list()
        .set_project(P)
        .set_zone(ZONE)
        .set_instance_group_manager(mig)
        .send()
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn lists_of_templates_policies_migs_and_resize_requests_and_admin_faults_over_http() {
    let emu = emulator().await;
    let c = clients(&emu).await;
    template(&c, "t1", "ct5p-hightpu-4t", false).await;
    template(&c, "t2", "ct6e-standard-1t", true).await;
    policy(&c, "wp", "2x2x2").await;
    assert_templates_and_policy_listed(&c).await;
    // 2 x ct5p-hightpu-4t = 8 chips = 2x2x2.
    insert_mig(&c, mig("v5p", "t1", Some("wp"), 2)).await.unwrap();
    insert_mig(&c, mig("flex", "t2", None, 0)).await.unwrap();
    let g = c.igms.list().set_project(P).set_zone(ZONE).send().await.unwrap();
    assert_eq!(g.items.len(), 2);
    // Capacity over the admin API: no ct6e-standard-1t at all, then some.
    let r = post_fault(
        &emu,
        json!({"kind": "computeCapacity", "zone": ZONE, "machineType": "ct6e-standard-1t", "hosts": 0}),
    )
    .await;
    assert_eq!(r.status(), 200);
    resize_request(&c, "flex", "a", 1, 600).await.unwrap();
    resize_request(&c, "flex", "b", 1, 600).await.unwrap();
    emu.clock().advance(secs(10));
    let states: Vec<_> = list_rr(&c, "flex")
        .await
        .iter()
        .map(|r| r.state.clone())
        .collect();
    assert_eq!(
        states,
        vec![Some(instance_group_manager_resize_request::State::Accepted); 2]
    );
    post_fault(
        &emu,
        json!({"kind": "computeCapacity", "zone": ZONE, "machineType": "ct6e-standard-1t", "hosts": 1}),
    )
    .await;
    let l = list_rr(&c, "flex").await;
    let granted = emu
        .instances()
        .iter()
        .filter(|v| v["machineType"].as_str().unwrap().ends_with("ct6e-standard-1t"))
        .count();
    assert_eq!(
        granted,
        1,
        "the older request first; the other waits: {:?}",
        l.iter().map(|r| r.state.clone()).collect::<Vec<_>>()
    );
    let r = post_fault(&emu, json!({"kind": "preemptInstance", "name": "nope"})).await;
    assert_eq!(r.status(), 404);
}
