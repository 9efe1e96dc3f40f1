//! Executes the planned action: at most one mutating TPU call per reconcile. The caller writes the
//! returned operation name to status right away.

use tpu_operator_api::{
    accelerator::SliceShape,
    naming::ObjectIdentity,
    tpu_slice::{Provisioner, TpuSliceSpec},
};
use tpu_operator_gcp::{GcpError, ignore_not_found, tpu_v2::model::Node};

use super::{
    compute,
    observe::Names,
    plan::Action,
    spec::{self, Desired},
};
use crate::runtime::context::Context;

/// The request-id purpose of queued-resource creates (one id per incarnation).
const CREATE_QR: &str = "create-queued-resource";
/// The request-id purpose of Compute Engine creates (one id per incarnation; each piece of a
/// group-backed slice derives its own from it).
const CREATE_COMPUTE: &str = "create-compute-engine-slice";

/// What the cloud call started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub operation: String,
    /// The verb, for events and logs (`create`, `delete`, ...).
    pub verb: &'static str,
}

/// Everything act needs to build requests.
pub struct Request<'a> {
    pub spec: &'a TpuSliceSpec,
    pub names: &'a Names,
    pub desired: &'a Desired,
    pub identity: &'a ObjectIdentity,
    /// One slice's shape (`None`: the spec names no valid shape, and the plan creates nothing).
    pub shape: Option<&'a SliceShape>,
    pub recreations: u32,
    /// The node as observed this pass (its metadata is the base of a metadata patch).
    pub node: Option<&'a Node>,
}

/// Performs `action`. `Ok(None)` for actions without a cloud call.
pub async fn act(ctx: &Context, action: &Action, req: &Request<'_>) -> Result<Option<Started>, GcpError> {
    let tpu = req.names.cloud(ctx);
    let names = req.names;
    let (verb, op) = match action {
        Action::Nothing | Action::RecordPreemption => return Ok(None),
        Action::CreateNode | Action::CreateQueuedResource
            if names.provisioner == Provisioner::ComputeEngine =>
        {
            let slice = req
                .shape
                .ok_or_else(|| "spec names no valid TPU shape".to_string())
                .and_then(|shape| {
                    compute::request(
                        req.spec,
                        shape,
                        req.desired,
                        req.identity,
                        &names.project,
                        &names.current.id,
                    )
                })
                .map_err(|message| invalid_spec(&names.parent, message))?;
            let request_id =
                tpu_operator_api::naming::request_id(req.identity, CREATE_COMPUTE, req.recreations);
            let shared = compute::shared_id(req.identity);
            let op = ctx
                .gcp
                .compute_slices
                .create(&slice, &shared, &request_id)
                .await?;
            ("create", op)
        }
        Action::CreateNode => {
            let node = spec::node(req.spec, req.desired, req.identity);
            let op = tpu.create_node(&names.parent, &names.current.id, node).await?;
            ("create", op)
        }
        Action::CreateQueuedResource => {
            let node = spec::node(req.spec, req.desired, req.identity);
            let qr_id = names
                .current
                .queued
                .as_deref()
                .and_then(|n| n.rsplit('/').next())
                .unwrap_or(&names.current.id);
            let qr = spec::queued_resource(req.spec, node, &names.parent, &names.current.id, &names.project)
                .map_err(|message| invalid_spec(&names.parent, message))?;
            let request_id = tpu_operator_api::naming::request_id(req.identity, CREATE_QR, req.recreations);
            let op = tpu
                .create_queued_resource(&names.parent, qr_id, &request_id, qr)
                .await?;
            ("create", op)
        }
        // Already gone is what a delete wants.
        Action::DeleteNode(name) => match ignore_not_found(tpu.delete_node(name).await)? {
            Some(op) => ("delete", op),
            None => return Ok(None),
        },
        Action::DeleteQueuedResource(name) => {
            match ignore_not_found(tpu.delete_queued_resource(name, true).await)? {
                Some(op) => ("delete", op),
                None => return Ok(None),
            }
        }
        Action::PatchSliceNode { node, mask, patch } => {
            let body = Node::new()
                .set_labels(patch.labels.clone())
                .set_metadata(patch.metadata.clone())
                .set_tags(patch.tags.clone());
            ("update", tpu.update_node(node, body, mask).await?)
        }
        Action::StartNode => ("start", tpu.start_node(&names.current.node).await?),
        Action::PatchNode(mask) => {
            // `updateMask=metadata` replaces the node's whole map: send what it has now with
            // only the managed keys changed, so keys others added (`ssh-keys`) survive.
            let metadata = match req.node {
                Some(n) => spec::patched_metadata(req.desired, &n.metadata),
                None => req.desired.metadata.clone(),
            };
            let patch = Node::new()
                .set_labels(req.desired.labels.clone())
                .set_metadata(metadata)
                .set_tags(req.desired.tags.clone());
            ("update", tpu.update_node(&names.current.node, patch, mask).await?)
        }
    };
    Ok(Some(Started {
        operation: op.name,
        verb,
    }))
}

fn invalid_spec(target: &str, message: String) -> GcpError {
    GcpError::new(
        tpu_operator_gcp::ErrorKind::InvalidArgument,
        tpu_operator_gcp::Service::Tpu,
        "create",
        target,
        message,
    )
}
