//! The TpuSlice controller: one TPU VM node per `TpuSlice`, created directly (`nodes.create`) or
//! through a queued resource (`capacity.queued`).
//!
//! Files: [`observe`] (by deterministic name), [`plan`] (pure), [`act`] (at most one mutating
//! call), [`status`], [`wait`] (when to look again), [`cleanup`] (deletion); the pass's order is
//! [`crate::reconcile::pass`]'s. Each pass works on one [`Target`]: names, desired values and the
//! checked spec.
//!
//! Crash safety: the node / queued resource id is derived from the object's identity and its
//! recreation count (`naming::tpu_node_id`), and every reconcile first reads the cloud by that
//! name. An operator killed between the create call and the status write therefore finds the
//! object on its next pass instead of creating a second one; a create that races anyway gets
//! ALREADY_EXISTS and adopts the object on the next pass.
//!
//! Preemption: a PREEMPTED / TERMINATED node, or a queued resource SUSPENDED by the service, is
//! counted in `status.recreations` first (status only), which moves the slice to the next id; the
//! preempted incarnation is then deleted, and once it is gone the next one is created.

// `ReconcileError` (shared, crate::runtime::error) carries a `GcpError` inline; boxing it is a crate-wide
// decision, not one for this module.
#![allow(clippy::result_large_err)]

mod act;
pub(crate) mod backend;
mod cleanup;
mod compute;
mod early_start;
pub mod holding;
mod ladder;
mod maintenance;
mod names;
mod observe;
mod plan;
pub mod policy;
pub mod queue;
mod request;
mod spec;
mod status;
mod target;
mod time_spent;
mod wait;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
pub use spec::workload_script;
pub use status::FIELD_MANAGER;
pub use target::Target;
use tpu_operator_api::{
    DeletionPolicy,
    common::CostEstimate,
    conditions::{Progress, describing, find_condition, reasons, types},
    tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus},
};

use self::{
    observe::Observed,
    plan::{Action as Step, Plan},
};
use crate::{
    governance::tenancy::{self, usage::Holding},
    reconcile::{
        context::Context,
        driver,
        handles::{Io, Kept, Settings},
        kind::{Acted, Admission, Claim, Kind, Pass, Stop, WriteAhead},
        report::Transition,
        wait::Wait,
    },
    runtime::{
        config::ControllerConfig,
        error::{ReconcileError, Result},
        shutdown::Shutdown,
    },
};

/// Runs the TpuSlice controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    driver::run::<TpuSlice>(ctx, shutdown).await;
}

/// What a pass read: the cloud by name, and when the workload last said it was done.
impl Kind for TpuSlice {
    const KIND: &'static str = "TpuSlice";
    const FIELD_MANAGER: &'static str = FIELD_MANAGER;
    const SETTLES: bool = true;
    type Status = TpuSliceStatus;
    type Target = Target;
    type Observed = Observed;
    type Action = plan::Action;
    type Phase = TpuSlicePhase;
    type Details = plan::Details;
    /// The operation the action started, or what is reported instead of the plan.
    type Done = act::Done;

    fn status(&self) -> Option<&TpuSliceStatus> {
        self.status.as_ref()
    }

    /// A slice Kueue gates is woken by its Workload, which leaves the slice unchanged: every
    /// pass runs in full.
    fn settles(&self, settings: Settings<'_>) -> bool {
        crate::kueue::queued::local_queue(self, settings).is_none()
    }

    /// Its Workload wakes it, and what it awaits besides (`kueue::waits`).
    fn watches(
        controller: kube::runtime::Controller<crate::runtime::watched::Cached<Self>>,
        watch: &crate::reconcile::kind::Watches<'_>,
    ) -> kube::runtime::Controller<crate::runtime::watched::Cached<Self>> {
        crate::kueue::waits::watched(controller, watch)
    }

    fn forget(&self, settings: Settings<'_>, kept: Kept<'_>) {
        crate::kueue::queued::forget(self, settings, kept);
    }

    fn conditions(status: &TpuSliceStatus) -> &[Condition] {
        &status.conditions
    }

    fn spend(status: &TpuSliceStatus) -> Option<&CostEstimate> {
        status.estimated_cost.as_ref()
    }

    fn target(&self, settings: Settings<'_>) -> Result<Result<Target, Stop>> {
        Ok(Target::new(self, settings)?.ok_or_else(|| Stop {
            reason: reasons::INVALID_SPEC,
            message: "no GCP project: set spec.project or the operator's default project".into(),
        }))
    }

