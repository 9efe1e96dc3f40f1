//! Compute Engine resources read as the TPU API's model: an instance or a group as a node, a
//! resize request as a queued resource (the module docs of [`super`] have the state table).

use std::collections::HashMap;

use google_cloud_compute_v1::model::{
    self as compute, Instance, InstanceGroupManager, InstanceGroupManagerResizeRequest, InstanceProperties,
    ManagedInstance, Metadata, instance, managed_instance, scheduling,
};
use google_cloud_tpu_v2::model::{
    NetworkEndpoint, Node, QueuedResource, QueuedResourceState, SchedulingConfig, node, queued_resource_state,
};
use google_cloud_wkt::Timestamp;

use super::TPU_PORT;
use super::operation::{code_number, rpc_status};

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

/// A group's metadata: its template's, plus the items every one of its VMs read carries with
/// one value (set on the VMs after the group was made: the operator's checkpoint request), so a
/// key set on some hosts only is not yet the slice's.
fn group_metadata(template: Option<&Metadata>, instances: &[Instance]) -> HashMap<String, String> {
    let mut metadata = metadata_map(template);
    let mut per_vm = instances.iter().map(|i| metadata_map(i.metadata.as_ref()));
    let Some(first) = per_vm.next() else {
        return metadata;
    };
    let rest: Vec<HashMap<String, String>> = per_vm.collect();
    for (key, value) in first {
        let everywhere = rest.iter().all(|m| m.get(&key) == Some(&value));
        if everywhere && !metadata.contains_key(&key) {
            metadata.insert(key, value);
        }
    }
    metadata
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

pub(super) fn instance_state(instance: &Instance) -> node::State {
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
    let node = Node::new()
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
        .set_or_clear_create_time(timestamp(instance.creation_timestamp.as_deref()));
    crate::maintenance::carry_notice(node, notice(instance))
}

/// An instance's announced maintenance.
fn notice(instance: &Instance) -> Option<&crate::compute_v1::model::UpcomingMaintenance> {
    instance.resource_status.as_ref()?.upcoming_maintenance.as_ref()
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
    let state = group_state(target, members, instances);
    let properties = template.cloned().unwrap_or_default();
    let node = Node::new()
        .set_name(name)
        .set_accelerator_type(accelerator_type)
        .set_state(state.clone())
        .set_health(if state == node::State::Ready {
            node::Health::Healthy
        } else {
            node::Health::Unspecified
        })
        .set_labels(properties.labels.clone())
        .set_metadata(group_metadata(properties.metadata.as_ref(), instances))
        .set_tags(
            properties
                .tags
                .as_ref()
                .map(|t| t.items.clone())
                .unwrap_or_default(),
        )
        .set_network_endpoints(worker_endpoints(instances))
        .set_scheduling_config(
            SchedulingConfig::new().set_spot(
                properties
                    .scheduling
                    .as_ref()
                    .is_some_and(|s| s.provisioning_model == Some(scheduling::ProvisioningModel::Spot)),
            ),
        )
        .set_or_clear_create_time(timestamp(manager.creation_timestamp.as_deref()));
    crate::maintenance::carry_notice(node, slice_notice(instances))
}

/// The notice a slice of `instances` shows: a maintenance of any host stops the whole slice, so
/// the one under way, else the earliest.
pub(super) fn slice_notice(instances: &[Instance]) -> Option<&compute::UpcomingMaintenance> {
    instances.iter().filter_map(notice).min_by_key(|m| {
        let ongoing = m.maintenance_status.as_ref().and_then(|s| s.name()) == Some("ONGOING");
        (!ongoing, m.window_start_time.clone())
    })
}

/// The node state of a group wanting `target` hosts: STOPPED when it has no members and wants
/// none; a preempted member preempts the slice; a group only deleting members is going away; READY
/// once every wanted host runs; a terminated member terminates it; anything else is still being
/// created.
fn group_state(target: usize, members: &[ManagedInstance], instances: &[Instance]) -> node::State {
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
    if members.is_empty() && target == 0 {
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
    }
}

/// The endpoints of a group's hosts, in a worker order stable across reads: by instance name.
fn worker_endpoints(instances: &[Instance]) -> Vec<NetworkEndpoint> {
    let mut endpoints: Vec<(String, NetworkEndpoint)> = instances
        .iter()
        .filter_map(|i| Some((i.name.clone().unwrap_or_default(), endpoint(i)?)))
        .collect();
    endpoints.sort_by(|a, b| a.0.cmp(&b.0));
    endpoints.into_iter().map(|(_, e)| e).collect()
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
