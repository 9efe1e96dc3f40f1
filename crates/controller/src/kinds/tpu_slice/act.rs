//! Executes the planned action: at most one mutating TPU call per reconcile. The caller writes the
//! returned operation name to status right away.

use tpu_operator_api::naming::ObjectIdentity;
use tpu_operator_gcp::{GcpError, ignore_not_found, longrunning::model::Operation, tpu_v2::model::Node};

use super::{
    compute,
    observe::Names,
    plan::Action,
    spec::{self, Create, Desired},
};
use crate::reconcile::context::Context;

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

/// Everything act needs for its call. Requests are mapped from the spec before plan, so every
/// error act returns is the cloud's.
pub struct Request<'a> {
    pub names: &'a Names,
    pub desired: &'a Desired,
    pub identity: &'a ObjectIdentity,
    /// The current incarnation's create request (`None`: the spec is invalid, and plan reports
    /// that instead of planning a create).
    pub create: Option<&'a Create>,
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
        Action::CreateNode | Action::CreateQueuedResource => match req.create {
            Some(create) => ("create", self::create(ctx, create, req).await?),
            None => return Ok(None),
        },
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

/// Sends the create request of the current incarnation, with the incarnation's request id so
/// that a retried create is the same create.
async fn create(ctx: &Context, create: &Create, req: &Request<'_>) -> Result<Operation, GcpError> {
    let request_id = |purpose| tpu_operator_api::naming::request_id(req.identity, purpose, req.recreations);
    let tpu = req.names.cloud(ctx);
    match create {
        Create::ComputeEngine(slice) => {
            let shared = compute::shared_id(req.identity);
            let id = request_id(CREATE_COMPUTE);
            ctx.gcp.compute_slices.create(slice, &shared, &id).await
        }
        Create::Node { id, node } => tpu.create_node(&req.names.parent, id, (**node).clone()).await,
        Create::QueuedResource { id, body } => {
            let request_id = request_id(CREATE_QR);
            tpu.create_queued_resource(&req.names.parent, id, &request_id, body.clone())
                .await
        }
    }
}