    /// First look, before any cloud read: a slice that never created (or adopted) anything and
    /// breaks a rule of its spec alone makes no cloud call at all. An adoption is judged here by
    /// its spec (`allowAdoption`, project, zone, ...), and by the node itself once it is read.
    fn first_look(&self, settings: Settings<'_>, t: &Target) -> Vec<tenancy::Request> {
        let never_created = self
            .status
            .as_ref()
            .is_none_or(|s| s.node_name.is_none() && s.queued_resource_name.is_none());
        if !never_created {
            return Vec::new();
        }
        if t.names.adopted {
            let node = &t.names.current.node;
            let request = policy::adopting(&self.spec, &t.names.project, node, settings.prices);
            return request.into_iter().collect();
        }
        // A capacity plan is judged whole before its first create: every rung and zone it may
        // move to, so a rung the policy forbids is refused now, not hours later.
        match &self.spec.capacity_plan {
            Some(_) => ladder::requests(&self.spec, &t.names.project, settings.prices),
            None => t.request.clone().into_iter().collect(),
        }
    }

    async fn observe(&self, io: &Io<'_>, t: &Target) -> Result<Observed> {
        if self.deleting() {
            return cleanup::observe(self, io, t).await;
        }
        let pending = self.status.as_ref().and_then(|s| s.pending_operation.as_deref());
        let mut observed = observe::observe(io, &t.names, pending, Some(&t.desired)).await?;
        observed.workload_done = observe::workload_done(
            io,
            &t.identity.namespace,
            &self.spec,
            &t.desired,
            observed.node.as_ref(),
        )
        .await?;
        observed.committed_checkpoint = early_start::observe(io, &t.identity.namespace, self).await?;
        observed.queue = queue::observe(self, io, t.shape()).await?;
        Ok(observed)
    }

    /// Adoption: a node that is not yet this slice's (no identity labels of its own) is taken
    /// over only after the same checks as a create, against the node as it is, and never from
    /// another owner. Nothing is changed on a refused node, and deleting the slice leaves it
    /// alone.
    fn claim(&self, settings: Settings<'_>, t: &Target, observed: &Observed) -> Claim {
        let Some(node) = observed.node.as_ref().filter(|_| t.names.adopted) else {
            return Claim::Nothing;
        };
        let cluster = settings.config.cluster_id.as_str();
        match tenancy::adoption::ownership(&node.name, &node.labels, &t.identity, cluster, policy::KIND) {
            Err(denial) => Claim::Refused(denial),
            Ok(tenancy::adoption::Ownership::Ours) => Claim::Nothing,
            Ok(tenancy::adoption::Ownership::Unclaimed) => {
                let (ns, project) = (t.identity.namespace.as_str(), t.names.project.as_str());
                let (policies, prices) = (settings.policies, settings.prices);
                match policy::claim(policies, prices, ns, node, &self.spec, project) {
                    Err(denial) => Claim::Refused(denial),
                    Ok(counted) => Claim::Admit(Admission {
                        checked: Vec::new(),
                        counted,
                        holder: t.holder(),
                    }),
                }
            }
        }
    }

    fn plan(&self, now: DateTime<Utc>, t: &Target, observed: &Observed) -> Plan {
        if self.deleting() {
            return plan::plan_deletion(observed);
        }
        let old = self.status.clone().unwrap_or_default();
        plan::plan(&plan_input(self, t, &old, observed, now))
    }

    /// Right before a create: every rule, with the namespace's chip quota and budget.
    fn admission(&self, _settings: Settings<'_>, t: &Target, plan: &Plan) -> Option<Admission> {
        let request = t.request.clone().filter(|_| plan.action.creates())?;
        Some(Admission {
            checked: Vec::new(),
            counted: vec![request],
            holder: t.holder(),
        })
    }

    async fn act(
        &self,
        io: &Io<'_>,
        t: &Target,
        observed: &Observed,
        plan: &Plan,
        _ahead: &mut dyn WriteAhead<Self::Status>,
    ) -> Result<Acted<act::Done>> {
        if self.deleting() {
            return cleanup::act(self, io, t, observed, plan).await;
        }
        let old = self.status.clone().unwrap_or_default();
        if let (Step::CreateWorkload | Step::ReleaseWorkload | Step::DeleteWorkload, Some(queued)) =
            (&plan.action, &observed.queue)
        {
            act::on_queue(self, io, &plan.action, queued).await?;
            return Ok(Acted::done(act::Done::default()));
        }
        let request = t.request(&old, observed.node.as_ref());
        let (done, failure) = act::on_plan(io, plan, &request).await?;
        // A permanent refusal (permission, invalid request) goes into the status; returning the
        // error as well gives the object the slow, backed-off retry of `error_policy`.
        let failed = failure
            .filter(|_| done.verdict(plan).progress() == Some(Progress::Stalled))
            .map(ReconcileError::gcp(act::action_name(&plan.action)));
        Ok(Acted {
            done,
            events: Vec::new(),
            failed,
        })
    }

