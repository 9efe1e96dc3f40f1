//! Executes the planned action: at most one mutating TPU call per reconcile (or, for a slice Kueue
//! gates, one Kubernetes write to its Workload). It changes nothing it is given: what it learns
//! (the operation started, a create held back or refused) comes back as [`Done`], from which
//! `report` builds the status.

use std::borrow::Cow;

use tpu_operator_api::naming::ObjectIdentity;
use tpu_operator_gcp::{GcpError, ignore_not_found, longrunning::model::Operation, tpu_v2::model::Node};

use tpu_operator_api::tpu_slice::TpuSlice;

use super::{
    backend::{Creating, NodeUpdates, SliceAsk},
    observe::Names,
    plan::{self, Action, Outcome, Plan, Verdict},
    queue,
    spec::{self, Create, Desired},
};
use crate::{
    kueue::queued::{self, Write},
    reconcile::handles::Io,
    runtime::capacity::Place,
    runtime::error::{ReconcileError, Result},
};

mod memory;
mod pace;

/// What the cloud call started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub operation: String,
    /// The verb, for events and logs (`create`, `delete`, ...).
    pub verb: &'static str,
}

/// What the action did, for `report` and `wait`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Done {
    /// The operation the call started, if any.
    pub started: Option<Started>,
    /// What status says instead of the plan's verdict and details: the create was held back
    /// (stockout memory, create pacing) or the call refused in a way the slice reports.
    pub instead: Option<Outcome>,
}

impl Done {
    /// The operation `started`, as the plan said.
    pub fn started(started: Option<Started>) -> Self {
        Self {
            started,
            instead: None,
        }
    }

    /// Nothing started: `outcome` is reported instead of the plan's.
    pub(super) fn instead(outcome: Outcome) -> Self {
        Self {
            started: None,
            instead: Some(outcome),
        }
    }

    /// The verdict status reports after the action.
    pub fn verdict<'a>(&'a self, plan: &'a Plan) -> &'a Verdict {
        self.instead.as_ref().map_or(&plan.verdict, |o| &o.verdict)
    }

    /// The verdict and details status reports after the action.
    pub fn outcome(&self, plan: &Plan) -> Outcome {
        self.instead.clone().unwrap_or_else(|| Outcome::of(plan))
    }
}

/// The verb of a maintenance started early.
pub const MAINTAIN: &str = "maintain";

impl Started {
    /// Whether status keeps the operation as the slice's pending one, which holds back the next
    /// change until it is done. A maintenance's operation is not kept: it lasts as long as the
    /// maintenance, the node's own state says where that stands, and a preemption or a spec
    /// change meanwhile must not wait for it.
    pub fn tracked(&self) -> bool {
        self.verb != MAINTAIN
    }
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
    /// Multislice: how often each slice was replaced alone (`status.sliceRestarts`).
    pub slice_restarts: &'a [i32],
    /// The node as observed this pass (its metadata is the base of a metadata patch).
    pub node: Option<&'a Node>,
    /// Where a direct create asks for capacity (the stockout memory's key).
    pub place: Option<&'a Place>,
}

/// Performs `action`. `Ok(None)` for actions without a cloud call.
pub async fn act(io: &Io<'_>, action: &Action, req: &Request<'_>) -> Result<Option<Started>, GcpError> {
    let (cloud, gcp) = (req.names.backend(), io.gcp);
    let (verb, op) = match action {
        Action::Nothing
        | Action::RecordPreemption
        | Action::RecordSliceLoss(_)
        | Action::ReturnToGranted
        | Action::RecordSuspension
        | Action::CreateWorkload
        | Action::ReleaseWorkload
        | Action::DeleteWorkload
        // The backend's own call, made by deletion's act (`cleanup::act`).
        | Action::ReleaseShared => return Ok(None),
        Action::CreateNode | Action::CreateQueuedResource | Action::CreateSliceQueuedResource(_) => {
            let Some((create, slice)) = create_request(action, req) else {
                return Ok(None);
            };
            let at = Creating {
                parent: &req.names.parent,
                identity: req.identity,
                recreations: req.recreations,
                slice,
            };
            ("create", cloud.create(gcp, &create, &at).await?)
        }
        // Already gone is what a delete wants.
        Action::DeleteNode(name) => match ignore_not_found(cloud.delete_node(gcp, name).await)? {
            Some(op) => ("delete", op),
            None => return Ok(None),
        },
        Action::DeleteQueuedResource(name) => {
            match ignore_not_found(cloud.delete_queued_resource(gcp, name).await)? {
                Some(op) => ("delete", op),
                None => return Ok(None),
            }
        }
        Action::PerformMaintenance { node, queued } => {
            match cloud.start_maintenance(gcp, node, queued.as_deref()).await? {
                Some(op) => (MAINTAIN, op),
                None => return Ok(None),
            }
        }
        Action::RequestCheckpoint { node, metadata } => {
            match cloud.request_checkpoint(gcp, node, metadata).await? {
                Some(op) => ("update", op),
                None => return Ok(None),
            }
        }
        Action::PatchNode(_) | Action::StartNode | Action::PatchSliceNode { .. } => {
            // The plan plans no node update for a backend without them.
            let Some(updates) = cloud.updates() else {
                return Ok(None);
            };
            update(io, updates, action, req).await?
        }
    };
    Ok(Some(Started {
        operation: op.name,
        verb,
    }))
}

