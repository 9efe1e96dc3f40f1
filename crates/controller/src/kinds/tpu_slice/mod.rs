//! The TpuSlice controller: one TPU VM node per `TpuSlice`, created directly (`nodes.create`) or
//! through a queued resource (`capacity.queued`).
//!
//! Reconcile shape: guards → deletion (delete the cloud objects, wait until gone) → finalizer →
//! [`observe`] (by deterministic name) → [`plan`] (pure) → [`act`] (at most one mutating call) →
//! [`status`] (server-side apply, Events on transitions).
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
mod compute;
mod observe;
mod plan;
mod spec;
mod status;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use tpu_operator_api::{
    DeletionPolicy,
    accelerator::SliceShape,
    common::CostEstimate,
    conditions::{Progress, find_condition, reasons, types},
    naming::ObjectIdentity,
    tpu_slice::{DONE_URI_ANNOTATION, TpuSlice, TpuSlicePhase, TpuSliceStatus},
};
use tpu_operator_gcp::{
    ErrorKind,
    tpu_v2::model::{NetworkEndpoint, Node, node},
    wkt,
};

pub use spec::workload_script;
pub use status::FIELD_MANAGER;

use self::{
    observe::{Names, Observed},
    plan::{Action as Step, Assessment, CleanupStep, Plan, Requeue},
    spec::Desired,
};
use crate::{
    Shutdown,
    governance::tenancy::{self, usage::Holding},
    reconcile::{
        context::Context,
        driver,
        kind::{Acted, Admission, Claim, Cleaned, Kind, OwnedHolder, Pass, Stop, WriteAhead},
        report::Transition,
        wait::{Unwatch, Wait, Watch},
    },
    runtime::{
        config::ControllerConfig,
        error::{ReconcileError, Result},
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
    type Plan = Plan;
    /// The operation the action started, if any.
    type Done = Option<act::Started>;

    fn status(&self) -> Option<&TpuSliceStatus> {
        self.status.as_ref()
    }

    fn conditions(status: &TpuSliceStatus) -> &[Condition] {
        &status.conditions
    }

    fn spend(status: &TpuSliceStatus) -> Option<&CostEstimate> {
        status.estimated_cost.as_ref()
    }

    fn target(&self, ctx: &Context) -> Result<Result<Target, Stop>> {
        Ok(Target::new(self, ctx)?.ok_or_else(|| Stop {
            reason: reasons::INVALID_SPEC,
            message: "no GCP project: set spec.project or the operator's default project".into(),
        }))
    }

    /// First look, before any cloud read: a slice that never created (or adopted) anything and
    /// breaks a rule of its spec alone makes no cloud call at all. An adoption is judged here by
    /// its spec (`allowAdoption`, project, zone, ...), and by the node itself once it is read.
    fn first_look(&self, ctx: &Context, t: &Target) -> Vec<tenancy::Request> {
        let never_created = self
            .status
            .as_ref()
            .is_none_or(|s| s.node_name.is_none() && s.queued_resource_name.is_none());
        if !never_created {
            return Vec::new();
        }
        let request = if t.names.adopted {
            let node = &t.names.current.node;
            tenancy::request::adopting_slice(&self.spec, &t.names.project, node, &ctx.tenancy.prices)
        } else {
            t.request.clone()
        };
        request.into_iter().collect()
    }

    async fn observe(&self, ctx: &Context, t: &Target) -> Result<Observed> {
        let pending = self.status.as_ref().and_then(|s| s.pending_operation.as_deref());
        let mut observed = observe::observe(ctx, &t.names, pending, Some(&t.desired)).await?;
        observed.workload_done =
            observe::workload_done(ctx, &self.spec, &t.desired, observed.node.as_ref()).await?;
        Ok(observed)
    }

    /// Adoption: a node that is not yet this slice's (no identity labels of its own) is taken
    /// over only after the same checks as a create, against the node as it is, and never from
    /// another owner. Nothing is changed on a refused node, and deleting the slice leaves it
    /// alone.
    fn claim(&self, ctx: &Context, t: &Target, observed: &Observed) -> Claim {
        let Some(node) = observed.node.as_ref().filter(|_| t.names.adopted) else {
            return Claim::Nothing;
        };
        let cluster = ctx.config.cluster_id.as_str();
        match tenancy::adoption::ownership(&node.name, &node.labels, &t.identity, cluster) {
            Err(denial) => Claim::Refused(denial),
            Ok(tenancy::adoption::Ownership::Ours) => Claim::Nothing,
            Ok(tenancy::adoption::Ownership::Unclaimed) => {
                let ns = t.identity.namespace.as_str();
                let project = t.names.project.as_str();
                match tenancy::adoption::claim(&ctx.tenancy, ns, node, &self.spec, project) {
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
        let old = self.status.clone().unwrap_or_default();
        plan::plan(&plan_input(self, t, &old, observed, now))
    }

    /// Right before a create: every rule, with the namespace's chip quota and budget.
    fn admission(&self, _ctx: &Context, t: &Target, plan: &Plan) -> Option<Admission> {
        let creates = matches!(plan.action, Step::CreateNode | Step::CreateQueuedResource);
        let request = t.request.clone().filter(|_| creates)?;
        Some(Admission {
            checked: Vec::new(),
            counted: vec![request],
            holder: t.holder(),
        })
    }

    async fn act(
        &self,
        ctx: &Context,
        t: &Target,
        observed: &mut Observed,
        plan: &mut Plan,
        _ahead: &mut dyn WriteAhead<Self::Status>,
    ) -> Result<Acted<Option<act::Started>>> {
        let old = self.status.clone().unwrap_or_default();
        let request = t.request(&old, observed.node.as_ref());
        let (started, failure) = act_on_plan(ctx, plan, &request).await?;
        // A permanent refusal (permission, invalid request) goes into the status; returning the
        // error as well gives the object the slow, backed-off retry of `error_policy`.
        let failed = failure
            .filter(|_| plan.assessment.progress == Progress::Stalled)
            .map(ReconcileError::gcp(action_name(&plan.action)));
        Ok(Acted {
            done: started,
            events: Vec::new(),
            failed,
        })
    }

    fn report(&self, now: DateTime<Utc>, pass: &Pass<'_, Self>) -> TpuSliceStatus {
        build_status(
            self,
            pass.target,
            pass.old,
            pass.observed,
            pass.plan,
            pass.done.as_ref(),
            now,
        )
    }

    fn wait(&self, config: &ControllerConfig, pass: &Pass<'_, Self>, _new: &TpuSliceStatus) -> Wait {
        let node = &pass.target.names.current.node;
        match pass.plan.assessment.requeue {
            Requeue::Active => watch_node(
                config,
                &pass.target.names,
                pass.observed,
                &pass.plan.action,
                pass.done.as_ref(),
            ),
            Requeue::Stable if let Some(ready) = reclaimable_ready_node(self, pass) => Wait::Watch {
                watch: Watch::state::<Node>(&ready.name, &ready.state),
                cap: None,
                unlisted: Some(Requeue::Stable.after(config)),
            },
            other => Wait::poll_unwatching::<Node>(other.after(config), Some(node)),
        }
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.deletion_policy
    }

    fn orphaned(&self, ctx: &Context, t: &Target) -> Option<Holding> {
        orphaned(self, ctx, t)
    }

    async fn clean(&self, ctx: &Context, t: &Target) -> Result<Cleaned<TpuSliceStatus>> {
        clean(self, ctx, t).await
    }

    fn transitions(old: &TpuSliceStatus, new: &TpuSliceStatus) -> Vec<Transition> {
        status::transitions(old, new)
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

    fn refused(&self, old: &TpuSliceStatus, message: &str, now: DateTime<Utc>) -> TpuSliceStatus {
        status::refused(old, self.meta().generation, message, now)
    }
}

/// Whether the operator may read marker files under `uri` (the done-uri annotation) for a slice of
/// `namespace`. The annotation is the tenant's to write like the spec, and the operator reads with
/// its own identity, so `allowedBuckets` holds for it too. A refused one is ignored (the slice runs
/// on without workload markers), logged with the policy's message.
fn done_uri_allowed(ctx: &Context, namespace: &str, uri: &str) -> bool {
    let req = tenancy::Request {
        what: "TpuSlice".into(),
        storage: vec![tenancy::request::Named {
            field: format!("metadata.annotations[{DONE_URI_ANNOTATION}]"),
            value: uri.to_owned(),
        }],
        ..tenancy::Request::default()
    };
    match tenancy::check_storage(&ctx.tenancy, namespace, &req) {
        Ok(()) => true,
        Err(denial) => {
            tracing::warn!(namespace, message = %denial.message, "ignoring the done-uri annotation");
            false
        }
    }
}

/// What the slice is called in the cloud and what its node must carry.
pub struct Target {
    identity: ObjectIdentity,
    names: Names,
    desired: Desired,
    /// The spec checked and mapped once per pass: one slice's shape and the current
    /// incarnation's create request (`Err`: what in the spec cannot be provisioned, by field).
    checked: Result<spec::Checked, String>,
    /// `TpuSlice <name>`, as usage lists it.
    holder: String,
    /// What a create asks of the namespace's policy (`None`: the spec has no valid shape).
    request: Option<tenancy::Request>,
    /// Estimated US dollars per hour while the node runs, and the price key.
    price: Option<(f64, String)>,
}

impl Target {
    /// `None` when no project is known (spec nor operator default).
    fn new(slice: &TpuSlice, ctx: &Context) -> Result<Option<Self>> {
        let identity = ObjectIdentity::new(
            slice
                .namespace()
                .ok_or(ReconcileError::MissingMetadata("namespace"))?,
            slice.name_any(),
            slice.uid().ok_or(ReconcileError::MissingMetadata("uid"))?,
        );
        let Some(project) = ctx.project_for(&identity.namespace, slice.spec.project.as_deref()) else {
            return Ok(None);
        };
        let done_uri = slice
            .annotations()
            .get(DONE_URI_ANNOTATION)
            .map(String::as_str)
            .filter(|uri| done_uri_allowed(ctx, &identity.namespace, uri));
        let desired = spec::desired(&slice.spec, &identity, &ctx.config.cluster_id, done_uri);
        let names = Names::new(slice, &identity, project);
        let checked = spec::check(&slice.spec, &desired, &identity, &names.create_at());
        let prices = &ctx.tenancy.prices;
        Ok(Some(Self {
            request: tenancy::request::tpu_slice(&slice.spec, &names.project, prices),
            price: tenancy::request::slice_per_hour(&slice.spec, prices),
            holder: format!("TpuSlice {}", identity.name),
            identity,
            names,
            desired,
            checked,
        }))
    }

    /// The slice as the namespace's usage names it.
    fn holder(&self) -> OwnedHolder {
        OwnedHolder {
            uid: self.identity.uid.clone(),
            what: self.holder.clone(),
            holds: true,
        }
    }

    /// One slice's shape; `None` when the spec is invalid.
    fn shape(&self) -> Option<&SliceShape> {
        self.checked.as_ref().ok().map(|c| &c.shape)
    }

    /// What `act` needs for one call on this slice; `node` as observed this pass, if read.
    fn request<'a>(&'a self, old: &TpuSliceStatus, node: Option<&'a Node>) -> act::Request<'a> {
        act::Request {
            names: &self.names,
            desired: &self.desired,
            identity: &self.identity,
            create: self.checked.as_ref().ok().map(|c| &c.create),
            recreations: old.recreations.max(0) as u32,
            node,
        }
    }
}

/// The pure plan's input for this pass.
fn plan_input<'a>(
    slice: &'a TpuSlice,
    t: &'a Target,
    old: &TpuSliceStatus,
    observed: &'a Observed,
    now: chrono::DateTime<chrono::Utc>,
) -> plan::Input<'a> {
    let seconds = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        chrono::DateTime::<chrono::Utc>::from_timestamp(t.0.as_second(), 0)
    };
    plan::Input {
        spec: &slice.spec,
        names: &t.names,
        observed,
        desired: &t.desired,
        shape: t.checked.as_ref().map(|c| &c.shape).map_err(String::as_str),
        recreations: old.recreations,
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
        now,
    }
}

/// Runs the plan's action. A refusal the plan knows how to report replaces its assessment and
/// comes back as the failure; another operation running on the node leaves the plan as it is.
async fn act_on_plan(
    ctx: &Context,
    plan: &mut Plan,
    request: &act::Request<'_>,
) -> Result<(Option<act::Started>, Option<tpu_operator_gcp::GcpError>)> {
    match act::act(ctx, &plan.action, request).await {
        Ok(started) => Ok((started, None)),
        // Another operation runs on the node: the plan (and its short requeue) stands.
        Err(err) if plan::node_busy(&plan.action, &err) => {
            tracing::debug!(error = %err, "TPU node busy with another operation; retrying");
            Ok((None, None))
        }
        Err(err) => match plan::on_action_error(&plan.action, &err) {
            Some(assessment) => {
                plan.assessment = assessment;
                Ok((None, Some(err)))
            }
            None => Err(ReconcileError::gcp(action_name(&plan.action))(err)),
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
    action: &Step,
    started: Option<&act::Started>,
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
        None => Wait::poll_unwatching::<Node>(config.poll_active, Some(&names.current.node)),
    }
}

/// The READY node of a settled slice Google may reclaim (Spot, preemptible), when the cloud watch
/// can list it: a preemption, repair or health change must reach status in seconds, not at the
/// next stable poll (issue 35 item 7). One listing per zone covers every such slice there.
fn reclaimable_ready_node<'a>(slice: &TpuSlice, pass: &Pass<'a, TpuSlice>) -> Option<&'a Node> {
    use tpu_operator_gcp::tpu_v2::model::node::State;
    let names = &pass.target.names;
    let listable = names.current.queued.is_none() && names.backend().watchable();
    let node = pass.observed.node.as_ref()?;
    (listable && slice.spec.preemptible() && node.state == State::Ready && node.name == names.current.node)
        .then_some(node)
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

/// An allowed `Orphan` deletion leaves the slice's node (or queued resource) running: it keeps
/// counting against the namespace's quota and budget from now until a sweep no longer finds it
/// ([`tenancy::orphans`]). Only the TPU API's: the sweeper counts TPU nodes and queued resources
/// (Compute Engine orphans are reported by the sweeper, not counted).
fn orphaned(slice: &TpuSlice, ctx: &Context, t: &Target) -> Option<Holding> {
    let holds = slice.status.as_ref().is_some_and(tenancy::usage::holds_capacity);
    let counted = t.names.backend().counts_orphans();
    let shape = slice.spec.total_shape().filter(|_| holds && counted)?;
    let (per_hour_usd, _) = ctx.tenancy.prices.slice_per_hour(&shape, slice.spec.price_kind());
    let current = &t.names.current;
    Some(Holding {
        uid: current.queued.clone().unwrap_or_else(|| current.node.clone()),
        what: format!("orphaned node of deleted TpuSlice {}", t.identity.name),
        chips: shape.chips,
        per_hour_usd,
    })
}

/// One deletion pass (policy `Delete`).
async fn clean(slice: &TpuSlice, ctx: &Context, t: &Target) -> Result<Cleaned<TpuSliceStatus>> {
    let old = slice.status.clone().unwrap_or_default();
    let refused = match delete_known_node(slice, ctx, t, &old).await? {
        KnownDelete::Started(cleaned) => return Ok(*cleaned),
        KnownDelete::NotTried => None,
        KnownDelete::Refused(err) => Some(err),
    };
    let mut observed = observe::observe(ctx, &t.names, None, None).await?;
    // A node named by `spec.adoptNodeId` that this slice never took over (adoption refused, or
    // another owner's) is not the slice's to delete.
    if t.names.adopted
        && let Some(node) = &observed.node
        && tenancy::adoption::ownership(&node.name, &node.labels, &t.identity, &ctx.config.cluster_id)
            != Ok(tenancy::adoption::Ownership::Ours)
    {
        let note = format!(
            "node {} was never adopted by this TpuSlice: left in place",
            node.name
        );
        crate::reconcile::report::publish_event(ctx, slice, false, "Deleted", note).await;
        observed.node = None;
    }
    let deleting = |message: String| {
        Assessment::new(
            Progress::Reconciling,
            reasons::DELETING,
            TpuSlicePhase::Deleting,
            message,
        )
    };
    let mut step = plan::plan_cleanup(&observed);
    if step == CleanupStep::Done {
        // What the incarnations shared (a Compute Engine group's template and policy) goes last.
        let releasing = backend::Releasing {
            spec: &slice.spec,
            project: &t.names.project,
            identity: &t.identity,
        };
        if let Some(wait) = t.names.backend().release(&ctx.gcp, &releasing).await? {
            step = CleanupStep::Wait(wait);
        }
    }
    let (action, assessment) = match step {
        CleanupStep::Done => {
            if let Some(what) = old.queued_resource_name.as_ref().or(old.node_name.as_ref()) {
                let note = format!("{what} is gone; removing the finalizer");
                crate::reconcile::report::publish_event(ctx, slice, false, "Deleted", note).await;
            }
            return Ok(Cleaned::Done {
                unwatch: Some(Unwatch::of::<Node>(&t.names.current.node)),
            });
        }
        CleanupStep::Wait(message) => (Step::Nothing, deleting(message)),
        CleanupStep::Delete(action) => (action, deleting("deleting the cloud resources".into())),
    };
    let mut plan = Plan { action, assessment };
    let request = t.request(&old, None);
    // The delete this pass already sent by name was refused: its answer stands for the same
    // delete, instead of asking again at once (a refused delete is retried with backoff).
    let result = match refused {
        Some(err) if plan.action == Step::DeleteNode(t.names.current.node.clone()) => Err(err),
        _ => act::act(ctx, &plan.action, &request).await,
    };
    let (started, failed) = match result {
        Ok(started) => (started, None),
        Err(err) if matches!(err.kind, ErrorKind::PermissionDenied | ErrorKind::Unauthenticated) => {
            plan.assessment = Assessment::new(
                Progress::Stalled,
                reasons::PERMISSION_DENIED,
                TpuSlicePhase::Deleting,
                format!("cannot delete: {err}; retrying with backoff"),
            );
            (None, Some(ReconcileError::gcp(action_name(&plan.action))(err)))
        }
        Err(err) => return Err(ReconcileError::gcp(action_name(&plan.action))(err)),
    };
    let now = ctx.clock.now();
    Ok(Cleaned::Pending {
        status: Some(build_status(
            slice,
            t,
            &old,
            &observed,
            &plan,
            started.as_ref(),
            now,
        )),
        wait: watch_deletion(&ctx.config, slice, &observed, &plan.action),
        failed,
    })
}

/// The first deletion pass of a slice whose status shows one READY node and nothing else (no
/// queued resource, no earlier incarnation, no operation in flight, not adopted): the node is
/// deleted by name without reading it first, since the read would only repeat what status says.
/// Its end is then seen through the cloud watch and one read, so a deletion costs the two calls
/// it must (issue 25). Anything else, a NOT_FOUND, or a refused delete takes the full path
/// (read, plan, act), which reports errors.
async fn delete_known_node(
    slice: &TpuSlice,
    ctx: &Context,
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
    let started = match act::act(ctx, &action, &request).await {
        Ok(Some(started)) => started,
        Ok(None) => return Ok(KnownDelete::NotTried),
        Err(err) if err.kind == ErrorKind::NotFound => return Ok(KnownDelete::NotTried),
        Err(err) => return Ok(KnownDelete::Refused(err)),
    };
    let plan = Plan {
        action: action.clone(),
        assessment: Assessment::new(
            Progress::Reconciling,
            reasons::DELETING,
            TpuSlicePhase::Deleting,
            "deleting the cloud resources",
        ),
    };
    // What the status last showed of the node (it was READY, and billing, until this delete):
    // the same status the full path writes from the read it would have made.
    let observed = Observed {
        node: Some(last_seen_node(old)),
        ..Observed::default()
    };
    let now = ctx.clock.now();
    Ok(KnownDelete::Started(Box::new(Cleaned::Pending {
        status: Some(build_status(slice, t, old, &observed, &plan, Some(&started), now)),
        wait: watch_deletion(&ctx.config, slice, &observed, &action),
        failed: None,
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

/// The status a pass writes (pure).
fn build_status(
    slice: &TpuSlice,
    t: &Target,
    old: &TpuSliceStatus,
    observed: &Observed,
    plan: &Plan,
    started: Option<&act::Started>,
    now: DateTime<Utc>,
) -> TpuSliceStatus {
    status::build(&status::Report {
        old,
        generation: slice.meta().generation,
        names: &t.names,
        observed,
        assessment: &plan.assessment,
        shape: t.shape(),
        started,
        preempted: plan.action == Step::RecordPreemption,
        price: t.price.clone(),
        now,
    })
}

fn action_name(action: &Step) -> &'static str {
    match action {
        Step::Nothing | Step::RecordPreemption => "observe TPU slice",
        Step::CreateNode => "create TPU node",
        Step::CreateQueuedResource => "create queued resource",
        Step::DeleteNode(_) => "delete TPU node",
        Step::DeleteQueuedResource(_) => "delete queued resource",
        Step::PatchNode(_) => "patch TPU node labels/metadata/tags",
        Step::StartNode => "start TPU node",
        Step::PatchSliceNode { .. } => "patch multislice TPU node labels/metadata/tags",
    }
}
