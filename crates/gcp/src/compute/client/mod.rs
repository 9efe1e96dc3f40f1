//! [`ComputeApi`] over Google's `google-cloud-compute-v1` clients: one REST call per method,
//! each observed by the GCP metrics and its error mapped to a [`GcpError`].

use std::future::Future;

use async_trait::async_trait;
use google_cloud_compute_v1::{
    client::{
        InstanceGroupManagerResizeRequests, InstanceGroupManagers, Instances, RegionInstanceTemplates,
        RegionOperations, ResourcePolicies, ZoneOperations,
    },
    model::{
        Instance, InstanceGroupManager, InstanceGroupManagerResizeRequest, InstanceTemplate, ManagedInstance,
        Metadata, Operation, ResourcePolicy,
    },
};

use super::{ComputeApi, Place};
use crate::{
    error::{Result, Service},
    metrics::GcpMetrics,
};

mod pages;

/// [`ComputeApi`] over Google's `google-cloud-compute-v1` clients (one per service, as the
/// crate is organised).
#[derive(Clone, Debug)]
pub struct ComputeClient {
    pub instances: Instances,
    pub templates: RegionInstanceTemplates,
    pub policies: ResourcePolicies,
    pub managers: InstanceGroupManagers,
    pub resize_requests: InstanceGroupManagerResizeRequests,
    pub zone_operations: ZoneOperations,
    pub region_operations: RegionOperations,
    pub metrics: GcpMetrics,
}

impl ComputeClient {
    async fn call<T>(
        &self,
        method: &'static str,
        target: &str,
        call: impl Future<Output = google_cloud_gax::Result<T>>,
    ) -> Result<T> {
        let ready = std::future::ready(Ok(()));
        self.metrics
            .observe_gax(Service::Compute, method, target, ready, |()| call)
            .await
    }
}

#[async_trait]
impl ComputeApi for ComputeClient {
    async fn get_instance(&self, zone: &Place, name: &str) -> Result<Instance> {
        let request = self
            .instances
            .get()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance(name);
        self.call("instances.get", &zone.target("instances", name), request.send())
            .await
    }

    async fn insert_instance(&self, zone: &Place, request_id: &str, instance: Instance) -> Result<Operation> {
        let target = zone.target("instances", instance.name.as_deref().unwrap_or_default());
        let request = self
            .instances
            .insert()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_request_id(request_id)
            .set_body(instance);
        self.call("instances.insert", &target, request.send()).await
    }

    async fn set_instance_metadata(&self, zone: &Place, name: &str, metadata: Metadata) -> Result<Operation> {
        let request = self
            .instances
            .set_metadata()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance(name)
            .set_body(metadata);
        self.call(
            "instances.setMetadata",
            &zone.target("instances", name),
            request.send(),
        )
        .await
    }

    async fn perform_instance_maintenance(&self, zone: &Place, name: &str) -> Result<Operation> {
        let request = self
            .instances
            .perform_maintenance()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance(name);
        let target = zone.target("instances", name);
        self.call("instances.performMaintenance", &target, request.send())
            .await
    }

    async fn delete_instance(&self, zone: &Place, name: &str) -> Result<Operation> {
        let request = self
            .instances
            .delete()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance(name);
        self.call(
            "instances.delete",
            &zone.target("instances", name),
            request.send(),
        )
        .await
    }

    async fn list_instances(&self, zone: &Place, filter: &str) -> Result<Vec<Instance>> {
        self.all_instances(zone, filter).await
    }

    async fn get_instance_template(&self, region: &Place, name: &str) -> Result<InstanceTemplate> {
        let request = self
            .templates
            .get()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_instance_template(name);
        self.call(
            "regionInstanceTemplates.get",
            &region.target("instanceTemplates", name),
            request.send(),
        )
        .await
    }

    async fn insert_instance_template(
        &self,
        region: &Place,
        request_id: &str,
        template: InstanceTemplate,
    ) -> Result<Operation> {
        let target = region.target("instanceTemplates", template.name.as_deref().unwrap_or_default());
        let request = self
            .templates
            .insert()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_request_id(request_id)
            .set_body(template);
        self.call("regionInstanceTemplates.insert", &target, request.send())
            .await
    }

    async fn delete_instance_template(&self, region: &Place, name: &str) -> Result<Operation> {
        let request = self
            .templates
            .delete()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_instance_template(name);
        self.call(
            "regionInstanceTemplates.delete",
            &region.target("instanceTemplates", name),
            request.send(),
        )
        .await
    }

    async fn get_resource_policy(&self, region: &Place, name: &str) -> Result<ResourcePolicy> {
        let request = self
            .policies
            .get()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_resource_policy(name);
        self.call(
            "resourcePolicies.get",
            &region.target("resourcePolicies", name),
            request.send(),
        )
        .await
    }

