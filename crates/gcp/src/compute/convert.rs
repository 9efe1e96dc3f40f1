//! Pure translations between Compute Engine resources and the TPU API's model, in which the
//! controller plans a slice whichever API provisions it. No I/O.
//!
//! What each Compute Engine state means for a slice (Compute Engine's instance lifecycle,
//! docs.cloud.google.com/compute/docs/instances/instance-lifecycle, and the resize-request
//! states of docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig):
//!
//! | Compute Engine                               | TPU API model                  |
//! |----------------------------------------------|--------------------------------|
//! | instance PROVISIONING, STAGING, PENDING      | node CREATING                  |
//! | instance RUNNING                             | node READY, HEALTHY            |
//! | instance REPAIRING                           | node REPAIRING                 |
//! | instance STOPPING, SUSPENDING, PENDING_STOP  | node DELETING (it is going away) |
//! | instance TERMINATED / STOPPED, spot          | node PREEMPTED                 |
//! | instance TERMINATED / STOPPED, otherwise     | node TERMINATED                |
//! | group: every member RUNNING, none missing    | node READY                     |
//! | group: a member preempted                    | node PREEMPTED                 |
//! | group: members being deleted, none created   | node DELETING                  |
//! | group: no members, none wanted               | node STOPPED (delete it)       |
//! | resize request CREATING (being created)      | queued resource CREATING       |
//! | resize request ACCEPTED (waiting for capacity) | WAITING_FOR_RESOURCES        |
//! | resize request SUCCEEDED, members present    | ACTIVE                         |
//! | resize request SUCCEEDED, no members left    | FAILED, DEADLINE_EXCEEDED (run duration over) |
//! | resize request FAILED                        | FAILED with the request's error |
//! | resize request CANCELLED                     | SUSPENDED by a user            |

use std::collections::{BTreeMap, HashMap};

use google_cloud_compute_v1::model::{
    self as compute, AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Instance,
    InstanceGroupManager, InstanceGroupManagerResizeRequest, InstanceGroupManagerResourcePolicies,
    InstanceProperties, InstanceTemplate, ManagedInstance, Metadata, NetworkInterface, ReservationAffinity,
    ResourcePolicy, ResourcePolicyWorkloadPolicy, Scheduling, Tags, instance, managed_instance, metadata,
    resource_policy_workload_policy, scheduling,
};
use google_cloud_longrunning::model::{Operation as Lro, operation};
use google_cloud_rpc::model::{ErrorInfo, Status};
use google_cloud_tpu_v2::model::{
    NetworkEndpoint, Node, QueuedResource, QueuedResourceState, SchedulingConfig, node, queued_resource_state,
};
use google_cloud_wkt::{Any, Timestamp};

/// Port the TPU runtime listens on, reported in a TPU node's network endpoints.
const TPU_PORT: i32 = 8470;

/// How a slice's VMs get capacity on Compute Engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provisioning {
    Standard,
    /// Spot VMs, stopped when preempted so the preemption stays visible.
    Spot,
    /// A specific reservation, by name or full URL.
    Reservation(String),
    /// Flex-start through a resize request running this many seconds.
    FlexStart {
        run_seconds: i64,
    },
}

/// Everything needed to create a slice on Compute Engine.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceRequest {
    pub project: String,
    pub zone: String,
    /// Deterministic id: the instance (single host) or group, template, policy and resize
    /// request (several hosts or flex-start) are all named by it.
    pub id: String,
    pub machine_type: String,
    pub hosts: u32,
    pub topology: String,
    /// The TPU API-style accelerator type the slice reports (`v6e-8`).
    pub accelerator_type: String,
    pub image: String,
    pub boot_disk_gb: i64,
    pub provisioning: Provisioning,
    pub labels: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub network: Option<String>,
    pub subnetwork: Option<String>,
    pub external_ips: bool,
    pub tags: Vec<String>,
    pub service_account: Option<(String, Vec<String>)>,
    /// Names the owning object, for people reading the console (templates, policies and groups
    /// carry no labels).
    pub description: String,
}

