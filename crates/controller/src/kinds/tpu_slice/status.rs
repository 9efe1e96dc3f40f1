//! Builds the slice's status from what was observed, planned and started, writes it by server-side
//! apply when it changed, and publishes Events on real transitions only.

use chrono::{DateTime, Utc};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::Resource;
use tpu_operator_api::{
    accelerator::SliceShape,
    conditions::{Progress, condition, reasons, remove_condition, set_condition, set_kstatus, types},
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
};
use tpu_operator_gcp::tpu_v2::model::node;

use super::{
    Target,
    act::{Done, Started},
    backend, ladder, maintenance,
    observe::{Names, Observed, OperationView},
    plan::{self, Action as Step, Outcome, Plan, health_name, state_name},
    queue, time_spent,
};
use crate::runtime::clock::k8s_time as time;

mod transitions;

pub use transitions::transitions;

/// The only writer of `TpuSlice.status`.
pub const FIELD_MANAGER: &str = "tpuslice.tpu-operator.dev/controller";

/// Inputs of one status computation.
pub struct Report<'a> {
    pub old: &'a TpuSliceStatus,
    pub generation: Option<i64>,
    pub names: &'a Names,
    pub observed: &'a Observed,
    /// What status says: the plan's verdict and details, or what the action reported instead.
    pub outcome: &'a Outcome,
    pub shape: Option<&'a SliceShape>,
    pub started: Option<&'a Started>,
    /// This reconcile counted a preemption.
    pub preempted: bool,
    /// This pass counts a suspension (its node is gone).
    pub suspended: bool,
    /// Estimated US dollars per hour while the node runs, and the price key.
    pub price: Option<(f64, String)>,
    pub now: DateTime<Utc>,
}

/// Multislice: each slice's node state by slice id (`-` for a node not there), once any node
/// was read; empty for a plain slice.
fn node_states(r: &Report<'_>) -> Vec<String> {
    if r.names.current.other_slices.is_empty() || r.observed.node.is_none() {
        return Vec::new();
    }
    std::iter::once(r.observed.node.as_ref())
        .chain(r.observed.other_slices.iter().map(Option::as_ref))
        .map(|n| n.map_or_else(|| "-".to_string(), state_name))
        .collect()
}

/// The new status. Pure: same inputs, same status (timestamps come from `now` and the cloud).
pub fn build(r: &Report<'_>) -> TpuSliceStatus {
    let mut s = fields(r);
    set_conditions(&mut s.conditions, r);
    s
}

/// Every field but the conditions (carried over from `old`, for [`set_conditions`]).
fn fields(r: &Report<'_>) -> TpuSliceStatus {
    let old = r.old;
    let node = r.observed.node.as_ref();
    let qr = r.observed.queued.as_ref();
    let slices = r.names.current.other_slices.len() as u32 + 1;
    let (node_name, queued_resource_name, pending_operation) = cloud_names(r);
    TpuSliceStatus {
        observed_generation: r.generation,
        phase: r.outcome.verdict.phase,
        conditions: old.conditions.clone(),
        node_id: node_name.as_deref().and_then(node_id),
        node_name,
        queued_resource_name,
        pending_operation,
        node_state: node.map(state_name),
        health: node
            .filter(|n| n.health != node::Health::Unspecified)
            .map(health_name),
        queued_resource_state: qr
            .and_then(|q| q.state.as_ref())
            .and_then(|st| st.state.name())
            .map(str::to_owned),
        accelerator_type: r.shape.map(SliceShape::accelerator_type),
        chips: r.shape.map(|sh| (sh.chips * slices) as i32),
        hosts: r.shape.map(|sh| (sh.hosts * slices) as i32),
        node_states: node_states(r),
        worker_ips: node
            .map(|n| n.network_endpoints.iter().map(|e| e.ip_address.clone()).collect())
            .unwrap_or_default(),
        create_time: node
            .and_then(|n| n.create_time.as_ref())
            .and_then(|t| Timestamp::from_second(t.seconds()).ok())
            .map(Time),
        ready_time: ready_time(r),
        last_preemption_time: if r.preempted {
            Some(time(r.now))
        } else {
            old.last_preemption_time.clone()
        },
        last_active_time: last_active_time(r),
        recreations: old.recreations + i32::from(r.preempted),
        suspensions: old.suspensions + i32::from(r.suspended),
        // Set by the pass from its Workload (`queue::status`); kept meanwhile.
        kueue: old.kueue.clone(),
        estimated_cost: estimated_cost(r),
        // Brought up to date by the caller (`time_spent::account`), which compares the whole.
        time_spent: old.time_spent.clone(),
        // Set by the caller, which knows the slice's backend, workload, plan and maintenance.
        links: old.links.clone(),
        maintenance: old.maintenance.clone(),
        maintenance_restarts: old.maintenance_restarts,
        slice_restarts: old.slice_restarts.clone(),
        replacing_slices: old.replacing_slices.clone(),
        zone: old.zone.clone(),
        capacity_plan: old.capacity_plan.clone(),
        message: message(r),
        // The status writer sends back what it read (`NewerFields`).
        newer_fields: Default::default(),
    }
}