/// The request a create `action` sends (`None`: the spec is invalid, and plan reported that) and,
/// for one slice of a multislice, which slice and how often it was replaced alone (its request id
/// follows both).
fn create_request<'a>(action: &Action, req: &Request<'a>) -> Option<(Cow<'a, Create>, Option<SliceAsk>)> {
    let create = req.create?;
    match action {
        Action::CreateSliceQueuedResource(k) => {
            let id = req.names.current.slice_queue(*k)?.rsplit('/').next()?;
            let restarts = req.slice_restarts.get(*k).copied().unwrap_or(0);
            Some((Cow::Owned(create.for_slice(id)?), Some((*k, restarts))))
        }
        _ => Some((Cow::Borrowed(create), None)),
    }
}

/// A node update: a patch of the node's labels / metadata / tags, or a start.
async fn update(
    io: &Io<'_>,
    updates: &dyn NodeUpdates,
    action: &Action,
    req: &Request<'_>,
) -> Result<(&'static str, Operation), GcpError> {
    let (gcp, current) = (io.gcp, &req.names.current.node);
    match action {
        Action::PatchSliceNode { node, mask, patch } => {
            let body = Node::new()
                .set_labels(patch.labels.clone())
                .set_metadata(patch.metadata.clone())
                .set_tags(patch.tags.clone());
            Ok(("update", updates.patch_node(gcp, node, body, mask).await?))
        }
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
            Ok(("update", updates.patch_node(gcp, current, patch, mask).await?))
        }
        // `StartNode`: only node updates come here.
        _ => Ok(("start", updates.start_node(gcp, current).await?)),
    }
}

/// The plan's Kubernetes write for Kueue: the slice's Workload created, or an evicted one's
/// reservation released.
pub(super) async fn on_queue(
    slice: &TpuSlice,
    io: &Io<'_>,
    action: &Action,
    queued: &queue::Queued,
) -> Result<()> {
    let write = match action {
        Action::CreateWorkload => Write::Create,
        Action::DeleteWorkload => Write::Delete,
        _ => Write::Release,
    };
    queued::write(slice, io, queued, write).await
}

/// Runs the plan's action. A refusal the plan knows how to report is reported instead of its
/// verdict and comes back as the failure; another operation running on the node leaves the plan
/// as it is.
pub(super) async fn on_plan(
    io: &Io<'_>,
    plan: &Plan,
    request: &Request<'_>,
) -> Result<(Done, Option<tpu_operator_gcp::GcpError>)> {
    if let Some(err) = &plan.details.failure {
        create_failed(io, request, err);
        memory::operation_failed(io, request, err);
    }
    memory::node_seen(io, request);
    let creates = plan.action.creates();
    if creates && let Some(held) = memory::ask(io, request) {
        // The place stocked out (for this slice or another) and is blocked, or another slice's
        // create is asking it now: no call, and status says until when.
        return Ok((Done::instead(held), None));
    }
    if creates && let Some(waits) = pace::ask(io, request) {
        // The project's creates are paced and others are ahead: no call, so the probe the
        // memory may have just handed this slice goes to whoever asks next.
        if let Some(place) = request.place {
            io.capacity.release(place, &request.identity.uid);
        }
        return Ok((Done::instead(waits), None));
    }
    let result = act(io, &plan.action, request).await;
    if creates {
        memory::answered(io, request, &result);
        pace::answered(io, request, &result);
    }
    if let (true, Err(err)) = (creates, &result)
        && err.kind != tpu_operator_gcp::ErrorKind::AlreadyExists
    {
        create_failed(io, request, err);
    }
    match result {
        Ok(started) => Ok((Done::started(started), None)),
        // Another operation runs on the node: the plan (and its short requeue) stands.
        Err(err) if plan::node_busy(&plan.action, &err) => {
            tracing::debug!(error = %err, "TPU node busy with another operation; retrying");
            Ok((Done::default(), None))
        }
        Err(err) => match plan::on_action_error(&plan.action, &err) {
            Some(refused) => Ok((Done::instead(refused), Some(err))),
            None => Err(ReconcileError::gcp(action_name(&plan.action))(err)),
        },
    }
}

/// Counts a failed create (its call, or its operation) by reason, under the API the slice's
/// backend calls (a Compute Engine operation is read in the TPU API's model).
fn create_failed(io: &Io<'_>, request: &Request<'_>, err: &GcpError) {
    let service = match request.names.provisioner {
        tpu_operator_api::tpu_slice::Provisioner::ComputeEngine => "compute",
        tpu_operator_api::tpu_slice::Provisioner::TpuApi => "tpu",
    };
    let metrics = io.kept.metrics;
    metrics.capacity.create_failed_at("TpuSlice", service, err);
}

pub(super) fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Nothing
        | Action::RecordPreemption
        | Action::RecordSliceLoss(_)
        | Action::RecordSuspension
        | Action::ReturnToGranted => "observe TPU slice",
        Action::CreateWorkload => "create the Kueue Workload",
        Action::ReleaseWorkload => "release the Kueue Workload's quota",
        Action::DeleteWorkload => "delete a Kueue Workload that is not the slice's",
        Action::ReleaseShared => "release what the slice's incarnations shared",
        Action::CreateNode => "create TPU node",
        Action::CreateQueuedResource => "create queued resource",
        Action::CreateSliceQueuedResource(_) => "create a multislice slice's queued resource",
        Action::DeleteNode(_) => "delete TPU node",
        Action::DeleteQueuedResource(_) => "delete queued resource",
        Action::PatchNode(_) => "patch TPU node labels/metadata/tags",
        Action::StartNode => "start TPU node",
        Action::PatchSliceNode { .. } => "patch multislice TPU node labels/metadata/tags",
        Action::RequestCheckpoint { .. } => "ask the workload for a checkpoint (TPU node metadata)",
        Action::PerformMaintenance { .. } => "start the slice's maintenance early (performMaintenance)",
    }
}
