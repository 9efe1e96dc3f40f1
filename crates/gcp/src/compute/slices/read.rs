//! The slice read back by name, and deleted, in the TPU API's model: its instance, or its group
//! with its members' instances; its flex-start resize request as a queued resource; its
//! Compute Engine operations as long-running operations.

use google_cloud_longrunning::model::Operation;
use google_cloud_tpu_v2::model::{Node, QueuedResource};

use super::{ComputeSlices, accelerator_of, zonal};
use crate::{
    compute::{
        Place,
        convert::{self, Layout},
    },
    error::{ErrorKind, GcpError, Result, Service},
};

fn not_found(method: &'static str, target: &str) -> GcpError {
    let mut e = GcpError::new(ErrorKind::NotFound, Service::Compute, method, target, "not found");
    e.http_status = Some(404);
    e
}

fn invalid(method: &'static str, target: &str, why: String) -> GcpError {
    GcpError::new(ErrorKind::InvalidArgument, Service::Compute, method, target, why)
}

impl ComputeSlices {
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