/// The verdict's message; a verdict that leaves the conditions as they are keeps the old one.
fn message(r: &Report<'_>) -> Option<String> {
    match &r.outcome.verdict.kstatus {
        Some(said) => Some(said.message.clone()),
        None => r.old.message.clone(),
    }
}

/// When the current incarnation first became READY: kept once set, cleared by a preemption or a
/// suspension (the next incarnation counts its own, so `maxRunDuration` counts running time).
fn ready_time(r: &Report<'_>) -> Option<Time> {
    if r.preempted || r.outcome.verdict.phase == TpuSlicePhase::Suspended {
        None
    } else if r.outcome.verdict.progress() == Some(Progress::Ready) {
        r.old.ready_time.clone().or_else(|| Some(time(r.now)))
    } else {
        r.old.ready_time.clone()
    }
}

/// When the workload last finished: the newer of what status had and a marker seen this pass.
fn last_active_time(r: &Report<'_>) -> Option<Time> {
    match (&r.old.last_active_time, r.observed.workload_done) {
        (Some(old_t), Some(done)) if old_t.0.as_second() >= done.timestamp() => Some(old_t.clone()),
        (_, Some(done)) => Some(time(done)),
        (old_t, None) => old_t.clone(),
    }
}

/// The cost so far, accrued since the last write at the slice's price while its node bills.
fn estimated_cost(r: &Report<'_>) -> Option<tpu_operator_api::common::CostEstimate> {
    crate::governance::pricing::accrue(
        r.old.estimated_cost.as_ref(),
        if r.observed.node.as_ref().is_some_and(billing) {
            r.price.as_ref().map_or(0.0, |p| p.0)
        } else {
            0.0
        },
        r.price.as_ref().map(|p| p.1.as_str()),
        r.now,
    )
}

