//! The deletion pass (policy `Delete`) and what an allowed `Orphan` leaves counted: delete the
//! slice's cloud objects, wait until they are gone, then release what the incarnations shared.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
};
use tpu_operator_gcp::{
    ErrorKind,
    tpu_v2::model::{NetworkEndpoint, Node, node},
    wkt,
};

use super::{
    Target, act, backend,
    observe::{self, Observed},
    plan::{self, Action as Step, CleanupStep, Details, Outcome, Plan, Verdict},
    status,
};
use crate::{
    governance::{
        pricing::PriceTable,
        tenancy::{self, usage::Holding},
    },
    reconcile::{
        handles::Io,
        kind::Cleaned,
        report::Transition,
        wait::{Unwatch, Wait, Watch},
    },
    runtime::{
        config::ControllerConfig,
        error::{ReconcileError, Result},
    },
};

/// An allowed `Orphan` deletion leaves the slice's node (or queued resource) running: it keeps
/// counting against the namespace's quota and budget from now until a sweep no longer finds it
/// ([`tenancy::orphans`]). Only the TPU API's: the sweeper counts TPU nodes and queued resources
/// (Compute Engine orphans are reported by the sweeper, not counted).
pub(super) fn orphaned(slice: &TpuSlice, prices: &PriceTable, t: &Target) -> Option<Holding> {
    let holds = slice.status.as_ref().is_some_and(super::holding::holds_capacity);
    let counted = t.names.backend().counts_orphans();
    let spec = t.spec(&slice.spec);
    let shape = spec.total_shape().filter(|_| holds && counted)?;
    let (per_hour_usd, _) = prices.slice_per_hour(&shape, spec.price_kind());
    let current = &t.names.current;
    Some(Holding {
        uid: current.queued.clone().unwrap_or_else(|| current.node.clone()),
        what: format!("orphaned node of deleted TpuSlice {}", t.identity.name),
        chips: shape.chips,
        per_hour_usd,
    })
}

/// One deletion pass (policy `Delete`).
pub(super) async fn clean(slice: &TpuSlice, io: &Io<'_>, t: &Target) -> Result<Cleaned<TpuSliceStatus>> {
    let old = slice.status.clone().unwrap_or_default();
    let refused = match delete_known_node(slice, io, t, &old).await? {
        KnownDelete::Started(cleaned) => return Ok(*cleaned),
        KnownDelete::NotTried => None,
        KnownDelete::Refused(err) => Some(err),
    };
    let mut observed = observe::observe(io, &t.names, None, None).await?;
    let events: Vec<Transition> = leave_unadopted_node(io, t, &mut observed).into_iter().collect();
    let (action, verdict) = match next_step(slice, io, t, &observed).await? {
        CleanupStep::Done => return Ok(finished(t, &old, events)),
        CleanupStep::Wait(message) => (Step::Nothing, deleting(message)),
        CleanupStep::Delete(action) => (action, deleting("deleting the cloud resources")),
    };
    let plan = Plan::new(action, verdict, Details::default());
    let (done, failed) = send_delete(io, t, &old, &plan, refused).await?;
    let now = io.clock.now();
    Ok(Cleaned::Pending {
        status: Some(status::of_pass(slice, t, &old, &observed, &plan, &done, now)),
        wait: watch_deletion(io.settings.config, slice, &observed, &plan.action),
        failed,
        events,
    })
}

/// A node named by `spec.adoptNodeId` that this slice never took over (adoption refused, or
/// another owner's) is not the slice's to delete: it is dropped from `observed`, and the Event
/// that says so is returned.
fn leave_unadopted_node(io: &Io<'_>, t: &Target, observed: &mut Observed) -> Option<Transition> {
    let node = observed.node.as_ref()?;
    let cluster = &io.settings.config.cluster_id;
    let ours = tenancy::adoption::ownership(
        &node.name,
        &node.labels,
        &t.identity,
        cluster,
        super::policy::KIND,
    ) == Ok(tenancy::adoption::Ownership::Ours);
    if !t.names.adopted || ours {
        return None;
    }
    let note = format!(
        "node {} was never adopted by this TpuSlice: left in place",
        node.name
    );
    observed.node = None;
    Some(Transition::normal("Deleted", note))
}

