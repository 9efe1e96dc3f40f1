//! The Compute Engine backend (`provisioner: ComputeEngine`): a single-host slice is one
//! instance of a TPU machine type, a multi-host or flex-start slice a managed instance group made
//! from a shared instance template and workload policy (`tpu_operator_gcp::ComputeSlices`, which
//! reads them back in the TPU API's model). Flex-start capacity is a resize request, read as a
//! queued resource.
//!
//! No node updates: labels and metadata are fixed at creation (the VMs come from their template)
//! and a stopped slice is not started. The exceptions are the checkpoint request before a
//! maintenance, set on each VM, and that maintenance started early on each VM. The cloud watch lists TPU nodes only, so a changing slice
//! is read by name.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tpu_operator_api::{
    accelerator::SliceShape,
    naming::{ObjectIdentity, request_id},
    tpu_slice::{CHECKPOINT_REQUEST_METADATA, TpuSliceSpec},
};
use tpu_operator_gcp::{
    ErrorKind, Gcp, GcpError, Service,
    longrunning::model::Operation,
    tpu_v2::model::{Node, QueuedResource},
};

use super::{Creating, NodeUpdates, Releasing, SliceBackend};
use crate::{
    kinds::tpu_slice::{
        compute,
        request::{Create, CreateAt, Desired},
    },
    runtime::error::ReconcileError,
};

/// The request-id purpose of Compute Engine creates (one id per incarnation; each piece of a
/// group-backed slice derives its own from it).
const CREATE_COMPUTE: &str = "create-compute-engine-slice";

/// Slices on Compute Engine.
#[derive(Clone, Copy, Debug)]
pub struct ComputeEngine;

#[async_trait]
impl SliceBackend for ComputeEngine {
    fn check(&self, spec: &TpuSliceSpec, shape: &SliceShape) -> Result<(), String> {
        compute::check(spec, shape).map(|_| ())
    }

    fn create_request(
        &self,
        spec: &TpuSliceSpec,
        shape: &SliceShape,
        desired: &Desired,
        identity: &ObjectIdentity,
        at: &CreateAt<'_>,
    ) -> Result<Create, String> {
        compute::request(spec, shape, desired, identity, at.project, at.id).map(Create::ComputeEngine)
    }

    fn updates(&self) -> Option<&dyn NodeUpdates> {
        None
    }

    fn watchable(&self) -> bool {
        false
    }

    /// Compute Engine orphans are reported by the sweeper, not counted.
    fn counts_orphans(&self) -> bool {
        false
    }

    fn deletes_known_node(&self) -> bool {
        false
    }

    /// A flex-start slice is its group plus a resize request, and the group is inserted first:
    /// an operator killed between the two inserts (or a slice deleted then) leaves a group with
    /// no request, which only a read of the group shows.
    fn node_without_queue(&self) -> bool {
        true
    }

    /// The project's VM instances page: a slice's hosts are instances named after it.
    fn console(&self, project: &str, _node: &str) -> Option<String> {
        Some(tpu_operator_gcp::logging::sources::compute_instances_console(
            project,
        ))
    }

    async fn get_node(&self, gcp: &Gcp, name: &str) -> Result<Node, GcpError> {
        gcp.compute_slices.get_node(name).await
    }

    async fn get_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<QueuedResource, GcpError> {
        gcp.compute_slices.get_queued_resource(name).await
    }

    async fn create(&self, gcp: &Gcp, create: &Create, at: &Creating<'_>) -> Result<Operation, GcpError> {
        let Create::ComputeEngine(slice) = create else {
            // `create_request` above makes only this one; a request mapped by another backend
            // is a bug, reported as the spec's.
            return Err(GcpError::new(
                ErrorKind::InvalidArgument,
                Service::Compute,
                "create slice",
                at.parent,
                "a TPU API request cannot be sent to Compute Engine",
            ));
        };
        let shared = compute::shared_id(at.identity);
        let key = request_id(at.identity, CREATE_COMPUTE, at.recreations);
        gcp.compute_slices.create(slice, &shared, &key).await
    }

    async fn delete_node(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.compute_slices.delete_node(name).await
    }

    async fn delete_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.compute_slices.delete_queued_resource(name).await
    }

    async fn get_operation(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.compute_slices.get_operation(name).await
    }

    /// The request only (`instances.setMetadata` keeps the VM's other items as they are), one
    /// VM per call: the slice's instance, or its group's members in turn.
    async fn request_checkpoint(
        &self,
        gcp: &Gcp,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Option<Operation>, GcpError> {
        let key = CHECKPOINT_REQUEST_METADATA;
        let Some(value) = metadata.get(key) else {
            return Ok(None);
        };
        gcp.compute_slices.set_metadata_key(name, key, value).await
    }

    /// Every VM of the slice whose maintenance may move is started in one call (a flex-start
    /// slice's resize request is no queued resource of the TPU API's).
    async fn start_maintenance(
        &self,
        gcp: &Gcp,
        name: &str,
        _queued: Option<&str>,
    ) -> Result<Option<Operation>, GcpError> {
        gcp.compute_slices.perform_maintenance(name).await
    }

    /// The template and workload policy every incarnation's group was made from go last, once
    /// no group uses them. A single instance shares nothing.
    async fn release(&self, gcp: &Gcp, slice: &Releasing<'_>) -> Result<Option<String>, ReconcileError> {
        if !compute::uses_group(slice.spec) {
            return Ok(None);
        }
        let shared = compute::shared_id(slice.identity);
        let released = gcp
            .compute_slices
            .release(slice.project, &slice.spec.zone, &shared)
            .await
            .map_err(ReconcileError::gcp(
                "delete instance template and workload policy",
            ))?;
        Ok((!released).then(|| format!("deleting instance template and workload policy {shared}")))
    }
}
