//! TPU slices built from Compute Engine resources and reported in the TPU API's model.
//!
//! * A single-host slice is one instance named by the slice's id.
//! * A multi-host slice is a managed instance group named by the id, made from a regional
//!   instance template and placed by a HIGH_THROUGHPUT workload policy
//!   (docs.cloud.google.com/tpu/docs/tpus-and-migs). The template and the policy are named by
//!   the slice's *first* id and shared by its incarnations (a recreation after a preemption
//!   makes a new group from the same template), so a preemption leaves nothing behind; they go
//!   when the slice is deleted ([`ComputeSlices::release`]).
//! * Flex-start capacity is a resize request named by the id on an initially empty group
//!   (docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig), read as a
//!   queued resource.
//!
//! Creation is a sequence of inserts (policy, template, group, resize request), each depending
//! on the previous one existing: [`ComputeSlices::create`] makes the next missing piece and
//! returns its operation, and the controller calls it again once that operation is done, as it
//! does for any create. A repeat after a crash gets ALREADY_EXISTS for what was made and moves
//! on, so the sequence needs no state outside the cloud; the memory kept here only saves calls.
//!
//! Reads by name (`get_node`, `get_queued_resource`), deletes and operation reads answer in the
//! TPU API's model, so the controller observes, plans and cleans up both backends with one code
//! path. What Compute Engine slices have no use for (patch, start, stop, reset, zone listings)
//! does not exist here: the controller's Compute Engine backend never plans it.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use google_cloud_compute_v1::model::Operation as ComputeOperation;
use google_cloud_longrunning::model::Operation;
use google_cloud_tpu_v2::model::{Node, QueuedResource};

use super::{
    ComputeApi, Place,
    convert::{self, Layout, Provisioning, SliceRequest},
};
use crate::error::{ErrorKind, GcpError, Result, Service};

/// The pieces of a group-backed slice, in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Piece {
    Policy,
    Template,
    Group,
    ResizeRequest,
}

impl Piece {
    fn name(self) -> &'static str {
        match self {
            Piece::Policy => "workload-policy",
            Piece::Template => "instance-template",
            Piece::Group => "instance-group",
            Piece::ResizeRequest => "resize-request",
        }
    }
}

/// The `errors[].reason` of a delete refused because another resource still uses the target.
const IN_USE: &str = "resourceInUseByAnotherResource";

/// TPU slices on Compute Engine.
pub struct ComputeSlices {
    api: Arc<dyn ComputeApi>,
    /// Id → layout, learned from creates and reads, so a read of a known slice is one call.
    layouts: Mutex<HashMap<String, Layout>>,
    /// Id → accelerator type to report (the machine type alone does not say the slice size).
    accelerators: Mutex<HashMap<String, String>>,
    /// Pieces known to exist (created or found), so a create sequence does not re-insert them.
    made: Mutex<HashSet<(String, Piece)>>,
}

impl std::fmt::Debug for ComputeSlices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeSlices").finish_non_exhaustive()
    }
}

fn not_found(method: &'static str, target: &str) -> GcpError {
    let mut e = GcpError::new(ErrorKind::NotFound, Service::Compute, method, target, "not found");
    e.http_status = Some(404);
    e
}

fn invalid(method: &'static str, target: &str, why: String) -> GcpError {
    GcpError::new(ErrorKind::InvalidArgument, Service::Compute, method, target, why)
}

/// Each piece's own idempotency key, derived from the create's.
fn piece_request_id(request_id: &str, piece: &str) -> String {
    let namespace = uuid::Uuid::parse_str(request_id).unwrap_or(uuid::Uuid::NAMESPACE_OID);
    uuid::Uuid::new_v5(&namespace, piece.as_bytes())
        .hyphenated()
        .to_string()
}