/// What deletion does next. Once every incarnation is gone, what they shared (a Compute Engine
/// group's template and policy) is released last; `Done` only when that is gone too.
async fn next_step(slice: &TpuSlice, io: &Io<'_>, t: &Target, observed: &Observed) -> Result<CleanupStep> {
    let step = plan::plan_cleanup(observed);
    if step != CleanupStep::Done {
        return Ok(step);
    }
    let releasing = backend::Releasing {
        spec: t.spec(&slice.spec),
        project: &t.names.project,
        identity: &t.identity,
    };
    Ok(match t.names.backend().release(io.gcp, &releasing).await? {
        Some(wait) => CleanupStep::Wait(wait),
        None => CleanupStep::Done,
    })
}

/// Nothing is left in the cloud: say what went (when status named something) and let the
/// finalizer go.
fn finished(t: &Target, old: &TpuSliceStatus, mut events: Vec<Transition>) -> Cleaned<TpuSliceStatus> {
    if let Some(what) = old.queued_resource_name.as_ref().or(old.node_name.as_ref()) {
        let note = format!("{what} is gone; removing the finalizer");
        events.push(Transition::normal("Deleted", note));
    }
    Cleaned::Done {
        unwatch: Some(Unwatch::of::<Node>(&t.names.current.node)),
        events,
    }
}

/// Sends the plan's delete. The delete this pass already sent by name was refused: its answer
/// stands for the same delete, instead of asking again at once (a refused delete is retried with
/// backoff). A refused permission stalls the slice (reported instead of the plan's verdict) and
/// comes back as the failure; any other error is returned.
async fn send_delete(
    io: &Io<'_>,
    t: &Target,
    old: &TpuSliceStatus,
    plan: &Plan,
    refused: Option<tpu_operator_gcp::GcpError>,
) -> Result<(act::Done, Option<ReconcileError>)> {
    let request = t.request(old, None);
    let result = match refused {
        Some(err) if plan.action == Step::DeleteNode(t.names.current.node.clone()) => Err(err),
        _ => act::act(io, &plan.action, &request).await,
    };
    let err = match result {
        Ok(started) => return Ok((act::Done::started(started), None)),
        Err(err) => err,
    };
    let failed = ReconcileError::gcp(act::action_name(&plan.action));
    let Some(reason) = crate::runtime::refused::reason(&err) else {
        return Err(failed(err));
    };
    let stalled = Verdict::new(
        TpuSlicePhase::Deleting,
        Progress::Stalled,
        reason,
        format!("cannot delete: {err}; retrying with backoff"),
    );
    let done = act::Done {
        started: None,
        instead: Some(Outcome::from(stalled)),
    };
    Ok((done, Some(failed(err))))
}

/// The verdict while the slice's cloud objects are being deleted.
fn deleting(message: impl Into<String>) -> Verdict {
    Verdict::new(
        TpuSlicePhase::Deleting,
        Progress::Reconciling,
        reasons::DELETING,
        message,
    )
}