    fn report(&self, now: DateTime<Utc>, pass: &Pass<'_, Self>) -> TpuSliceStatus {
        status::of_pass(
            self,
            pass.target,
            pass.old,
            pass.observed,
            pass.plan,
            pass.done,
            now,
        )
    }

    fn wait(&self, config: &ControllerConfig, pass: &Pass<'_, Self>, new: &TpuSliceStatus) -> Wait {
        if self.deleting() {
            return cleanup::wait(config, pass);
        }
        wait::after_pass(config, pass, new)
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.deletion_policy
    }

    fn orphaned(&self, settings: Settings<'_>, t: &Target) -> Option<Holding> {
        cleanup::orphaned(self, settings.prices, t)
    }

    fn released(&self, pass: &Pass<'_, Self>) -> bool {
        cleanup::released(pass.plan, pass.done)
    }

    /// Its Kueue Workload is deleted and let go: the quota is free once the node is gone.
    async fn let_go(&self, io: &Io<'_>) -> Result<()> {
        crate::kueue::queued::release_on_delete(self, io).await
    }

    fn transitions(old: &TpuSliceStatus, new: &TpuSliceStatus) -> Vec<Transition> {
        [status::transitions(old, new), maintenance::transitions(old, new)].concat()
    }

    /// A stockout, an exhausted quota or a policy limit (`Waiting`), or a queued resource
    /// waiting for capacity.
    fn waiting(st: &TpuSliceStatus) -> bool {
        let queued_for_capacity = st.phase == TpuSlicePhase::Queued
            && describing(&st.conditions).is_some_and(|c| c.reason == reasons::WAITING_FOR_CAPACITY);
        st.phase == TpuSlicePhase::Waiting || queued_for_capacity
    }

    /// A refusal looked at again (quota, budget) leaves the slice `Pending`; one that needs a
    /// spec or policy change is `Failed`.
    fn stalled(
        &self,
        old: &TpuSliceStatus,
        reason: &'static str,
        message: &str,
        retry: bool,
        now: DateTime<Utc>,
    ) -> TpuSliceStatus {
        status::stalled(old, self.meta().generation, reason, message, retry, now)
    }

    fn refused(
        &self,
        old: &TpuSliceStatus,
        reason: &'static str,
        message: &str,
        now: DateTime<Utc>,
    ) -> TpuSliceStatus {
        status::refused(old, self.meta().generation, reason, message, now)
    }
}

/// The pure plan's input for this pass.
fn plan_input<'a>(
    slice: &'a TpuSlice,
    t: &'a Target,
    old: &'a TpuSliceStatus,
    observed: &'a Observed,
    now: chrono::DateTime<chrono::Utc>,
) -> plan::Input<'a> {
    let seconds = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        chrono::DateTime::<chrono::Utc>::from_timestamp(t.0.as_second(), 0)
    };
    plan::Input {
        spec: t.spec(&slice.spec),
        names: &t.names,
        observed,
        desired: &t.desired,
        shape: t.checked.as_ref().map(|c| &c.shape).map_err(String::as_str),
        recreations: old.recreations,
        suspended: old.phase == TpuSlicePhase::Suspended,
        queue: observed.queue.as_ref(),
        ran_node: old.node_name.is_some() || old.queued_resource_name.is_some(),
        queue_stopped: old.kueue.as_ref().is_some_and(|k| k.stopped),
        ready_since: old.ready_time.as_ref().and_then(seconds),
        last_active: old
            .last_active_time
            .as_ref()
            .and_then(seconds)
            .max(observed.workload_done),
        // Once a flex-start run is over (reaping or reaped) nothing is created again for this
        // generation, even after the resize request that said so is deleted.
        run_over: old.observed_generation == slice.meta().generation
            && [types::STALLED, types::RECONCILING].iter().any(|t| {
                find_condition(&old.conditions, t)
                    .is_some_and(|c| c.status == "True" && c.reason == reasons::MAX_RUN_DURATION_EXCEEDED)
            }),
        spec_moved: old.left_by_a_move(),
        slice_restarts: &old.slice_restarts,
        replacing: &old.replacing_slices,
        now,
    }
}
