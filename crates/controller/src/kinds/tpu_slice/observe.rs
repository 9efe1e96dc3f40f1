//! Reads the slice's cloud objects by their deterministic names (never by what status remembers,
//! so a create whose result was never written to status is still found) and the pending operation.

use chrono::{DateTime, Utc};
use tpu_operator_api::tpu_slice::{DONE_URI_METADATA, TpuSliceSpec};
use tpu_operator_gcp::{
    GcpError, OperationState, Service, ignore_not_found,
    longrunning::model::Operation,
    operation_state, parse_gs_uri,
    tpu_v2::model::{Node, QueuedResource, node, queued_resource_state},
};

pub use super::names::{Incarnation, Names};
use super::spec::Desired;
use crate::{reconcile::handles::Io, runtime::error::ReconcileError};

/// What exists in the cloud right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub node: Option<Node>,
    pub queued: Option<QueuedResource>,
    /// Multislice, one queued resource per slice: those of slices 1..N-1 (as
    /// [`Incarnation::other_queues`]); `None` where one does not exist.
    pub other_queues: Vec<Option<QueuedResource>>,
    /// Multislice: the queued resources slices being replaced were lost in (as
    /// [`Incarnation::replaced`]), by slice; `None` where one is gone.
    pub replaced: Vec<(usize, Option<QueuedResource>)>,
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
    /// The checkpoint committed since the request before a maintenance the slice may start
    /// early ([`super::early_start::observe`]): its step directory.
    pub committed_checkpoint: Option<String>,
    /// The slice's Kueue Workload, when Kueue gates it (read from Kubernetes).
    pub queue: Option<super::queue::Queued>,
    /// When the pass read the cloud (the operator's clock): what its waits count from.
    pub now: DateTime<Utc>,
    /// Deletion: `node` is the plain READY node status last showed, not read this pass (see
    /// [`super::cleanup::observe`]).
    pub last_seen: bool,
    /// Deletion: the node `spec.adoptNodeId` names, which this slice never took over, left in
    /// place (and dropped from `node`): the Event that says so.
    pub left_in_place: Option<String>,
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
    io: &Io<'_>,
    names: &Names,
    pending_operation: Option<&str>,
    desired: Option<&Desired>,
) -> Result<Observed, ReconcileError> {
    let mut observed = Observed {
        now: io.clock.now(),
        ..Observed::default()
    };
    if let Some(qr) = &names.current.queued {
        observed.queued = read_queued(io, names, qr).await?;
    }
    for qr in &names.current.other_queues {
        observed.other_queues.push(read_queued(io, names, qr).await?);
    }
    for (k, qr) in &names.current.replaced {
        observed.replaced.push((*k, read_queued(io, names, qr).await?));
    }
    if reads_current_node(names, &observed, desired) {
        read_first_node(io, names, &mut observed).await?;
    }
    read_other_nodes(io, names, &mut observed).await?;
    let current_absent = observed.node.is_none()
        && observed.queued.is_none()
        && observed.other_queues.iter().all(Option::is_none);
    if let Some(prev) = names.previous.as_ref().filter(|_| current_absent) {
        read_previous(io, names, prev, &mut observed).await?;
    }
    observed.operation =
        read_operation(io, names, pending_operation, desired, observed.node.as_ref()).await?;
    Ok(observed)
}

/// The queued resource `qr` of the current incarnation, by name; `None` where it does not exist.
async fn read_queued(io: &Io<'_>, names: &Names, qr: &str) -> Result<Option<QueuedResource>, ReconcileError> {
    let found = names.backend().get_queued_resource(io.gcp, qr).await;
    Ok(read(found, "get queued resource")?.map(|q| named_queued(q, qr)))
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

/// The current node (slice 0's of a multislice).
async fn read_first_node(io: &Io<'_>, names: &Names, observed: &mut Observed) -> Result<(), ReconcileError> {
    let (cloud, gcp) = (names.backend(), io.gcp);
    // A node the cloud watch just listed in a new state needs no second read; absence is
    // only ever taken from a get.
    observed.node = match io.take_listed::<Node>(&names.current.node) {
        Some(node) => Some(node),
        None => read(cloud.get_node(gcp, &names.current.node).await, "get TPU node")?,
    }
    .map(|n| named_node(n, &names.current.node));
    Ok(())
}

/// Multislice: every other slice's node (one get each). With one queued resource per slice, a
/// slice's node is read when its own queued resource may have it; with one for all, whenever
/// slice 0's node was read.
async fn read_other_nodes(io: &Io<'_>, names: &Names, observed: &mut Observed) -> Result<(), ReconcileError> {
    let (cloud, gcp) = (names.backend(), io.gcp);
    let per_slice = names.current.per_slice_queues();
    if !per_slice && observed.node.is_none() {
        return Ok(());
    }
    for (k, name) in names.current.other_slices.iter().enumerate() {
        let may_have = !per_slice || observed.other_queues[k].as_ref().is_some_and(has_nodes);
        let found = match may_have {
            true => read(cloud.get_node(gcp, name).await, "get TPU node")?,
            false => None,
        };
        observed.other_slices.push(found.map(|n| named_node(n, name)));
    }
    Ok(())
}

/// The previous incarnation (`prev`), read while the current one does not exist: its queued
/// resource if it had one, else its node.
async fn read_previous(
    io: &Io<'_>,
    names: &Names,
    prev: &Incarnation,
    observed: &mut Observed,
) -> Result<(), ReconcileError> {
    let (cloud, gcp) = (names.backend(), io.gcp);
    // One queued resource per slice: the first still there stands for all (each is deleted,
    // and read gone, before the next incarnation is asked for).
    let lost = prev.replaced.iter().map(|(_, qr)| qr);
    for qr in prev.queued.iter().chain(&prev.other_queues).chain(lost) {
        observed.previous_queued = read(
            cloud.get_queued_resource(gcp, qr).await,
            "get previous queued resource",
        )?;
        if observed.previous_queued.is_some() {
            break;
        }
    }
    if observed.previous_queued.is_none() {
        observed.previous_node = read(cloud.get_node(gcp, &prev.node).await, "get previous TPU node")?;
    }
    Ok(())
}

/// The pending operation as plan needs it, read only when the node does not already answer for it.
async fn read_operation(
    io: &Io<'_>,
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
        match read(names.backend().get_operation(io.gcp, op).await, "get operation")? {
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
    io: &Io<'_>,
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
    let objects = match io
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
