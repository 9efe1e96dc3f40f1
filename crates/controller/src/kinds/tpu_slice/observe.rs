//! Reads the slice's cloud objects by their deterministic names (never by what status remembers,
//! so a create whose result was never written to status is still found) and the pending operation.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    naming::{self, ObjectIdentity},
    tpu_slice::{Provisioner, TpuSlice, TpuSliceSpec},
};
use tpu_operator_gcp::{
    GcpError, OperationState, Service, ignore_not_found,
    longrunning::model::Operation,
    operation_state, parse_gs_uri,
    tpu_v2::model::{Node, QueuedResource, node, queued_resource_state},
};

use super::{
    backend::{self, SliceBackend},
    spec::Desired,
};
use crate::{reconcile::context::Context, runtime::error::ReconcileError};
use tpu_operator_api::tpu_slice::DONE_URI_METADATA;

/// Full resource names of one incarnation (recreation) of the slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    /// `projects/<p>/locations/<zone>/nodes/<id>`.
    pub node: String,
    /// The queued resource, for `capacity.queued` and `capacity.reserved`.
    pub queued: Option<String>,
    /// The node / queued resource id (for a multislice, the node id prefix).
    pub id: String,
    /// Multislice: the nodes of slices 1..N-1 (`node` is slice 0's, `<id>-0`); empty otherwise.
    pub other_slices: Vec<String>,
}

/// `projects/<p>/locations/<zone>` of the spec's zone.
fn parent_of(project: &str, spec: &TpuSliceSpec) -> String {
    format!("projects/{project}/locations/{}", spec.zone)
}

impl Incarnation {
    /// Incarnation `n` of the slice, asking where `spec` says (its zone and kind of capacity).
    fn new(identity: &ObjectIdentity, project: &str, spec: &TpuSliceSpec, n: u32) -> Self {
        let parent = parent_of(project, spec);
        let slices = spec.slice_count();
        let id = naming::tpu_node_id(identity, n);
        // A multislice queued resource names its nodes `<prefix>-<k>` (see
        // `spec::queued_resource`); the prefix is the id a plain slice's node would have.
        let node = match slices {
            Some(_) => format!("{parent}/nodes/{id}-0"),
            None => format!("{parent}/nodes/{id}"),
        };
        Incarnation {
            other_slices: (1..slices.unwrap_or(1))
                .map(|k| format!("{parent}/nodes/{id}-{k}"))
                .collect(),
            node,
            queued: spec.uses_queued_resource().then(|| {
                format!(
                    "{parent}/queuedResources/{}",
                    naming::queued_resource_id(identity, n)
                )
            }),
            id,
        }
    }
}

/// Where the slice's cloud objects live and what they are called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub project: String,
    /// `projects/<p>/locations/<zone>`.
    pub parent: String,
    /// The incarnation the slice should run now (`status.recreations`).
    pub current: Incarnation,
    /// The incarnation before the last preemption, which must be gone before `current` is created.
    pub previous: Option<Incarnation>,
    /// The node was adopted by `spec.adoptNodeId` (never created, never recreated).
    pub adopted: bool,
    /// Which API holds the slice's cloud objects.
    pub provisioner: Provisioner,
}

impl Names {
    /// Where the current incarnation is created.
    pub fn create_at(&self) -> super::spec::CreateAt<'_> {
        super::spec::CreateAt {
            project: &self.project,
            parent: &self.parent,
            id: &self.current.id,
            queued_id: self.current.queued.as_deref().and_then(|n| n.rsplit('/').next()),
        }
    }

    /// `spec`: the slice's spec as this pass runs it (at its capacity plan's place); `before`:
    /// where the previous incarnation asked (another zone or kind after a move on the plan).
    pub fn new(
        slice: &TpuSlice,
        spec: &TpuSliceSpec,
        before: &TpuSliceSpec,
        identity: &ObjectIdentity,
        project: String,
    ) -> Self {
        let parent = parent_of(&project, spec);
        let recreations = slice
            .status
            .as_ref()
            .map_or(0, tpu_operator_api::tpu_slice::TpuSliceStatus::incarnation);
        let incarnation = |n: u32, spec: &TpuSliceSpec| Incarnation::new(identity, &project, spec, n);
        let (current, previous, adopted) = match &spec.adopt_node_id {
            Some(id) => (
                Incarnation {
                    node: format!("{parent}/nodes/{id}"),
                    queued: None,
                    id: id.clone(),
                    other_slices: Vec::new(),
                },
                None,
                true,
            ),
            None => (
                incarnation(recreations, spec),
                recreations.checked_sub(1).map(|n| incarnation(n, before)),
                false,
            ),
        };
        Self {
            project,
            parent,
            current,
            previous,
            adopted,
            provisioner: spec.provisioner,
        }
    }

    /// The backend the slice's objects are created, read, deleted and polled through.
    pub fn backend(&self) -> &'static dyn SliceBackend {
        backend::of(self.provisioner)
    }
}

