//! The Cloud TPU API backend (`provisioner: TpuApi`): a node created by `nodes.create`, or a
//! queued resource (`capacity.queued`, `capacity.reserved`, multislice) whose nodes the service
//! creates. Every call is one TPU API call through `io.gcp.tpu`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tpu_operator_api::{
    accelerator::{SliceShape, TpuGeneration},
    naming::{ObjectIdentity, request_id},
    tpu_slice::TpuSliceSpec,
};
use tpu_operator_gcp::{
    ErrorKind, Gcp, GcpError, Service,
    longrunning::model::Operation,
    tpu_v2::model::{Node, QueuedResource},
};

use super::{Creating, NodeUpdates, Releasing, SliceBackend};
use crate::{
    kinds::tpu_slice::{
        request::{Create, CreateAt, Desired},
        spec,
    },
    runtime::error::ReconcileError,
};

/// The request-id purpose of queued-resource creates (one id per incarnation).
const CREATE_QR: &str = "create-queued-resource";

/// Slices on the Cloud TPU API.
#[derive(Clone, Copy, Debug)]
pub struct TpuApi;

#[async_trait]
impl SliceBackend for TpuApi {
    fn check(&self, _spec: &TpuSliceSpec, shape: &SliceShape) -> Result<(), String> {
        if shape.generation == TpuGeneration::Tpu7x {
            return Err(
                "spec.provisioner: TPU7x is provisioned only through Compute Engine: set provisioner: ComputeEngine and computeEngine.image".into(),
            );
        }
        Ok(())
    }

    fn create_request(
        &self,
        spec: &TpuSliceSpec,
        _shape: &SliceShape,
        desired: &Desired,
        identity: &ObjectIdentity,
        at: &CreateAt<'_>,
    ) -> Result<Create, String> {
        let node = spec::node(spec, desired, identity);
        if !spec.uses_queued_resource() {
            return Ok(Create::Node {
                id: at.id.to_string(),
                node: Box::new(node),
            });
        }
        Ok(Create::QueuedResource {
            id: at.queued_id.unwrap_or(at.id).to_string(),
            body: spec::queued_resource(spec, node, at.parent, at.id, at.project)?,
        })
    }

    fn updates(&self) -> Option<&dyn NodeUpdates> {
        Some(self)
    }

    fn watchable(&self) -> bool {
        true
    }

    fn counts_orphans(&self) -> bool {
        true
    }

    fn deletes_known_node(&self) -> bool {
        true
    }

    fn node_without_queue(&self) -> bool {
        false
    }

    fn console(&self, _project: &str, node: &str) -> Option<String> {
        tpu_operator_gcp::logging::sources::tpu_node_console(node)
    }

    async fn get_node(&self, gcp: &Gcp, name: &str) -> Result<Node, GcpError> {
        gcp.tpu.get_node(name).await
    }

    async fn get_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<QueuedResource, GcpError> {
        gcp.tpu.get_queued_resource(name).await
    }

    async fn create(&self, gcp: &Gcp, create: &Create, at: &Creating<'_>) -> Result<Operation, GcpError> {
        match create {
            Create::Node { id, node } => gcp.tpu.create_node(at.parent, id, (**node).clone()).await,
            Create::QueuedResource { id, body } => {
                let key = match at.slice {
                    None => request_id(at.identity, CREATE_QR, at.recreations),
                    Some((k, restarts)) => {
                        let purpose = format!("{CREATE_QR}/slice-{k}/{restarts}");
                        request_id(at.identity, &purpose, at.recreations)
                    }
                };
                gcp.tpu
                    .create_queued_resource(at.parent, id, &key, body.clone())
                    .await
            }
            // `create_request` above makes only the two above; a request mapped by another
            // backend is a bug, reported as the spec's.
            Create::ComputeEngine(_) => Err(GcpError::new(
                ErrorKind::InvalidArgument,
                Service::Tpu,
                "create",
                at.parent,
                "a Compute Engine request cannot be sent to the TPU API",
            )),
        }
    }

    async fn delete_node(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.tpu.delete_node(name).await
    }

    async fn delete_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.tpu.delete_queued_resource(name, true).await
    }

    async fn get_operation(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.tpu.get_operation(name).await
    }

    /// One `nodes.patch` of the node's metadata: a map in an update mask is replaced whole.
    async fn request_checkpoint(
        &self,
        gcp: &Gcp,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Option<Operation>, GcpError> {
        let body = Node::new().set_metadata(metadata.clone());
        gcp.tpu.update_node(name, body, &["metadata"]).await.map(Some)
    }

    /// A node of a queued resource is maintained through the queued resource, naming only that
    /// node (a multislice's other slices are left running).
    async fn start_maintenance(
        &self,
        gcp: &Gcp,
        name: &str,
        queued: Option<&str>,
    ) -> Result<Option<Operation>, GcpError> {
        let op = match queued {
            Some(q) => {
                gcp.tpu
                    .perform_maintenance_queued_resource(q, &[name.to_string()])
                    .await?
            }
            None => gcp.tpu.perform_maintenance(name).await?,
        };
        Ok(Some(op))
    }

    /// A TPU node or queued resource shares nothing with another incarnation.
    async fn release(&self, _gcp: &Gcp, _slice: &Releasing<'_>) -> Result<Option<String>, ReconcileError> {
        Ok(None)
    }
}

#[async_trait]
impl NodeUpdates for TpuApi {
    async fn patch_node(
        &self,
        gcp: &Gcp,
        name: &str,
        node: Node,
        mask: &[&str],
    ) -> Result<Operation, GcpError> {
        gcp.tpu.update_node(name, node, mask).await
    }

    async fn start_node(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.tpu.start_node(name).await
    }
}
