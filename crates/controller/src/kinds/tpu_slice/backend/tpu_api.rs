//! The Cloud TPU API backend (`provisioner: TpuApi`): a node created by `nodes.create`, or a
//! queued resource (`capacity.queued`, `capacity.reserved`, multislice) whose nodes the service
//! creates. Every call is one TPU API call through `ctx.gcp.tpu`.

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
    tpu_v2::model::{Node, QueuedResource, node, queued_resource_state},
};

use super::{Creating, NodeUpdates, Releasing, SliceBackend};
use crate::{
    governance::sweeper::{
        listing::{PlaceListing, TpuShape},
        plan::{CloudResource, ResourceKind, Stage},
    },
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

    /// A TPU node or queued resource shares nothing with another incarnation.
    async fn release(&self, _gcp: &Gcp, _slice: &Releasing<'_>) -> Result<Option<String>, ReconcileError> {
        Ok(None)
    }

    /// Every TPU node and queued resource in the zone (TPU v2 has no server-side filter), with
    /// the shape each holds, for the orphans' quota and budget.
    async fn list_owned(
        &self,
        gcp: &Gcp,
        project: &str,
        zone: &str,
        _filter: &str,
        found: &mut PlaceListing,
    ) {
        let parent = format!("projects/{project}/locations/{zone}");
        let nodes = gcp.tpu.list_nodes(&parent).await;
        found.keep(format!("list TPU nodes in {parent}"), nodes, |f, v| {
            f.tpu.extend(v.iter().map(|n| (n.name.clone(), node_shape(n))));
            f.resources.extend(v.into_iter().map(from_node))
        });
        let qrs = gcp.tpu.list_queued_resources(&parent).await;
        found.keep(format!("list queued resources in {parent}"), qrs, |f, v| {
            f.tpu
                .extend(v.iter().filter_map(|q| Some((q.name.clone(), queued_shape(q)?))));
            f.resources.extend(v.into_iter().map(from_queued))
        });
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

    async fn perform_maintenance(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError> {
        gcp.tpu.perform_maintenance(name).await
    }
}

fn labels_of<'a>(l: impl IntoIterator<Item = (&'a String, &'a String)>) -> BTreeMap<String, String> {
    l.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn active_or_winding(winding: bool) -> Stage {
    if winding {
        Stage::Winding
    } else {
        Stage::Active {
            cancel_operation: None,
        }
    }
}

fn from_node(n: Node) -> CloudResource {
    CloudResource {
        kind: ResourceKind::TpuNode,
        stage: active_or_winding(n.state == node::State::Deleting),
        in_queued_resource: !n.queued_resource.is_empty(),
        labels: labels_of(&n.labels),
        name: n.name,
    }
}

fn from_queued(q: QueuedResource) -> CloudResource {
    let labels = q
        .tpu()
        .and_then(|t| t.node_spec.first())
        .and_then(|s| s.node.as_ref())
        .map(|n| labels_of(&n.labels))
        .unwrap_or_default();
    let deleting = matches!(
        q.state.as_ref().map(|s| &s.state),
        Some(queued_resource_state::State::Deleting)
    );
    CloudResource {
        kind: ResourceKind::QueuedResource,
        stage: active_or_winding(deleting),
        in_queued_resource: false,
        labels,
        name: q.name,
    }
}

fn node_shape(n: &Node) -> TpuShape {
    TpuShape {
        accelerator_type: n.accelerator_type.clone(),
        nodes: 1,
        spot: n
            .scheduling_config
            .as_ref()
            .is_some_and(|s| s.spot || s.preemptible),
    }
}

fn queued_shape(q: &QueuedResource) -> Option<TpuShape> {
    let spec = q.tpu()?.node_spec.first()?;
    let node = spec.node.as_ref()?;
    let nodes = spec
        .multislice_params()
        .map_or(1, |m| u32::try_from(m.node_count).unwrap_or(1).max(1));
    Some(TpuShape {
        accelerator_type: node.accelerator_type.clone(),
        nodes,
        spot: q.spot().is_some(),
    })
}
