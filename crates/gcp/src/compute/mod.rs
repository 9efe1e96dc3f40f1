//! Compute Engine v1: the surfaces a TPU slice uses when Compute Engine provisions it (instances
//! of TPU machine types, regional instance templates, workload policies, managed instance
//! groups and their resize requests, zonal and regional operations).
//!
//! [`ComputeApi`] is the narrow trait over Google's `google-cloud-compute-v1` client, one method
//! per REST call; [`slices::ComputeSlices`] builds TPU slices out of it and reads them back in
//! the TPU API's model (`Node`, `QueuedResource`, `Operation`), so the TpuSlice controller plans
//! both backends the same way.

mod client;
pub mod convert;
pub mod slices;

pub use client::ComputeClient;

use async_trait::async_trait;
use google_cloud_compute_v1::model::{
    Instance, InstanceGroupManager, InstanceGroupManagerResizeRequest, InstanceTemplate, ManagedInstance,
    Metadata, Operation, ResourcePolicy,
};

use crate::error::Result;

/// Where a zonal or regional resource lives: project id plus zone or region name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub project: String,
    /// A zone (`us-east5-b`) for instances, groups, resize requests and zonal operations; a
    /// region (`us-east5`) for templates, policies and regional operations.
    pub location: String,
}

impl Place {
    pub fn new(project: impl Into<String>, location: impl Into<String>) -> Self {
        Self {
            project: project.into(),
            location: location.into(),
        }
    }

    fn target(&self, collection: &str, name: &str) -> String {
        format!("projects/{}/{}/{collection}/{name}", self.project, self.location)
    }
}

/// The Compute Engine calls the TPU backend makes. Mutations return the started operation;
/// poll it with [`ComputeApi::get_zone_operation`] / [`ComputeApi::get_region_operation`].
/// Names are short resource names; `request_id` makes an insert idempotent for a retry
/// ("the server will know to ignore the request if it has already been completed",
/// `compute.v1.json` `requestId`).
#[async_trait]
pub trait ComputeApi: Send + Sync {
    async fn get_instance(&self, zone: &Place, name: &str) -> Result<Instance>;
    async fn insert_instance(&self, zone: &Place, request_id: &str, instance: Instance) -> Result<Operation>;
    async fn delete_instance(&self, zone: &Place, name: &str) -> Result<Operation>;
    /// `instances.setMetadata`: the instance's metadata items become `metadata`'s, whose
    /// `fingerprint` must be the one last read (a change made since fails the call).
    async fn set_instance_metadata(&self, zone: &Place, name: &str, metadata: Metadata) -> Result<Operation>;
    /// `instances.performMaintenance`: the instance's pending, reschedulable maintenance starts
    /// now instead of at its window.
    async fn perform_instance_maintenance(&self, zone: &Place, name: &str) -> Result<Operation>;
    /// Every instance in a zone matching `filter` (Compute's filter syntax, e.g.
    /// `labels.tpu-operator-cluster = "c1"`), all pages.
    async fn list_instances(&self, zone: &Place, filter: &str) -> Result<Vec<Instance>>;

    async fn get_instance_template(&self, region: &Place, name: &str) -> Result<InstanceTemplate>;
    async fn insert_instance_template(
        &self,
        region: &Place,
        request_id: &str,
        template: InstanceTemplate,
    ) -> Result<Operation>;
    async fn delete_instance_template(&self, region: &Place, name: &str) -> Result<Operation>;

    async fn get_resource_policy(&self, region: &Place, name: &str) -> Result<ResourcePolicy>;
    async fn insert_resource_policy(
        &self,
        region: &Place,
        request_id: &str,
        policy: ResourcePolicy,
    ) -> Result<Operation>;
    async fn delete_resource_policy(&self, region: &Place, name: &str) -> Result<Operation>;

    async fn get_instance_group_manager(&self, zone: &Place, name: &str) -> Result<InstanceGroupManager>;
    async fn insert_instance_group_manager(
        &self,
        zone: &Place,
        request_id: &str,
        manager: InstanceGroupManager,
    ) -> Result<Operation>;
    async fn delete_instance_group_manager(&self, zone: &Place, name: &str) -> Result<Operation>;
    /// The group's instances with their status and current action, all pages.
    async fn list_managed_instances(&self, zone: &Place, manager: &str) -> Result<Vec<ManagedInstance>>;

    async fn get_resize_request(
        &self,
        zone: &Place,
        manager: &str,
        name: &str,
    ) -> Result<InstanceGroupManagerResizeRequest>;
    async fn insert_resize_request(
        &self,
        zone: &Place,
        manager: &str,
        request_id: &str,
        request: InstanceGroupManagerResizeRequest,
    ) -> Result<Operation>;
    async fn cancel_resize_request(&self, zone: &Place, manager: &str, name: &str) -> Result<Operation>;
    async fn delete_resize_request(&self, zone: &Place, manager: &str, name: &str) -> Result<Operation>;

    async fn get_zone_operation(&self, zone: &Place, name: &str) -> Result<Operation>;
    async fn get_region_operation(&self, region: &Place, name: &str) -> Result<Operation>;
}