/// The first deletion pass of a slice whose status shows one READY node and nothing else (no
/// queued resource, no earlier incarnation, no operation in flight, not adopted): the node is
/// deleted by name without reading it first, since the read would only repeat what status says.
/// Its end is then seen through the cloud watch and one read, so a deletion costs the two calls
/// it must. Anything else, a NOT_FOUND, or a refused delete takes the full path
/// (read, plan, act), which reports errors.
async fn delete_known_node(
    slice: &TpuSlice,
    io: &Io<'_>,
    t: &Target,
    old: &TpuSliceStatus,
) -> Result<KnownDelete> {
    let names = &t.names;
    let plain = !names.adopted
        && names.backend().deletes_known_node()
        && names.current.queued.is_none()
        && names.previous.is_none()
        && old.pending_operation.is_none()
        && old.phase != TpuSlicePhase::Deleting
        && old.node_state.as_deref() == Some("READY")
        && old.node_name.as_deref() == Some(names.current.node.as_str());
    if !plain {
        return Ok(KnownDelete::NotTried);
    }
    let action = Step::DeleteNode(names.current.node.clone());
    let request = t.request(old, None);
    let started = match act::act(io, &action, &request).await {
        Ok(Some(started)) => started,
        Ok(None) => return Ok(KnownDelete::NotTried),
        Err(err) if err.kind == ErrorKind::NotFound => return Ok(KnownDelete::NotTried),
        Err(err) => return Ok(KnownDelete::Refused(err)),
    };
    let plan = Plan::new(
        action.clone(),
        deleting("deleting the cloud resources"),
        Details::default(),
    );
    // What the status last showed of the node (it was READY, and billing, until this delete):
    // the same status the full path writes from the read it would have made.
    let observed = Observed {
        node: Some(last_seen_node(old)),
        ..Observed::default()
    };
    let now = io.clock.now();
    Ok(KnownDelete::Started(Box::new(Cleaned::Pending {
        status: Some(status::of_pass(
            slice,
            t,
            old,
            &observed,
            &plan,
            &act::Done::started(Some(started)),
            now,
        )),
        wait: watch_deletion(io.settings.config, slice, &observed, &action),
        failed: None,
        events: Vec::new(),
    })))
}

/// What [`delete_known_node`] did.
enum KnownDelete {
    /// The delete started: report it and wait.
    Started(Box<Cleaned<TpuSliceStatus>>),
    /// Not a plain READY node, or it is gone already: the full path decides.
    NotTried,
    /// The delete was refused: the full path reads the node and reports this answer.
    Refused(tpu_operator_gcp::GcpError),
}

/// The node as `status` last described it (name, state, health, addresses, creation time).
fn last_seen_node(status: &TpuSliceStatus) -> Node {
    let endpoints = status
        .worker_ips
        .iter()
        .map(|ip| NetworkEndpoint::new().set_ip_address(ip.clone()));
    let mut n = Node::new()
        .set_name(status.node_name.clone().unwrap_or_default())
        .set_state(node::State::from(
            status.node_state.as_deref().unwrap_or_default(),
        ))
        .set_network_endpoints(endpoints);
    if let Some(health) = &status.health {
        n = n.set_health(node::Health::from(health.as_str()));
    }
    if let Some(created) = &status.create_time {
        n = n.set_create_time(wkt::Timestamp::clamp(created.0.as_second(), 0));
    }
    n
}

/// When to look again at a slice whose node is being deleted: the cloud watch wakes it when the
/// node leaves DELETING or drops out of the listing (the woken pass confirms the absence with a
/// get), so instead of a read every `poll_active` a deletion costs one read at the end. Queued
/// resources are not listed by the watch and are polled at `poll_active`.
fn watch_deletion(config: &ControllerConfig, slice: &TpuSlice, observed: &Observed, action: &Step) -> Wait {
    use tpu_operator_gcp::tpu_v2::model::node::State;
    let queued = observed.queued.is_some() || observed.previous_queued.is_some();
    let node = match action {
        Step::DeleteNode(name) => Some(name.as_str()),
        Step::Nothing => [&observed.node, &observed.previous_node]
            .into_iter()
            .flatten()
            .find(|n| n.state == State::Deleting)
            .map(|n| n.name.as_str()),
        _ => None,
    };
    let watchable = backend::of(slice.spec.provisioner).watchable();
    match node.filter(|_| !queued && watchable) {
        Some(name) => Wait::watch(Watch::state::<Node>(name, &State::Deleting)),
        None => Wait::after(config.poll_active),
    }
}
