//! A slice's deletion passes (policy `Delete`), through the apply hooks: observe what is left,
//! plan the next delete ([`plan::plan_deletion`]), send it, wait until it is gone, then release
//! what the incarnations shared. And what an allowed `Orphan` leaves counted.

use std::time::Duration;

use tpu_operator_api::{
    conditions::Progress,
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
};
use tpu_operator_gcp::{
    GcpError,
    tpu_v2::model::{NetworkEndpoint, Node, node},
    wkt,
};

use super::{
    Target,
    act::{self, Done},
    backend,
    observe::{self, Observed},
    plan::{self, Action as Step, Outcome, Plan, Verdict},
};
use crate::{
    governance::{
        pricing::PriceTable,
        tenancy::{self, usage::Holding},
    },
    reconcile::{
        handles::Io,
        kind::{Acted, Pass},
        report::Transition,
        wait::{Wait, Watch},
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

/// What is left of the slice in the cloud. The first deletion pass of a slice whose status shows
/// one READY node and nothing else (no queued resource, no earlier incarnation, no operation in
/// flight, not adopted) reads nothing: the read would only repeat what status says, so the node
/// is deleted by name, and a deletion costs the two calls it must (the delete, and one read once
/// the cloud watch sees the node go). A delete refused, or answered NOT_FOUND, ends its pass with
/// status `Deleting`, so the passes after it read ([`plan::plan_deletion`] on what they read).
pub(super) async fn observe(slice: &TpuSlice, io: &Io<'_>, t: &Target) -> Result<Observed> {
    let old = slice.status.as_ref();
    if let Some(old) = old.filter(|old| known_ready_node(t, old)) {
        return Ok(Observed {
            node: Some(last_seen_node(old)),
            last_seen: true,
            now: io.clock.now(),
            ..Observed::default()
        });
    }
    let mut observed = observe::observe(io, &t.names, None, None).await?;
    observed.left_in_place = leave_unadopted_node(io, t, &mut observed);
    Ok(observed)
}

/// The slice's status shows one plain READY node of the current incarnation and nothing else,
/// and deletion has not started: [`observe`] need not read it.
fn known_ready_node(t: &Target, old: &TpuSliceStatus) -> bool {
    let names = &t.names;
    !names.adopted
        && names.backend().deletes_known_node()
        && names.current.queued.is_none()
        && names.previous.is_none()
        && old.pending_operation.is_none()
        && old.phase != TpuSlicePhase::Deleting
        && old.node_state.as_deref() == Some("READY")
        && old.node_name.as_deref() == Some(names.current.node.as_str())
}

/// A node named by `spec.adoptNodeId` that this slice never took over (adoption refused, or
/// another owner's) is not the slice's to delete: it is dropped from `observed`, and what the
/// Event says is returned.
fn leave_unadopted_node(io: &Io<'_>, t: &Target, observed: &mut Observed) -> Option<String> {
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
    Some(note)
}

/// Carries out a deletion pass's plan: the delete it planned, or the release of what the
/// incarnations shared. A delete refused for a permission stalls the slice (reported instead of
/// the plan's verdict) and comes back as the failure; any other answer to a delete of a node not
/// read this pass is read by the next ([`unread`]); any other error is returned.
pub(super) async fn act(
    slice: &TpuSlice,
    io: &Io<'_>,
    t: &Target,
    observed: &Observed,
    plan: &Plan,
) -> Result<Acted<Done>> {
    let old = slice.status.clone().unwrap_or_default();
    let mut events: Vec<Transition> = observed
        .left_in_place
        .iter()
        .map(|note| Transition::normal("Deleted", note.clone()))
        .collect();
    if plan.action == Step::ReleaseShared {
        let done = release(slice, io, t).await?;
        if done.instead.is_none() {
            events.extend(gone(&old));
        }
        return Ok(Acted {
            done,
            events,
            failed: None,
        });
    }
    let request = t.request(&old, None);
    let (done, failed) = match act::act(io, &plan.action, &request).await {
        Ok(Some(started)) => (Done::started(Some(started)), None),
        // The node was deleted by name without a read: NOT_FOUND is not taken as gone.
        Ok(None) if observed.last_seen => (unread(t, "not found"), None),
        Ok(None) => (Done::default(), None),
        Err(err) => match refusal(&err) {
            Some(stalled) => (
                stalled,
                Some(ReconcileError::gcp(act::action_name(&plan.action))(err)),
            ),
            // Any other answer to a delete by name (its delete already under way, after a
            // crash before the status write; a transient error) is read at once by the next
            // pass: returning it would retry the same unread delete forever.
            None if observed.last_seen => (unread(t, &err.to_string()), None),
            None => return Err(ReconcileError::gcp(act::action_name(&plan.action))(err)),
        },
    };
    Ok(Acted { done, events, failed })
}

/// A delete by name of a node not read this pass was answered without an operation: status says
/// `Deleting`, so the next pass, at once, reads what the answer meant.
fn unread(t: &Target, answer: &str) -> Done {
    let name = &t.names.current.node;
    let reading = plan::deleting(format!("node {name} answered the delete: {answer}; reading it"));
    Done::instead(Outcome::from(reading))
}

/// What the incarnations shared (a Compute Engine group's template and policy), released once
/// every one of them is gone: nothing reported instead of the plan once nothing is left.
async fn release(slice: &TpuSlice, io: &Io<'_>, t: &Target) -> Result<Done> {
    let releasing = backend::Releasing {
        spec: t.spec(&slice.spec),
        project: &t.names.project,
        identity: &t.identity,
    };
    Ok(match t.names.backend().release(io.gcp, &releasing).await? {
        Some(wait) => Done::instead(Outcome::from(plan::deleting(wait))),
        None => Done::default(),
    })
}

/// Nothing is left in the cloud: what status named is gone (no Event when it named nothing).
fn gone(old: &TpuSliceStatus) -> Option<Transition> {
    let what = old.queued_resource_name.as_ref().or(old.node_name.as_ref())?;
    let note = format!("{what} is gone; removing the finalizer");
    Some(Transition::normal("Deleted", note))
}

/// A delete refused for good (a permission): `Stalled`, reported instead of the plan's verdict;
/// the error goes back for the slow retry.
fn refusal(err: &GcpError) -> Option<Done> {
    let reason = crate::runtime::refused::reason(err)?;
    let stalled = Verdict::new(
        TpuSlicePhase::Deleting,
        Progress::Stalled,
        reason,
        format!("cannot delete: {err}; retrying with backoff"),
    );
    Some(Done::instead(Outcome::from(stalled)))
}

/// Whether nothing of the slice's is left: every incarnation gone and what they shared released.
pub(super) fn released(plan: &Plan, done: &Done) -> bool {
    plan.action == Step::ReleaseShared && done.instead.is_none()
}

/// When a deletion pass looks again. Once released, what the slice watched is dropped; a node
/// found already gone is confirmed at once; otherwise [`watch_deletion`].
pub(super) fn wait(config: &ControllerConfig, pass: &Pass<'_, TpuSlice>) -> Wait {
    let node = &pass.target.names.current.node;
    if released(pass.plan, pass.done) {
        return Wait::poll_unwatching::<Node>(Duration::ZERO, Some(node));
    }
    if pass.observed.last_seen && pass.done.started.is_none() {
        return Wait::after(Duration::ZERO);
    }
    watch_deletion(config, pass.obj, pass.observed, &pass.plan.action)
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
    let queued = observed.queued.is_some() || observed.previous_queued.is_some();
    let node = match action {
        Step::DeleteNode(name) => Some(name.as_str()),
        Step::Nothing => [&observed.node, &observed.previous_node]
            .into_iter()
            .flatten()
            .find(|n| n.state == node::State::Deleting)
            .map(|n| n.name.as_str()),
        _ => None,
    };
    let watchable = backend::of(slice.spec.provisioner).watchable();
    match node.filter(|_| !queued && watchable) {
        Some(name) => Wait::watch(Watch::state::<Node>(name, &node::State::Deleting)),
        None => Wait::after(config.poll_active),
    }
}
