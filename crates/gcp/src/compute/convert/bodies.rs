//! The Compute Engine request bodies of a slice: its instance, or its template, workload policy,
//! managed instance group and flex-start resize request.

use std::collections::BTreeMap;

use google_cloud_compute_v1::model::{
    self as compute, AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Instance,
    InstanceGroupManager, InstanceGroupManagerResizeRequest, InstanceGroupManagerResourcePolicies,
    InstanceProperties, InstanceTemplate, Metadata, NetworkInterface, ReservationAffinity, ResourcePolicy,
    ResourcePolicyWorkloadPolicy, Scheduling, Tags, metadata, resource_policy_workload_policy, scheduling,
};

use super::{Provisioning, SliceRequest, base_instance_name, region_of};

fn metadata_items(map: &BTreeMap<String, String>) -> Metadata {
    Metadata::new().set_items(
        map.iter()
            .map(|(k, v)| metadata::Items::new().set_key(k).set_value(v)),
    )
}

fn scheduling(p: &Provisioning) -> Scheduling {
    let base = Scheduling::new().set_on_host_maintenance(scheduling::OnHostMaintenance::Terminate);
    match p {
        Provisioning::Standard | Provisioning::Reservation(_) => base,
        // STOP keeps a preempted VM visible as TERMINATED, so the preemption is counted before
        // the slice is recreated (docs.cloud.google.com/compute/docs/instances/spot).
        Provisioning::Spot => base
            .set_provisioning_model(scheduling::ProvisioningModel::Spot)
            .set_instance_termination_action(scheduling::InstanceTerminationAction::Stop)
            .set_automatic_restart(false),
        // Flex-start VMs are deleted at the end of their run
        // (docs.cloud.google.com/compute/docs/instances/flex-start-vms).
        Provisioning::FlexStart { .. } => base
            .set_provisioning_model(scheduling::ProvisioningModel::FlexStart)
            .set_instance_termination_action(scheduling::InstanceTerminationAction::Delete)
            .set_automatic_restart(false),
    }
}

fn reservation(p: &Provisioning) -> Option<ReservationAffinity> {
    match p {
        Provisioning::Reservation(name) => Some(
            ReservationAffinity::new()
                .set_consume_reservation_type(
                    compute::reservation_affinity::ConsumeReservationType::SpecificReservation,
                )
                .set_key("compute.googleapis.com/reservation-name")
                .set_values([name.clone()]),
        ),
        _ => None,
    }
}

fn interface(req: &SliceRequest) -> NetworkInterface {
    let mut nic = NetworkInterface::new();
    if let Some(network) = &req.network {
        nic = nic.set_network(network);
    }
    if let Some(subnetwork) = &req.subnetwork {
        nic = nic.set_subnetwork(subnetwork);
    }
    if req.external_ips {
        nic = nic.set_access_configs([AccessConfig::new().set_name("External NAT")]);
    }
    nic
}

fn boot_disk(req: &SliceRequest) -> AttachedDisk {
    AttachedDisk::new()
        .set_boot(true)
        .set_auto_delete(true)
        .set_initialize_params(
            AttachedDiskInitializeParams::new()
                .set_source_image(&req.image)
                .set_disk_size_gb(req.boot_disk_gb),
        )
}

fn service_accounts(req: &SliceRequest) -> Vec<compute::ServiceAccount> {
    req.service_account
        .iter()
        .map(|(email, scopes)| {
            compute::ServiceAccount::new()
                .set_email(email)
                .set_scopes(scopes.clone())
        })
        .collect()
}

/// A single-host slice's instance.
pub fn instance_body(req: &SliceRequest) -> Instance {
    let mut body = Instance::new()
        .set_name(&req.id)
        .set_description(&req.description)
        .set_machine_type(format!("zones/{}/machineTypes/{}", req.zone, req.machine_type))
        .set_labels(req.labels.clone())
        .set_metadata(metadata_items(&req.metadata))
        .set_scheduling(scheduling(&req.provisioning))
        .set_disks([boot_disk(req)])
        .set_network_interfaces([interface(req)])
        .set_service_accounts(service_accounts(req));
    if !req.tags.is_empty() {
        body = body.set_tags(Tags::new().set_items(req.tags.clone()));
    }
    if let Some(affinity) = reservation(&req.provisioning) {
        body = body.set_reservation_affinity(affinity);
    }
    body
}

/// The regional template a group's instances are made from (machine type by bare name, as
/// templates take it).
pub fn template_body(req: &SliceRequest) -> InstanceTemplate {
    let mut properties = InstanceProperties::new()
        .set_machine_type(&req.machine_type)
        .set_labels(req.labels.clone())
        .set_metadata(metadata_items(&req.metadata))
        .set_scheduling(scheduling(&req.provisioning))
        .set_disks([boot_disk(req)])
        .set_network_interfaces([interface(req)])
        .set_service_accounts(service_accounts(req));
    if !req.tags.is_empty() {
        properties = properties.set_tags(Tags::new().set_items(req.tags.clone()));
    }
    if let Some(affinity) = reservation(&req.provisioning) {
        properties = properties.set_reservation_affinity(affinity);
    }
    InstanceTemplate::new()
        .set_name(&req.id)
        .set_description(&req.description)
        .set_properties(properties)
}

/// The workload policy placing a multi-host slice's VMs in one accelerator topology
/// (docs.cloud.google.com/tpu/docs/tpus-and-migs: HIGH_THROUGHPUT plus `acceleratorTopology`).
pub fn policy_body(req: &SliceRequest) -> ResourcePolicy {
    ResourcePolicy::new()
        .set_name(&req.id)
        .set_description(&req.description)
        .set_workload_policy(
            ResourcePolicyWorkloadPolicy::new()
                .set_type(resource_policy_workload_policy::Type::HighThroughput)
                .set_accelerator_topology(&req.topology),
        )
}

/// Whether the slice's group needs a workload policy: several hosts form one ICI topology; a
/// single-host flex-start group has nothing to place.
pub fn needs_policy(req: &SliceRequest) -> bool {
    req.hosts > 1
}

/// The managed instance group of a multi-host or flex-start slice. Flex-start starts empty:
/// the resize request brings all hosts at once.
pub fn manager_body(req: &SliceRequest) -> InstanceGroupManager {
    let region = region_of(&req.zone);
    let template = format!(
        "projects/{}/regions/{region}/instanceTemplates/{}",
        req.project, req.id
    );
    let size = match req.provisioning {
        Provisioning::FlexStart { .. } => 0,
        _ => req.hosts as i32,
    };
    let mut body = InstanceGroupManager::new()
        .set_name(&req.id)
        .set_description(&req.description)
        .set_base_instance_name(base_instance_name(&req.id))
        .set_instance_template(template)
        .set_target_size(size);
    if needs_policy(req) {
        body = body.set_resource_policies(InstanceGroupManagerResourcePolicies::new().set_workload_policy(
            format!(
                "projects/{}/regions/{region}/resourcePolicies/{}",
                req.project, req.id
            ),
        ));
    }
    body
}

/// The flex-start resize request: every host at once, for the run duration.
pub fn resize_body(req: &SliceRequest, run_seconds: i64) -> InstanceGroupManagerResizeRequest {
    InstanceGroupManagerResizeRequest::new()
        .set_name(&req.id)
        .set_description(&req.description)
        .set_resize_by(req.hosts as i32)
        .set_requested_run_duration(compute::Duration::new().set_seconds(run_seconds))
}