/// The accelerator type a machine type and host count add up to (`ct6e-standard-4t` × 4 →
/// `v6e-16`; v5p and TPU7x count TensorCores, two per chip).
pub fn accelerator_of(machine_type: &str, hosts: usize) -> String {
    let chips_per_host: usize = machine_type
        .rsplit('-')
        .next()
        .and_then(|t| t.strip_suffix('t'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let chips = chips_per_host * hosts.max(1);
    match machine_type.split('-').next() {
        Some("ct6e") => format!("v6e-{chips}"),
        Some("ct5p") => format!("v5p-{}", chips * 2),
        Some("tpu7x") => format!("tpu7x-{}", chips * 2),
        Some("ct5lp") => format!("v5litepod-{chips}"),
        _ => machine_type.to_string(),
    }
}

impl ComputeSlices {
    pub fn new(api: Arc<dyn ComputeApi>) -> Self {
        Self {
            api,
            layouts: Mutex::default(),
            accelerators: Mutex::default(),
            made: Mutex::default(),
        }
    }

    fn remember(&self, id: &str, layout: Layout) {
        self.layouts
            .lock()
            .expect("layouts lock")
            .insert(id.to_string(), layout);
    }

    fn layout(&self, id: &str) -> Option<Layout> {
        self.layouts.lock().expect("layouts lock").get(id).copied()
    }

    fn accelerator(&self, id: &str) -> Option<String> {
        self.accelerators
            .lock()
            .expect("accelerators lock")
            .get(id)
            .cloned()
    }

    /// Makes the next missing piece of the slice and returns its operation; ALREADY_EXISTS once
    /// every piece exists. `shared_id` names the template and policy (the slice's first id).
    pub async fn create(&self, req: &SliceRequest, shared_id: &str, request_id: &str) -> Result<Operation> {
        let zone = Place::new(&req.project, &req.zone);
        let region = Place::new(&req.project, convert::region_of(&req.zone));
        self.accelerators
            .lock()
            .expect("accelerators lock")
            .insert(req.id.clone(), req.accelerator_type.clone());
        let layout = req.layout();
        self.remember(&req.id, layout);
        if layout == Layout::Instance {
            let op = self
                .api
                .insert_instance(&zone, request_id, convert::instance_body(req))
                .await?;
            return Ok(zonal(&zone, &op));
        }
        let shared = SliceRequest {
            id: shared_id.to_string(),
            ..req.clone()
        };
        let mut pieces = vec![Piece::Template, Piece::Group];
        if convert::needs_policy(req) {
            pieces.insert(0, Piece::Policy);
        }
        if matches!(req.provisioning, Provisioning::FlexStart { .. }) {
            pieces.push(Piece::ResizeRequest);
        }
        for piece in pieces {
            let made = (
                if piece == Piece::Group || piece == Piece::ResizeRequest {
                    &req.id
                } else {
                    &shared.id
                }
                .clone(),
                piece,
            );
            if self.made.lock().expect("made lock").contains(&made) {
                continue;
            }
            let key = piece_request_id(request_id, piece.name());
            let started = match piece {
                Piece::Policy => self
                    .api
                    .insert_resource_policy(&region, &key, convert::policy_body(&shared))
                    .await
                    .map(|op| regional(&region, &op)),
                Piece::Template => self
                    .api
                    .insert_instance_template(&region, &key, convert::template_body(&shared))
                    .await
                    .map(|op| regional(&region, &op)),
                Piece::Group => {
                    let mut body = convert::manager_body(req);
                    body.instance_template = Some(format!(
                        "projects/{}/regions/{}/instanceTemplates/{shared_id}",
                        req.project, region.location
                    ));
                    if let Some(policies) = body.resource_policies.as_mut() {
                        policies.workload_policy = Some(format!(
                            "projects/{}/regions/{}/resourcePolicies/{shared_id}",
                            req.project, region.location
                        ));
                    }
                    self.api
                        .insert_instance_group_manager(&zone, &key, body)
                        .await
                        .map(|op| zonal(&zone, &op))
                }
                Piece::ResizeRequest => {
                    let Provisioning::FlexStart { run_seconds } = req.provisioning else {
                        unreachable!("resize requests are for flex-start only")
                    };
                    self.api
                        .insert_resize_request(&zone, &req.id, &key, convert::resize_body(req, run_seconds))
                        .await
                        .map(|op| zonal(&zone, &op))
                }
            };
            match started {
                Err(e) if e.kind == ErrorKind::AlreadyExists => {
                    self.made.lock().expect("made lock").insert(made);
                }
                Ok(op) => {
                    self.made.lock().expect("made lock").insert(made);
                    return Ok(op);
                }
                Err(e) => return Err(e),
            }
        }
        let mut done = GcpError::new(
            ErrorKind::AlreadyExists,
            Service::Compute,
            "create slice",
            &req.id,
            "every piece of the slice exists",
        );
        done.http_status = Some(409);
        Err(done)
    }

    /// Deletes the template and workload policy the slice's groups shared, once no group uses
    /// them. `Ok(true)` when both are gone (NOT_FOUND); `Ok(false)` while a delete was started
    /// or one is still in use: call again later.
    pub async fn release(&self, project: &str, zone: &str, shared_id: &str) -> Result<bool> {
        self.made
            .lock()
            .expect("made lock")
            .retain(|(id, _)| id != shared_id);
        let region = Place::new(project, convert::region_of(zone));
        let mut gone = true;
        for result in [
            self.api.delete_instance_template(&region, shared_id).await,
            self.api.delete_resource_policy(&region, shared_id).await,
        ] {
            match result {
                Ok(_) => gone = false,
                Err(e) if e.is_not_found() => {}
                // A group still being deleted holds them: not an error, wait. Compute Engine
                // answers 400 with reason `resourceInUseByAnotherResource`.
                Err(e) if e.reason.as_deref() == Some(IN_USE) => gone = false,
                Err(e) => return Err(e),
            }
        }
        Ok(gone)
    }

    async fn instance_node(&self, name: &str, zone: &Place, id: &str) -> Result<Node> {
        let instance = self.api.get_instance(zone, id).await?;
        self.remember(id, Layout::Instance);
        let accelerator = self.accelerator(id).unwrap_or_else(|| {
            accelerator_of(
                convert::short_name(instance.machine_type.as_deref().unwrap_or("")),
                1,
            )
        });
        Ok(convert::instance_node(name, &accelerator, &instance))
    }

    async fn group_node(&self, name: &str, zone: &Place, id: &str) -> Result<Node> {
        let manager = self.api.get_instance_group_manager(zone, id).await?;
        self.remember(id, Layout::Group);
        let members = self.api.list_managed_instances(zone, id).await?;
        let template_url = manager.instance_template.clone().unwrap_or_default();
        let region = Place::new(&zone.project, convert::region_of(&zone.location));
        let template = match self
            .api
            .get_instance_template(&region, convert::short_name(&template_url))
            .await
        {
            Ok(t) => t.properties,
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        // Instance reads give the workers' addresses; they are only worth their calls once
        // every member runs.
        let running = !members.is_empty()
            && members.iter().all(|m| {
                m.instance_status
                    == Some(google_cloud_compute_v1::model::managed_instance::InstanceStatus::Running)
            });
        let mut instances = Vec::new();
        for member in &members {
            let Some(url) = member.instance.as_deref() else {
                continue;
            };
            let status = member.instance_status.clone();
            if running {
                match self.api.get_instance(zone, convert::short_name(url)).await {
                    Ok(i) => instances.push(i),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            } else {
                instances.push(member_instance(url, status, template.as_ref()));
            }
        }
        let machine = template
            .as_ref()
            .and_then(|t| t.machine_type.clone())
            .unwrap_or_default();
        let accelerator = self.accelerator(id).unwrap_or_else(|| {
            let hosts = manager.target_size.unwrap_or(0).max(members.len() as i32) as usize;
            accelerator_of(convert::short_name(&machine), hosts)
        });
        Ok(convert::group_node(
            name,
            &accelerator,
            &manager,
            template.as_ref(),
            &members,
            &instances,
        ))
    }
}

/// What a group member's listing says about its instance, without reading it.
fn member_instance(
    url: &str,
    status: Option<google_cloud_compute_v1::model::managed_instance::InstanceStatus>,
    template: Option<&google_cloud_compute_v1::model::InstanceProperties>,
) -> google_cloud_compute_v1::model::Instance {
    use google_cloud_compute_v1::model::{instance::Status as I, managed_instance::InstanceStatus as M};
    let status = match status {
        Some(M::Running) => I::Running,
        Some(M::Staging) => I::Staging,
        Some(M::Stopping) => I::Stopping,
        Some(M::Stopped) => I::Stopped,
        Some(M::Terminated) => I::Terminated,
        Some(M::Suspending) => I::Suspending,
        Some(M::Suspended) => I::Suspended,
        Some(M::Repairing) => I::Repairing,
        _ => I::Provisioning,
    };
    let mut instance = google_cloud_compute_v1::model::Instance::new()
        .set_name(convert::short_name(url))
        .set_status(status);
    if let Some(scheduling) = template.and_then(|t| t.scheduling.clone()) {
        instance = instance.set_scheduling(scheduling);
    }
    instance
}

/// A zonal operation as a long-running operation the controller can poll by name.
fn zonal(zone: &Place, op: &ComputeOperation) -> Operation {
    let name = format!(
        "projects/{}/zones/{}/operations/{}",
        zone.project,
        zone.location,
        op.name.as_deref().unwrap_or_default()
    );
    convert::operation(&name, op)
}

fn regional(region: &Place, op: &ComputeOperation) -> Operation {
    let name = format!(
        "projects/{}/regions/{}/operations/{}",
        region.project,
        region.location,
        op.name.as_deref().unwrap_or_default()
    );
    convert::operation(&name, op)
}

/// Reads by name and deletes, in the TPU API's model: the controller observes and plans both
/// backends with one code path.
impl ComputeSlices {
    /// The slice `name` (`projects/{p}/locations/{zone}/nodes/{id}`) as a TPU node: its instance,
    /// or its group and members.
    pub async fn get_node(&self, name: &str) -> Result<Node> {
        let Some((project, zone, id)) = convert::parse_tpu_name(name, "nodes") else {
            return Err(invalid("get slice", name, format!("{name} is not a node name")));
        };
        let zone = Place::new(project, zone);
        match self.layout(id) {
            Some(Layout::Instance) => self.instance_node(name, &zone, id).await,
            Some(Layout::Group) => self.group_node(name, &zone, id).await,
            None => match self.instance_node(name, &zone, id).await {
                Err(e) if e.is_not_found() => self.group_node(name, &zone, id).await,
                other => other,
            },
        }
    }

    /// Deletes the slice `name`: its instance, or its group (VMs with it).
    pub async fn delete_node(&self, name: &str) -> Result<Operation> {
        let Some((project, zone, id)) = convert::parse_tpu_name(name, "nodes") else {
            return Err(invalid(
                "delete slice",
                name,
                format!("{name} is not a node name"),
            ));
        };
        let zone = Place::new(project, zone);
        let layout = match self.layout(id) {
            Some(layout) => layout,
            None => match self.api.get_instance(&zone, id).await {
                Ok(_) => Layout::Instance,
                Err(e) if e.is_not_found() => Layout::Group,
                Err(e) => return Err(e),
            },
        };
        let op = match layout {
            Layout::Instance => self.api.delete_instance(&zone, id).await?,
            Layout::Group => self.api.delete_instance_group_manager(&zone, id).await?,
        };
        Ok(zonal(&zone, &op))
    }

    /// The flex-start resize request of the slice `name`
    /// (`projects/{p}/locations/{zone}/queuedResources/{id}`) as a queued resource.
    pub async fn get_queued_resource(&self, name: &str) -> Result<QueuedResource> {
        let Some((project, zone, id)) = convert::parse_tpu_name(name, "queuedResources") else {
            return Err(invalid(
                "get resize request",
                name,
                format!("{name} is not a queued resource name"),
            ));
        };
        let zone = Place::new(project, zone);
        let request = match self.api.get_resize_request(&zone, id, id).await {
            // The group does not exist yet: neither does its request.
            Err(e) if e.is_not_found() => {
                return Err(not_found("instanceGroupManagerResizeRequests.get", name));
            }
            other => other?,
        };
        use google_cloud_compute_v1::model::instance_group_manager_resize_request::State;
        let members = match request.state {
            Some(State::Succeeded) => self.api.list_managed_instances(&zone, id).await?.len(),
            _ => 0,
        };
        Ok(convert::resize_queued(name, &request, members))
    }

    /// Deletes the flex-start request with its group, as `force` does for a queued resource and
    /// its nodes: a request still waiting for capacity (ACCEPTED) is cancelled first ("only
    /// possible for requests that are accepted in the queue", `compute.v1.json`), then the
    /// group goes, VMs and requests with it. A request still being created cannot be cancelled
    /// yet: UNAVAILABLE, retried.
    pub async fn delete_queued_resource(&self, name: &str) -> Result<Operation> {
        let Some((project, zone, id)) = convert::parse_tpu_name(name, "queuedResources") else {
            return Err(invalid(
                "delete resize request",
                name,
                format!("{name} is not a queued resource name"),
            ));
        };
        let zone = Place::new(project, zone);
        use google_cloud_compute_v1::model::instance_group_manager_resize_request::State;
        let request = self.api.get_resize_request(&zone, id, id).await?;
        let op = match request.state {
            Some(State::Accepted) => self.api.cancel_resize_request(&zone, id, id).await?,
            Some(State::Creating) => {
                return Err(GcpError::new(
                    ErrorKind::Transient,
                    Service::Compute,
                    "instanceGroupManagerResizeRequests.cancel",
                    name,
                    "the resize request is still being created; it is cancelled once accepted",
                ));
            }
            _ => self.api.delete_instance_group_manager(&zone, id).await?,
        };
        Ok(zonal(&zone, &op))
    }

    /// A zonal or regional Compute Engine operation as a long-running operation.
    pub async fn get_operation(&self, name: &str) -> Result<Operation> {
        let rest = name.strip_prefix("projects/").unwrap_or_default();
        let parts: Vec<&str> = rest.split('/').collect();
        let op = match parts.as_slice() {
            [project, "zones", zone, "operations", op] => {
                self.api
                    .get_zone_operation(&Place::new(*project, *zone), op)
                    .await?
            }
            [project, "regions", region, "operations", op] => {
                self.api
                    .get_region_operation(&Place::new(*project, *region), op)
                    .await?
            }
            _ => {
                return Err(invalid(
                    "get operation",
                    name,
                    format!("{name} is not a Compute Engine operation"),
                ));
            }
        };
        Ok(convert::operation(name, &op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerator_types_from_machines() {
        assert_eq!(accelerator_of("ct6e-standard-8t", 1), "v6e-8");
        assert_eq!(accelerator_of("ct6e-standard-4t", 4), "v6e-16");
        assert_eq!(accelerator_of("ct5p-hightpu-4t", 2), "v5p-16");
        assert_eq!(accelerator_of("tpu7x-standard-4t", 1), "tpu7x-8");
    }

    #[test]
    fn piece_keys_are_distinct_and_stable() {
        let id = "6f1c2d8e-9a4b-5c3d-8e7f-0a1b2c3d4e5f";
        assert_eq!(
            piece_request_id(id, "instance-group"),
            piece_request_id(id, "instance-group")
        );
        assert_ne!(
            piece_request_id(id, "instance-group"),
            piece_request_id(id, "instance-template")
        );
    }
}