/// What exists in the cloud right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub node: Option<Node>,
    pub queued: Option<QueuedResource>,
    /// The previous incarnation's node / queued resource, read only while the current one does
    /// not exist yet (during a recreation, or while deleting).
    pub previous_node: Option<Node>,
    pub previous_queued: Option<QueuedResource>,
    /// Multislice: the nodes of slices 1..N-1 (as [`Incarnation::other_slices`]), read whenever
    /// slice 0's node is; `None` where a node does not exist.
    pub other_slices: Vec<Option<Node>>,
    /// The operation named by `status.pendingOperation`, if any.
    pub operation: Option<OperationView>,
    /// When the workload last finished, from its completion marker ([`workload_done`]).
    pub workload_done: Option<DateTime<Utc>>,
    /// The slice's Kueue Workload, when Kueue gates it (read from Kubernetes).
    pub queue: Option<super::queue::Queued>,
    /// When the pass read the cloud (the operator's clock): what its waits count from.
    pub now: DateTime<Utc>,
}

/// A pending operation as plan needs it.
#[derive(Clone, Debug, PartialEq)]
pub enum OperationView {
    Running,
    Succeeded,
    Failed(GcpError),
    /// The operation no longer exists (operations are garbage-collected after a while).
    Gone,
    /// Not read this pass (the node is CREATING / DELETING / STARTING / STOPPING); still pending.
    Unread,
}

/// Reads the current incarnation (and the previous one when the current does not exist).
/// Each read is a `get` by name: 1 call for a plain node, 2 for a queued slice.
/// `desired` (the apply path) lets a READY node that already is as desired stand for its pending
/// operation: whatever that was (create, start, patch), it has done its work, so it is not read.
pub async fn observe(
    ctx: &Context,
    names: &Names,
    pending_operation: Option<&str>,
    desired: Option<&Desired>,
) -> Result<Observed, ReconcileError> {
    let mut observed = Observed {
        now: ctx.clock.now(),
        ..Observed::default()
    };
    if let Some(qr) = &names.current.queued {
        let found = names.backend().get_queued_resource(&ctx.gcp, qr).await;
        observed.queued = read(found, "get queued resource")?.map(|q| named_queued(q, qr));
    }
    if reads_current_node(names, &observed, desired) {
        read_current_nodes(ctx, names, &mut observed).await?;
    }
    let current_absent = observed.node.is_none() && observed.queued.is_none();
    if let Some(prev) = names.previous.as_ref().filter(|_| current_absent) {
        read_previous(ctx, names, prev, &mut observed).await?;
    }
    observed.operation =
        read_operation(ctx, names, pending_operation, desired, observed.node.as_ref()).await?;
    Ok(observed)
}

/// Whether the current node is read: always for a plain node; for a queued slice once its queued
/// resource has (or may have) nodes.
fn reads_current_node(names: &Names, observed: &Observed, desired: Option<&Desired>) -> bool {
    // A node that can exist without its queued resource (a Compute Engine flex-start group
    // whose resize request was never inserted, `SliceBackend::node_without_queue`): deletion
    // (no `desired`) must see it, or it takes the slice for gone and waits forever to release
    // what the node still uses; the apply path creates the queued resource either way.
    let node_without_queue = desired.is_none()
        && names.backend().node_without_queue()
        && names.current.queued.is_some()
        && observed.queued.is_none();
    names.current.queued.is_none() || observed.queued.as_ref().is_some_and(has_nodes) || node_without_queue
}

/// The current node and, for a multislice, every other slice's node (one get each: all or
/// nothing, each decides).
async fn read_current_nodes(
    ctx: &Context,
    names: &Names,
    observed: &mut Observed,
) -> Result<(), ReconcileError> {
    let (cloud, gcp) = (names.backend(), &ctx.gcp);
    // A node the cloud watch just listed in a new state needs no second read; absence is
    // only ever taken from a get.
    observed.node = match ctx.cloud_watch.take::<Node>(&names.current.node) {
        Some(node) => Some(node),
        None => read(cloud.get_node(gcp, &names.current.node).await, "get TPU node")?,
    }
    .map(|n| named_node(n, &names.current.node));
    for name in &names.current.other_slices {
        let found = read(cloud.get_node(gcp, name).await, "get TPU node")?;
        observed.other_slices.push(found.map(|n| named_node(n, name)));
    }
    Ok(())
}

/// The previous incarnation (`prev`), read while the current one does not exist: its queued
/// resource if it had one, else its node.
async fn read_previous(
    ctx: &Context,
    names: &Names,
    prev: &Incarnation,
    observed: &mut Observed,
) -> Result<(), ReconcileError> {
    let (cloud, gcp) = (names.backend(), &ctx.gcp);
    if let Some(qr) = &prev.queued {
        observed.previous_queued = read(
            cloud.get_queued_resource(gcp, qr).await,
            "get previous queued resource",
        )?;
    }
    if observed.previous_queued.is_none() {
        observed.previous_node = read(cloud.get_node(gcp, &prev.node).await, "get previous TPU node")?;
    }
    Ok(())
}