/// A node's id: the last segment of its full name (`projects/p/locations/z/nodes/ID`).
fn node_id(name: &str) -> Option<String> {
    name.rsplit('/')
        .next()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// The node, queued resource and pending operation names: as observed, as just created, or
/// (while an operation still runs) as status had them.
fn cloud_names(r: &Report<'_>) -> (Option<String>, Option<String>, Option<String>) {
    let old = r.old;
    let current = &r.names.current;
    let created = r.started.is_some_and(|s| s.verb == "create");
    let op_running = matches!(
        r.observed.operation,
        Some(OperationView::Running | OperationView::Unread)
    );
    let keep = |field: &Option<String>| if op_running { field.clone() } else { None };
    let node_name = r
        .observed
        .node
        .as_ref()
        .map(|n| n.name.clone())
        .or_else(|| (created && current.queued.is_none()).then(|| current.node.clone()))
        .or_else(|| keep(&old.node_name));
    let queued_resource_name = r
        .observed
        .queued
        .as_ref()
        .map(|q| q.name.clone())
        .or_else(|| created.then(|| current.queued.clone()).flatten())
        .or_else(|| keep(&old.queued_resource_name));
    let pending_operation = match r.started.filter(|s| s.tracked()) {
        Some(started) => Some(started.operation.clone()),
        None => keep(&old.pending_operation),
    };
    (node_name, queued_resource_name, pending_operation)
}

/// The kstatus conditions, `CapacityAvailable`, `NodeHealthy` and `SpecDrift`.
fn set_conditions(conditions: &mut Vec<Condition>, r: &Report<'_>) {
    let (said, details) = (r.outcome.verdict.kstatus.as_ref(), &r.outcome.details);
    let generation = r.generation;
    let now = time(r.now);
    if let Some(k) = said {
        set_kstatus(
            conditions,
            k.progress,
            k.reason,
            &k.message,
            generation,
            now.clone(),
        );
    }
    if let Some(available) = details.capacity {
        let reason = match said.map(|k| k.reason) {
            _ if available => reasons::PROVISIONING,
            Some(reasons::WAITING_FOR_CAPACITY) | None => reasons::STOCKOUT,
            Some(reason) => reason,
        };
        // The reason says why not; the message is the kstatus condition's, not repeated here
        // (`kubectl describe` would show it twice).
        let says = if available { "capacity granted" } else { "" };
        let c = condition(
            types::CAPACITY_AVAILABLE,
            available,
            reason,
            says,
            generation,
            now.clone(),
        );
        set_condition(conditions, c);
    }
    if let Some(n) = r.observed.node.as_ref() {
        let healthy = n.state == node::State::Ready && n.health == node::Health::Healthy;
        let (reason, msg) = if healthy {
            (reasons::NODE_READY, "node is READY and HEALTHY".to_string())
        } else {
            (
                reasons::NODE_UNHEALTHY,
                format!("node is {} (health {})", state_name(n), health_name(n)),
            )
        };
        set_condition(
            conditions,
            condition(types::NODE_HEALTHY, healthy, reason, msg, generation, now.clone()),
        );
    }
    match &details.drift {
        Some(msg) => {
            let c = condition(types::SPEC_DRIFT, true, reasons::DRIFTED, msg, generation, now);
            set_condition(conditions, c);
        }
        None => {
            remove_condition(conditions, types::SPEC_DRIFT);
        }
    }
}

/// Whether the node is billed (estimated from the time it exists until it is stopped, preempted
/// or being deleted: an upper bound, since Cloud TPU bills READY time).
fn billing(n: &tpu_operator_gcp::tpu_v2::model::Node) -> bool {
    !matches!(
        n.state,
        node::State::Stopped | node::State::Preempted | node::State::Terminated | node::State::Deleting
    )
}

/// `old` stalled for `reason`: `Pending` while the refusal is looked at again (`retry`),
/// `Failed` when it needs a spec or policy change; the rest as it was.
pub fn stalled(
    old: &TpuSliceStatus,
    generation: Option<i64>,
    reason: &'static str,
    message: &str,
    retry: bool,
    now: DateTime<Utc>,
) -> TpuSliceStatus {
    let mut new = old.clone();
    new.observed_generation = generation;
    new.phase = if crate::reconcile::waits::stall_waits(reason, retry) {
        TpuSlicePhase::Waiting
    } else if retry {
        TpuSlicePhase::Pending
    } else {
        TpuSlicePhase::Failed
    };
    new.message = Some(message.to_string());
    set_kstatus(
        &mut new.conditions,
        Progress::Stalled,
        reason,
        message,
        generation,
        time(now),
    );
    new
}

/// `old` after a pass failed on a refused cloud call (`PermissionDenied`,
/// `CredentialsUnavailable`) or a Kueue that did
/// not answer (`KueueUnavailable`): `Stalled` with `reason` and `message`, the phase kept (the
/// failure says nothing of what runs: a Ready node stays Ready).
pub fn refused(
    old: &TpuSliceStatus,
    generation: Option<i64>,
    reason: &'static str,
    message: &str,
    now: DateTime<Utc>,
) -> TpuSliceStatus {
    let mut new = old.clone();
    new.observed_generation = generation;
    new.message = Some(message.to_string());
    set_kstatus(
        &mut new.conditions,
        Progress::Stalled,
        reason,
        message,
        generation,
        time(now),
    );
    new
}

/// The status a pass writes (pure).
pub fn of_pass(
    slice: &TpuSlice,
    t: &Target,
    old: &TpuSliceStatus,
    observed: &Observed,
    plan: &Plan,
    done: &Done,
    now: DateTime<Utc>,
) -> TpuSliceStatus {
    let started = done.started.as_ref();
    let (capacity_plan, outcome) =
        ladder::settle(&slice.spec, old, observed, &plan.action, done.outcome(plan), now);
    let mut st = build(&Report {
        old,
        generation: slice.meta().generation,
        names: &t.names,
        observed,
        outcome: &outcome,
        shape: t.shape(),
        started,
        preempted: plan.action == Step::RecordPreemption,
        suspended: plan.action == Step::RecordSuspension,
        price: t.price.clone(),
        now,
    });
    st.zone = Some(t.spec(&slice.spec).zone.clone());
    maintenance::report(&mut st, old, observed, &plan.action, started.is_some(), now);
    (st.slice_restarts, st.replacing_slices) =
        plan::slice_restarts(&old.slice_restarts, &old.replacing_slices, observed, &plan.action);
    st.capacity_plan = capacity_plan;
    st.kueue = queue::status(
        old,
        observed.queue.as_ref(),
        plan.action == Step::RecordSuspension,
    );
    let project = &t.names.project;
    let node = st.node_name.as_deref();
    st.links = crate::kinds::links::slice(&crate::kinds::links::Slice {
        project,
        uid: &t.identity.uid,
        node,
        console: node.and_then(|n| backend::of(t.names.provisioner).console(project, n)),
        workload: slice.spec.startup_script.is_none() && slice.spec.workload.is_some(),
    });
    let deleted = slice.meta().deletion_timestamp.is_some();
    time_spent::account(old, &mut st, deleted, now);
    st
}
