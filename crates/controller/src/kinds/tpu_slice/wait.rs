//! When to look again at a slice that is not being deleted: watched by the cloud watch while its
//! node changes state on its own, polled otherwise.

use std::time::Duration;

use tpu_operator_api::tpu_slice::{Provisioner, TpuSlice, TpuSliceStatus};
use tpu_operator_gcp::tpu_v2::model::Node;

use super::{
    act, compute, ladder,
    observe::{Names, Observed},
    plan::{Action as Step, Requeue},
};
use crate::{
    reconcile::{
        kind::Pass,
        wait::{Unwatch, Wait, Watch},
    },
    runtime::{cloud_watch::Collection, config::ControllerConfig},
};

/// When to look again after a pass: as where the slice stands says ([`wait_here`]), and with a
/// capacity plan no later than the pass that moves it on. A move itself is followed at once by
/// the pass that deletes what the rung left or asks the next place: moves are rare, and each
/// waited out a rung.
pub(super) fn after_pass(config: &ControllerConfig, pass: &Pass<'_, TpuSlice>, new: &TpuSliceStatus) -> Wait {
    let mut wait = wait_here(config, pass);
    // Woken when a checkpoint before an announced maintenance is due (the timer's time, as
    // below).
    if let Some(at) = super::maintenance::next_request(&pass.obj.spec, pass.observed) {
        let left = (at - pass.observed.now).to_std().unwrap_or_default();
        wait = wait.at_most(config.timer_wait(left + Duration::from_secs(1)));
    }
    // A checkpoint awaited before starting a maintenance early is looked for every
    // `poll_active`: each second waited is a second trained again after the maintenance.
    if super::early_start::awaited(&pass.obj.spec, new).is_some() {
        wait = wait.at_most(config.poll_active);
    }
    let Some(plan) = &new.capacity_plan else {
        return wait;
    };
    if new.plan_moves() > pass.old.plan_moves() {
        return wait.at_most(Duration::ZERO);
    }
    match ladder::deadline(&pass.obj.spec, plan) {
        // The deadline is in the cloud's time; the timer's, under `local`, runs slower.
        Some(at) => {
            let left = (at - pass.observed.now).to_std().unwrap_or_default();
            wait.at_most(config.timer_wait(left + Duration::from_secs(1)))
        }
        None => wait,
    }
}

/// When the slice is looked at again for what this pass saw where it stands.
fn wait_here(config: &ControllerConfig, pass: &Pass<'_, TpuSlice>) -> Wait {
    let node = &pass.target.names.current.node;
    let verdict = pass.done.verdict(pass.plan);
    match verdict.requeue {
        Requeue::Active => watch_node(
            config,
            &pass.target.names,
            pass.observed,
            (&pass.plan.action, pass.done.started.as_ref()),
            unwatch(pass),
        ),
        // A running multislice of one queued resource per slice is read at the capacity
        // interval (two gets per slice): the cloud watch follows one node per object, and a lost
        // slice must be replaced, and the others stopped, in seconds rather than minutes.
        Requeue::Stable
            if pass.target.names.current.per_slice_queues()
                && verdict.progress() == Some(tpu_operator_api::conditions::Progress::Ready) =>
        {
            Wait::poll_unwatching::<Node>(Requeue::Capacity.after(config), Some(node))
        }
        Requeue::Stable if let Some(watch) = ready_watch(pass) => Wait::Watch {
            watch,
            cap: None,
            unlisted: Some(Requeue::Stable.after(config)),
        },
        other => Wait::Poll {
            after: other.after(config),
            unwatch: Some(unwatch(pass)),
        },
    }
}

/// When to look again at a slice whose node is changing state: the cloud watch wakes it when
/// the node's state changes, so it only polls at the backstop interval. Only a plain node in a
/// transitional state (or just created) is watched; anything else (a queued resource, a patch
/// or start operation, the previous incarnation's deletion) is polled at `poll_active`.
fn watch_node(
    config: &ControllerConfig,
    names: &Names,
    observed: &Observed,
    (action, started): (&Step, Option<&act::Started>),
    unwatch: Unwatch,
) -> Wait {
    use tpu_operator_gcp::tpu_v2::model::node::State;
    let seen = match (action, started, &observed.node) {
        // A backend the cloud watch cannot list (Compute Engine) is read by name at `poll_active`.
        _ if names.current.queued.is_some() || !names.backend().watchable() => None,
        (Step::CreateNode, Some(_), _) => Some(State::Creating),
        (Step::Nothing, _, Some(node)) if transitional(&node.state) => Some(node.state.clone()),
        _ => None,
    };
    match seen {
        Some(state) => Wait::watch(Watch::state::<Node>(&names.current.node, &state)),
        None => Wait::Poll {
            after: config.poll_active,
            unwatch: Some(unwatch),
        },
    }
}

/// What a listing compares of a settled slice's READY node, when a listing covers it: a
/// preemption, a repair, a health change or a maintenance notice must reach status in seconds,
/// not at the next stable poll. Any node may get a maintenance notice, so every READY node is
/// watched, not only those Google may reclaim; one listing per zone covers every such slice
/// there (`nodes.list`, or for Compute Engine this cluster's instances).
fn ready_watch(pass: &Pass<'_, TpuSlice>) -> Option<Watch> {
    use tpu_operator_gcp::tpu_v2::model::node::State;
    let names = &pass.target.names;
    let node = pass.observed.node.as_ref()?;
    if node.state != State::Ready || node.name != names.current.node {
        return None;
    }
    match names.provisioner {
        Provisioner::TpuApi => names.current.queued.is_none().then(|| Watch::node(node)),
        Provisioner::ComputeEngine => Watch::compute_slice(node, compute::uses_group(&pass.obj.spec)),
    }
}

/// What a slice that polls no longer waits on: whatever [`ready_watch`] or [`watch_node`]
/// registered for its current node.
fn unwatch(pass: &Pass<'_, TpuSlice>) -> Unwatch {
    let node = &pass.target.names.current.node;
    let compute = (pass.target.names.provisioner == Provisioner::ComputeEngine).then(|| {
        let group = compute::uses_group(&pass.obj.spec);
        tpu_operator_gcp::compute::convert::watch_name(node, group)
    });
    match compute.flatten() {
        Some(name) => Unwatch {
            collection: Collection::ComputeSlices,
            name,
        },
        None => Unwatch::of::<Node>(node),
    }
}

/// Node states that end on their own (the service moves the node on without being asked).
fn transitional(state: &tpu_operator_gcp::tpu_v2::model::node::State) -> bool {
    use tpu_operator_gcp::tpu_v2::model::node::State;
    matches!(
        state,
        State::Creating
            | State::Deleting
            | State::Starting
            | State::Stopping
            | State::Restarting
            | State::Repairing
            | State::Reimaging
            | State::Hiding
            | State::Unhiding
    )
}