    async fn insert_resource_policy(
        &self,
        region: &Place,
        request_id: &str,
        policy: ResourcePolicy,
    ) -> Result<Operation> {
        let target = region.target("resourcePolicies", policy.name.as_deref().unwrap_or_default());
        let request = self
            .policies
            .insert()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_request_id(request_id)
            .set_body(policy);
        self.call("resourcePolicies.insert", &target, request.send())
            .await
    }

    async fn delete_resource_policy(&self, region: &Place, name: &str) -> Result<Operation> {
        let request = self
            .policies
            .delete()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_resource_policy(name);
        self.call(
            "resourcePolicies.delete",
            &region.target("resourcePolicies", name),
            request.send(),
        )
        .await
    }

    async fn get_instance_group_manager(&self, zone: &Place, name: &str) -> Result<InstanceGroupManager> {
        let request = self
            .managers
            .get()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(name);
        self.call(
            "instanceGroupManagers.get",
            &zone.target("instanceGroupManagers", name),
            request.send(),
        )
        .await
    }

    async fn insert_instance_group_manager(
        &self,
        zone: &Place,
        request_id: &str,
        manager: InstanceGroupManager,
    ) -> Result<Operation> {
        let target = zone.target(
            "instanceGroupManagers",
            manager.name.as_deref().unwrap_or_default(),
        );
        let request = self
            .managers
            .insert()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_request_id(request_id)
            .set_body(manager);
        self.call("instanceGroupManagers.insert", &target, request.send())
            .await
    }

    async fn delete_instance_group_manager(&self, zone: &Place, name: &str) -> Result<Operation> {
        let request = self
            .managers
            .delete()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(name);
        self.call(
            "instanceGroupManagers.delete",
            &zone.target("instanceGroupManagers", name),
            request.send(),
        )
        .await
    }

    async fn list_managed_instances(&self, zone: &Place, manager: &str) -> Result<Vec<ManagedInstance>> {
        self.all_managed_instances(zone, manager).await
    }

    async fn get_resize_request(
        &self,
        zone: &Place,
        manager: &str,
        name: &str,
    ) -> Result<InstanceGroupManagerResizeRequest> {
        let request = self
            .resize_requests
            .get()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(manager)
            .set_resize_request(name);
        let target = zone.target(
            "instanceGroupManagers",
            &format!("{manager}/resizeRequests/{name}"),
        );
        self.call("instanceGroupManagerResizeRequests.get", &target, request.send())
            .await
    }

    async fn insert_resize_request(
        &self,
        zone: &Place,
        manager: &str,
        request_id: &str,
        body: InstanceGroupManagerResizeRequest,
    ) -> Result<Operation> {
        let target = zone.target("instanceGroupManagers", &format!("{manager}/resizeRequests"));
        let request = self
            .resize_requests
            .insert()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(manager)
            .set_request_id(request_id)
            .set_body(body);
        self.call(
            "instanceGroupManagerResizeRequests.insert",
            &target,
            request.send(),
        )
        .await
    }

    async fn cancel_resize_request(&self, zone: &Place, manager: &str, name: &str) -> Result<Operation> {
        let request = self
            .resize_requests
            .cancel()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(manager)
            .set_resize_request(name);
        let target = zone.target(
            "instanceGroupManagers",
            &format!("{manager}/resizeRequests/{name}"),
        );
        self.call(
            "instanceGroupManagerResizeRequests.cancel",
            &target,
            request.send(),
        )
        .await
    }

    async fn delete_resize_request(&self, zone: &Place, manager: &str, name: &str) -> Result<Operation> {
        let request = self
            .resize_requests
            .delete()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_instance_group_manager(manager)
            .set_resize_request(name);
        let target = zone.target(
            "instanceGroupManagers",
            &format!("{manager}/resizeRequests/{name}"),
        );
        self.call(
            "instanceGroupManagerResizeRequests.delete",
            &target,
            request.send(),
        )
        .await
    }

    async fn get_zone_operation(&self, zone: &Place, name: &str) -> Result<Operation> {
        let request = self
            .zone_operations
            .get()
            .set_project(&zone.project)
            .set_zone(&zone.location)
            .set_operation(name);
        self.call(
            "zoneOperations.get",
            &zone.target("operations", name),
            request.send(),
        )
        .await
    }

    async fn get_region_operation(&self, region: &Place, name: &str) -> Result<Operation> {
        let request = self
            .region_operations
            .get()
            .set_project(&region.project)
            .set_region(&region.location)
            .set_operation(name);
        self.call(
            "regionOperations.get",
            &region.target("operations", name),
            request.send(),
        )
        .await
    }
}