impl SliceRequest {
    /// One instance, or a managed instance group (several hosts, or flex-start, which only
    /// resize requests provide).
    pub fn layout(&self) -> Layout {
        if self.hosts > 1 || matches!(self.provisioning, Provisioning::FlexStart { .. }) {
            Layout::Group
        } else {
            Layout::Instance
        }
    }
}

/// How a slice is laid out on Compute Engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Instance,
    Group,
}

/// The region of a zone (`us-east5-b` → `us-east5`).
pub fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// `projects/{p}/locations/{zone}/{collection}/{id}` → (project, zone, id).
pub fn parse_tpu_name<'a>(name: &'a str, collection: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let rest = name.strip_prefix("projects/")?;
    let (project, rest) = rest.split_once("/locations/")?;
    let (zone, rest) = rest.split_once('/')?;
    let id = rest.strip_prefix(collection)?.strip_prefix('/')?;
    (!id.contains('/')).then_some((project, zone, id))
}

/// The last path segment of a URL or resource name.
pub fn short_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// Base name of a group's instances: Compute Engine appends `-xxxx` and allows 58 characters.
pub fn base_instance_name(id: &str) -> String {
    id.chars()
        .take(58)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

fn metadata_items(map: &BTreeMap<String, String>) -> Metadata {
    Metadata::new().set_items(
        map.iter()
            .map(|(k, v)| metadata::Items::new().set_key(k).set_value(v)),
    )
}

fn metadata_map(metadata: Option<&Metadata>) -> HashMap<String, String> {
    metadata
        .map(|m| {
            m.items
                .iter()
                .filter_map(|i| Some((i.key.clone()?, i.value.clone().unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default()
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

fn timestamp(rfc3339: Option<&str>) -> Option<Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339?).ok()?;
    Some(Timestamp::clamp(t.timestamp(), 0))
}

fn endpoint(instance: &Instance) -> Option<NetworkEndpoint> {
    let ip = instance.network_interfaces.first()?.network_ip.clone()?;
    Some(NetworkEndpoint::new().set_ip_address(ip).set_port(TPU_PORT))
}

fn is_spot(instance: &Instance) -> bool {
    instance.scheduling.as_ref().is_some_and(|s| {
        s.provisioning_model == Some(scheduling::ProvisioningModel::Spot) || s.preemptible == Some(true)
    })
}

fn instance_state(instance: &Instance) -> node::State {
    use instance::Status as S;
    match instance.status.as_ref() {
        Some(S::Provisioning | S::Staging | S::Pending) => node::State::Creating,
        Some(S::Running) => node::State::Ready,
        Some(S::Repairing) => node::State::Repairing,
        Some(S::Stopping | S::Suspending | S::PendingStop | S::Deprovisioning) => node::State::Deleting,
        Some(S::Terminated | S::Stopped) if is_spot(instance) => node::State::Preempted,
        Some(S::Terminated | S::Stopped) => node::State::Terminated,
        Some(S::Suspended) => node::State::Stopped,
        _ => node::State::Unspecified,
    }
}

/// A single-host slice's instance as a TPU node named `name`.
pub fn instance_node(name: &str, accelerator_type: &str, instance: &Instance) -> Node {
    let state = instance_state(instance);
    Node::new()
        .set_name(name)
        .set_accelerator_type(accelerator_type)
        .set_state(state.clone())
        .set_health(if state == node::State::Ready {
            node::Health::Healthy
        } else {
            node::Health::Unspecified
        })
        .set_labels(instance.labels.clone())
        .set_metadata(metadata_map(instance.metadata.as_ref()))
        .set_tags(
            instance
                .tags
                .as_ref()
                .map(|t| t.items.clone())
                .unwrap_or_default(),
        )
        .set_network_endpoints(endpoint(instance))
        .set_scheduling_config(SchedulingConfig::new().set_spot(is_spot(instance)))
        .set_or_clear_create_time(timestamp(instance.creation_timestamp.as_deref()))
}

/// A group's hosts as one TPU node named `name`, from the group, its template's properties
/// (labels and metadata live there) and its members read one by one. A group with no members
/// that wants none (a flex-start group before its request, or after its run) is a STOPPED node:
/// it bills nothing but still has to be deleted.
pub fn group_node(
    name: &str,
    accelerator_type: &str,
    manager: &InstanceGroupManager,
    template: Option<&InstanceProperties>,
    members: &[ManagedInstance],
    instances: &[Instance],
) -> Node {
    let target = manager.target_size.unwrap_or(0).max(0) as usize;
    use managed_instance::CurrentAction as A;
    let deleting = members
        .iter()
        .any(|m| matches!(m.current_action, Some(A::Deleting | A::Abandoning)));
    let creating = members.iter().any(|m| {
        matches!(
            m.current_action,
            Some(A::Creating | A::CreatingWithoutRetries | A::Recreating | A::Verifying)
        )
    });
    let states: Vec<node::State> = instances.iter().map(instance_state).collect();
    let state = if members.is_empty() && target == 0 {
        node::State::Stopped
    } else if states.contains(&node::State::Preempted) {
        node::State::Preempted
    } else if deleting && !creating {
        node::State::Deleting
    } else if instances.len() >= target
        && !states.is_empty()
        && states.iter().all(|s| *s == node::State::Ready)
    {
        node::State::Ready
    } else if states.contains(&node::State::Terminated) {
        node::State::Terminated
    } else {
        node::State::Creating
    };
    let properties = template.cloned().unwrap_or_default();
    let mut endpoints: Vec<(String, NetworkEndpoint)> = instances
        .iter()
        .filter_map(|i| Some((i.name.clone().unwrap_or_default(), endpoint(i)?)))
        .collect();
    // Worker order is stable across reads: by instance name.
    endpoints.sort_by(|a, b| a.0.cmp(&b.0));
    {
        Node::new()
            .set_name(name)
            .set_accelerator_type(accelerator_type)
            .set_state(state.clone())
            .set_health(if state == node::State::Ready {
                node::Health::Healthy
            } else {
                node::Health::Unspecified
            })
            .set_labels(properties.labels.clone())
            .set_metadata(metadata_map(properties.metadata.as_ref()))
            .set_tags(
                properties
                    .tags
                    .as_ref()
                    .map(|t| t.items.clone())
                    .unwrap_or_default(),
            )
            .set_network_endpoints(endpoints.into_iter().map(|(_, e)| e))
            .set_scheduling_config(
                SchedulingConfig::new().set_spot(
                    properties
                        .scheduling
                        .as_ref()
                        .is_some_and(|s| s.provisioning_model == Some(scheduling::ProvisioningModel::Spot)),
                ),
            )
            .set_or_clear_create_time(timestamp(manager.creation_timestamp.as_deref()))
    }
}

/// A flex-start resize request as a queued resource named `name`; `members` is how many VMs
/// the group has now.
pub fn resize_queued(
    name: &str,
    request: &InstanceGroupManagerResizeRequest,
    members: usize,
) -> QueuedResource {
    use compute::instance_group_manager_resize_request::State as R;
    use queued_resource_state::{State as Q, StateInitiator};
    let (state, initiator, error) = match request.state.as_ref() {
        Some(R::Accepted) => (Q::WaitingForResources, StateInitiator::Service, None),
        // CREATING is the request itself "being created"; ACCEPTED waits for capacity
        // (`compute.v1.json`, `InstanceGroupManagerResizeRequest.state`).
        Some(R::Creating) => (Q::Creating, StateInitiator::Service, None),
        Some(R::Succeeded) if members > 0 => (Q::Active, StateInitiator::Service, None),
        Some(R::Succeeded) => (
            Q::Failed,
            StateInitiator::Service,
            Some(rpc_status(
                4,
                "the flex-start run duration is over: Compute Engine deleted the VMs",
                None,
            )),
        ),
        Some(R::Failed) => {
            let first = request
                .status
                .as_ref()
                .and_then(|s| s.error.as_ref())
                .and_then(|e| e.errors.first());
            let code = first.and_then(|e| e.code.clone()).unwrap_or_default();
            let message = first.and_then(|e| e.message.clone()).unwrap_or_default();
            let status = rpc_status(code_number(&code, None), &message, Some(&code));
            (Q::Failed, StateInitiator::Service, Some(status))
        }
        Some(R::Cancelled) => (Q::Suspended, StateInitiator::User, None),
        _ => (Q::Creating, StateInitiator::Service, None),
    };
    let mut s = QueuedResourceState::new()
        .set_state(state)
        .set_state_initiator(initiator);
    if let Some(error) = error {
        s = s.set_failed_data(queued_resource_state::FailedData::new().set_error(error));
    }
    QueuedResource::new()
        .set_name(name)
        .set_state(s)
        .set_or_clear_create_time(timestamp(request.creation_timestamp.as_deref()))
}

/// The canonical code (`google.rpc.Code` number) of a Compute Engine error code, falling back
/// on the HTTP status. Capacity and quota codes are RESOURCE_EXHAUSTED with the Compute code as
/// `ErrorInfo.reason`, which [`crate::GcpError::exhaustion`] reads.
pub fn code_number(code: &str, http: Option<i32>) -> i32 {
    match code {
        c if c.contains("RESOURCE_POOL_EXHAUSTED") || c.contains("QUOTA") || c == "STOCKOUT" => 8,
        "RESOURCE_ALREADY_EXISTS" | "alreadyExists" => 6,
        "RESOURCE_NOT_FOUND" | "notFound" => 5,
        "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE" | "resourceInUseByAnotherResource" | "resourceNotReady" => 9,
        _ => match http {
            Some(400) => 3,
            Some(401) => 16,
            Some(403) => 7,
            Some(404) => 5,
            Some(409) => 6,
            Some(412) => 9,
            Some(429) => 8,
            Some(503) => 14,
            Some(c) if c >= 500 => 13,
            _ => 2,
        },
    }
}

fn rpc_status(code: i32, message: &str, reason: Option<&str>) -> Status {
    let mut status = Status::new().set_code(code).set_message(message);
    if let Some(reason) = reason.filter(|r| !r.is_empty())
        && let Ok(detail) = Any::from_msg(
            &ErrorInfo::new()
                .set_reason(reason)
                .set_domain("compute.googleapis.com"),
        )
    {
        status = status.set_details([detail]);
    }
    status
}

/// A Compute Engine operation as a long-running operation named `name` (the operation's
/// `projects/{p}/zones|regions/{l}/operations/{op}` path), done when its status is DONE.
pub fn operation(name: &str, op: &compute::Operation) -> Lro {
    let done = op.status == Some(compute::operation::Status::Done);
    let mut lro = Lro::new().set_name(name).set_done(done);
    if !done {
        return lro;
    }
    let first = op.error.as_ref().and_then(|e| e.errors.first());
    if let Some(first) = first {
        let code = first.code.clone().unwrap_or_default();
        let message = first
            .message
            .clone()
            .or_else(|| op.http_error_message.clone())
            .unwrap_or_default();
        let status = rpc_status(
            code_number(&code, op.http_error_status_code),
            &message,
            Some(&code),
        );
        lro = lro.set_result(operation::Result::Error(Box::new(status)));
    } else {
        lro = lro.set_response(Any::from_msg(&google_cloud_wkt::Empty::default()).unwrap_or_default());
    }
    lro
}

#[cfg(test)]
mod tests {
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
            .set_network_interfaces([
                NetworkInterface::new().set_network_ip(format!("10.0.0.{}", name.len()))
            ]);
        if spot {
            i = i.set_scheduling(
                Scheduling::new().set_provisioning_model(scheduling::ProvisioningModel::Spot),
            );
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
}