/// The pending operation as plan needs it, read only when the node does not already answer for it.
async fn read_operation(
    ctx: &Context,
    names: &Names,
    pending_operation: Option<&str>,
    desired: Option<&Desired>,
    node: Option<&Node>,
) -> Result<Option<OperationView>, ReconcileError> {
    let Some(op) = pending_operation else {
        return Ok(None);
    };
    // While the node itself is changing state its state says more than the operation does, and
    // skipping the read halves the calls per poll during a create.
    let transitional = node.is_some_and(|n| {
        use tpu_operator_gcp::tpu_v2::model::node::State;
        matches!(
            n.state,
            State::Creating | State::Deleting | State::Starting | State::Stopping
        )
    });
    let done = node.is_some_and(|n| {
        n.state == node::State::Ready && desired.is_some_and(|d| super::spec::drift_mask(d, n).is_empty())
    });
    Ok(Some(if transitional {
        OperationView::Unread
    } else if done {
        OperationView::Succeeded
    } else {
        match read(names.backend().get_operation(&ctx.gcp, op).await, "get operation")? {
            None => OperationView::Gone,
            Some(op) => view(&op),
        }
    }))
}

/// A get by name answers for that name even when the body leaves `name` out (a damaged or
/// unexpected reply must not make status forget which node it tracks).
fn named_node(mut n: Node, asked: &str) -> Node {
    if n.name.is_empty() {
        n.name = asked.to_owned();
    }
    n
}

fn named_queued(mut q: QueuedResource, asked: &str) -> QueuedResource {
    if q.name.is_empty() {
        q.name = asked.to_owned();
    }
    q
}

/// Whether a queued resource has (or may have) nodes worth reading: every state except those
/// known to come before provisioning or after the nodes are gone. A state this client cannot
/// read (missing, unknown) may hide a running node, so it is read: one more call beats a status
/// that forgets a billing node.
fn has_nodes(qr: &QueuedResource) -> bool {
    use queued_resource_state::State;
    !matches!(
        qr.state.as_ref().map(|s| &s.state),
        Some(
            State::Creating | State::Accepted | State::WaitingForResources | State::Failed | State::Suspended
        )
    )
}

fn view(op: &Operation) -> OperationView {
    match operation_state(Service::Tpu, op) {
        OperationState::Pending => OperationView::Running,
        OperationState::Succeeded(()) => OperationView::Succeeded,
        OperationState::Failed(err) => OperationView::Failed(err),
    }
}

/// `None` for NOT_FOUND. A RESOURCE_EXHAUSTED answer to a read counts as a rate limit
/// ([`GcpError::is_rate_limited`]: reads take no capacity) and is retried with backoff.
fn read<T>(result: Result<T, GcpError>, action: &'static str) -> Result<Option<T>, ReconcileError> {
    ignore_not_found(result).map_err(|source| ReconcileError::Gcp { action, source })
}

/// When the slice's workload finished: the newest of `<done-uri>_SUCCESS` / `<done-uri>_FAILED`,
/// which the rendered startup script writes when the container exits (see
/// [`super::spec::workload_script`]). Read only where `spec.idleTimeout` can use it: the field
/// is set, the slice has a completion URI (node metadata `tpu-operator-done-uri`, from the
/// `tpu-operator.dev/done-uri` annotation) and the node is READY. One Cloud Storage listing.
pub async fn workload_done(
    ctx: &Context,
    namespace: &str,
    spec: &TpuSliceSpec,
    desired: &Desired,
    node: Option<&Node>,
) -> Result<Option<DateTime<Utc>>, ReconcileError> {
    if spec.idle_timeout.is_none() || !node.is_some_and(|n| n.state == node::State::Ready) {
        return Ok(None);
    }
    let Some(uri) = desired
        .metadata
        .get(DONE_URI_METADATA)
        .and_then(|u| parse_gs_uri(u))
    else {
        return Ok(None);
    };
    let markers = [format!("{}_SUCCESS", uri.path), format!("{}_FAILED", uri.path)];
    let objects = match ctx
        .storage_for(namespace)
        .list_objects(uri.bucket, &format!("{}_", uri.path), 10)
        .await
    {
        // The bucket may not exist until the workload writes to it.
        Err(e) if e.is_not_found() => return Ok(None),
        other => other.map_err(ReconcileError::gcp("list workload completion markers"))?,
    };
    Ok(objects
        .iter()
        .filter(|o| markers.contains(&o.name))
        .filter_map(|o| DateTime::parse_from_rfc3339(&o.updated).ok())
        .map(|t| t.with_timezone(&Utc))
        .max())
}
