//! From (spec, observed cloud state, status, now) to one action and the slice's assessment.
//!
//! Does not touch Kubernetes or Google Cloud. Every TPU node state and queued-resource state is
//! matched explicitly (the generated enums are `#[non_exhaustive]`, so a last arm covers values
//! newer than the client library).

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    accelerator::SliceShape,
    conditions::{Progress, reasons},
    duration::parse_duration,
    tpu_slice::{TpuSlicePhase, TpuSliceSpec},
};
use tpu_operator_gcp::{
    ErrorKind, Exhaustion, GcpError,
    tpu_v2::model::{QueuedResource, node, queued_resource_state},
};

use super::{
    observe::{Names, Observed, OperationView},
    spec::Desired,
};

mod on_node;
mod queued;

use on_node::plan_multislice;
pub use on_node::{drift_mask, health_name, state_name};
use on_node::{plan_node, plan_preempted};
#[cfg(test)]
mod tests;

/// The one cloud call (or status-only step) of this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    CreateNode,
    CreateQueuedResource,
    /// Full node name.
    DeleteNode(String),
    /// Full queued resource name (always `force`: its nodes go with it).
    DeleteQueuedResource(String),
    /// `nodes.patch` of the current node with this update mask.
    PatchNode(Vec<&'static str>),
    /// `nodes.start` of a STOPPED current node.
    StartNode,
    /// Multislice: `nodes.patch` of one slice's node (`node`, full name) with this update mask
    /// and these values (the metadata already merged with what the node has).
    PatchSliceNode {
        node: String,
        mask: Vec<&'static str>,
        patch: Desired,
    },
    /// Status only: count a preemption (`recreations + 1`), which moves `current` to a new id.
    RecordPreemption,
}

impl Action {
    /// A patch or start of an existing node.
    pub fn updates_node(&self) -> bool {
        matches!(
            self,
            Action::PatchNode(_) | Action::StartNode | Action::PatchSliceNode { .. }
        )
    }
}

pub use crate::runtime::requeue::Requeue;

/// What the slice's status should say.
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    pub progress: Progress,
    pub reason: &'static str,
    pub message: String,
    pub phase: TpuSlicePhase,
    pub requeue: Requeue,
    /// `CapacityAvailable` condition, when known.
    pub capacity: Option<bool>,
    /// An immutable field differs between the node and the spec (`SpecDrift`).
    pub drift: Option<String>,
}

impl Assessment {
    pub fn new(
        progress: Progress,
        reason: &'static str,
        phase: TpuSlicePhase,
        message: impl Into<String>,
    ) -> Self {
        let requeue = match progress {
            Progress::Ready | Progress::Stalled | Progress::Idle => Requeue::Stable,
            Progress::Reconciling => Requeue::Active,
        };
        Self {
            progress,
            reason,
            message: message.into(),
            phase,
            requeue,
            capacity: None,
            drift: None,
        }
    }

    fn requeue(mut self, requeue: Requeue) -> Self {
        self.requeue = requeue;
        self
    }

    fn capacity(mut self, available: bool) -> Self {
        self.capacity = Some(available);
        self
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub action: Action,
    pub assessment: Assessment,
}

impl Plan {
    fn new(action: Action, assessment: Assessment) -> Self {
        Self { action, assessment }
    }

    fn report(assessment: Assessment) -> Self {
        Self::new(Action::Nothing, assessment)
    }
}

/// Everything plan looks at.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub spec: &'a TpuSliceSpec,
    pub names: &'a Names,
    pub observed: &'a Observed,
    pub desired: &'a Desired,
    /// One slice's shape, or what in the spec cannot be provisioned (by field).
    pub shape: Result<&'a SliceShape, &'a str>,
    pub recreations: i32,
    /// When the current incarnation first became READY (`status.readyTime`).
    pub ready_since: Option<DateTime<Utc>>,
    /// When the slice's workload last finished (`status.lastActiveTime`, or a completion marker
    /// seen this pass): where `spec.idleTimeout` counts from.
    pub last_active: Option<DateTime<Utc>>,
    /// This generation already ran out its flex-start run (status is Stalled with reason
    /// `MaxRunDurationExceeded`): nothing is created again.
    pub run_over: bool,
    pub now: DateTime<Utc>,
}

impl Input<'_> {
    fn max_recreations(&self) -> i32 {
        self.spec.preemption.clone().unwrap_or_default().max_recreations
    }
}

/// The slice exists (not being deleted): create, wait, recreate, correct drift, or report.
pub fn plan(input: &Input<'_>) -> Plan {
    let mut plan = decide(input);
    // A backend without node updates (Compute Engine: labels and metadata are fixed at creation,
    // a stopped slice is not started) is never asked for one: the assessment stands and the
    // slice is looked at again as it says.
    if input.names.backend().updates().is_none() && plan.action.updates_node() {
        plan.action = Action::Nothing;
    }
    plan
}

fn decide(input: &Input<'_>) -> Plan {
    if let Err(message) = input.shape {
        return Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::INVALID_SPEC,
            TpuSlicePhase::Failed,
            message.to_string(),
        ));
    }
    if let Some(plan) = max_run_exceeded(input)
        .or_else(|| idle_timeout_exceeded(input))
        .or_else(|| flex_run_over(input))
    {
        return plan;
    }
    if input.spec.uses_queued_resource() {
        return queued::plan(input);
    }
    match &input.observed.node {
        Some(node) => plan_node(input, node),
        None => plan_absent(input, Action::CreateNode),
    }
}

/// `spec.maxRunDuration` since the node became READY has passed: delete what runs, then stay
/// Stalled (never recreate) until the spec changes.
fn max_run_exceeded(input: &Input<'_>) -> Option<Plan> {
    let limit = input.spec.max_run_duration.as_deref()?;
    let since = input.ready_since?;
    reap_after(
        input,
        since,
        limit,
        reasons::MAX_RUN_DURATION_EXCEEDED,
        "maxRunDuration",
    )
}

/// The workload finished (its completion marker appeared) `spec.idleTimeout` ago and the slice
/// is still billing with nothing to run: delete it like [`max_run_exceeded`]. A marker older
/// than the current incarnation's READY time belongs to an earlier node and does not count.
fn idle_timeout_exceeded(input: &Input<'_>) -> Option<Plan> {
    let limit = input.spec.idle_timeout.as_deref()?;
    let since = input.last_active?;
    if input.ready_since.is_some_and(|ready| since < ready) {
        return None;
    }
    reap_after(input, since, limit, reasons::IDLE_TIMEOUT, "idleTimeout")
}

/// Once `limit` (a duration string of field `field`) has passed since `since`: delete the
/// slice's cloud objects, then report Stalled with `reason` until the spec changes.
fn reap_after(
    input: &Input<'_>,
    since: DateTime<Utc>,
    limit: &str,
    reason: &'static str,
    field: &str,
) -> Option<Plan> {
    let duration = parse_duration(limit).ok()?;
    if input.now < since + chrono::Duration::seconds(duration.as_secs() as i64) {
        return None;
    }
    Some(reap(
        input,
        reason,
        &format!("{field} {limit} exceeded"),
        &format!("raise or remove spec.{field} to recreate it"),
    ))
}

/// A flex-start slice whose run duration is over (Compute Engine deleted its VMs; the resize
/// request says so, or this generation's status already does): delete what is left and stay
/// Stalled like `maxRunDuration`, never recreating.
fn flex_run_over(input: &Input<'_>) -> Option<Plan> {
    let flex = input.spec.capacity.as_ref()?.flex_start.as_ref()?;
    let signalled = input
        .observed
        .queued
        .as_ref()
        .and_then(|q| q.state.as_ref())
        .filter(|s| s.state == queued_resource_state::State::Failed)
        .and_then(|s| s.failed_data())
        .and_then(|f| f.error.as_ref())
        .is_some_and(|e| e.code == RUN_OVER_CODE);
    if !(signalled || input.run_over) {
        return None;
    }
    Some(reap(
        input,
        reasons::MAX_RUN_DURATION_EXCEEDED,
        &format!("capacity.flexStart.runDuration {} is over", flex.run_duration),
        "change the spec (or recreate the TpuSlice) to run again",
    ))
}

/// The code a finished flex-start run is reported with (DEADLINE_EXCEEDED, see
/// `tpu_operator_gcp::compute::convert`).
const RUN_OVER_CODE: i32 = 4;

/// Deletes the slice's cloud objects, then reports Stalled with `reason`.
fn reap(input: &Input<'_>, reason: &'static str, what: &str, fix: &str) -> Plan {
    match plan_cleanup(input.observed) {
        CleanupStep::Delete(action) => Plan::new(
            action,
            Assessment::new(
                Progress::Reconciling,
                reason,
                TpuSlicePhase::Deleting,
                format!("{what}: deleting the slice"),
            ),
        ),
        CleanupStep::Wait(message) => Plan::report(Assessment::new(
            Progress::Reconciling,
            reason,
            TpuSlicePhase::Deleting,
            format!("{what}: {message}"),
        )),
        CleanupStep::Done => Plan::report(Assessment::new(
            Progress::Stalled,
            reason,
            TpuSlicePhase::Failed,
            format!("{what}: the slice was deleted; {fix}"),
        )),
    }
}

/// Neither the current node nor its queued resource exists.
fn plan_absent(input: &Input<'_>, create: Action) -> Plan {
    use TpuSlicePhase as P;
    if input.names.adopted {
        return Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::NOT_FOUND,
            P::Failed,
            format!(
                "node {} named by spec.adoptNodeId does not exist",
                input.names.current.node
            ),
        ));
    }
    let observed = input.observed;
    if let Some(prev) = &observed.previous_queued {
        return previous_step(
            is_qr_deleting(prev),
            Action::DeleteQueuedResource(prev.name.clone()),
        );
    }
    if let Some(prev) = &observed.previous_node {
        return previous_step(
            prev.state == node::State::Deleting,
            Action::DeleteNode(prev.name.clone()),
        );
    }
    match &observed.operation {
        Some(OperationView::Running) => {
            return Plan::report(Assessment::new(
                Progress::Reconciling,
                reasons::CREATING,
                P::Provisioning,
                "create operation in progress",
            ));
        }
        Some(OperationView::Failed(err)) => {
            if let Some(a) = on_create_error(err) {
                // A quota failure is Stalled but still retried (slowly): a raised quota needs
                // no change to the object.
                let retry = a.progress == Progress::Reconciling || a.reason == reasons::QUOTA_EXCEEDED;
                return Plan::new(if retry { create } else { Action::Nothing }, a);
            }
        }
        Some(OperationView::Succeeded | OperationView::Gone | OperationView::Unread) | None => {}
    }
    let (phase, message) = match create {
        Action::CreateQueuedResource => (P::Queued, "requesting a queued resource"),
        _ => (P::Provisioning, "creating the TPU node"),
    };
    let phase = if input.recreations > 0 {
        P::Recreating
    } else {
        phase
    };
    Plan::new(
        create,
        Assessment::new(Progress::Reconciling, reasons::CREATING, phase, message),
    )
}

/// A recreation waits for the previous incarnation to be deleted before creating the next one,
/// so that one slice never holds two cloud objects.
fn previous_step(deleting: bool, delete: Action) -> Plan {
    let a = Assessment::new(
        Progress::Reconciling,
        reasons::RECREATING,
        TpuSlicePhase::Recreating,
        "deleting the preempted incarnation before recreating the slice",
    );
    Plan::new(if deleting { Action::Nothing } else { delete }, a)
}

fn is_qr_deleting(qr: &QueuedResource) -> bool {
    matches!(
        qr.state.as_ref().map(|s| &s.state),
        Some(queued_resource_state::State::Deleting)
    )
}

/// A patch or start refused because another operation runs on the node (issue 21 item 8): the
/// TPU API answers 409 (ABORTED; FAILED_PRECONDITION is taken the same way, since which one is
/// not documented) and gcloud retries. Not a failure: the plan stands and is tried again at
/// `poll_active`, without the error backoff (a permission or spec problem would not clear so).
pub fn node_busy(action: &Action, err: &GcpError) -> bool {
    action.updates_node()
        && (err.status == Some("ABORTED")
            || err.kind == ErrorKind::FailedPrecondition
            || (err.http_status == Some(409) && err.kind != ErrorKind::AlreadyExists))
}

/// How a failed cloud call is reported. `None`: transient, return the error (backoff).
pub fn on_action_error(action: &Action, err: &GcpError) -> Option<Assessment> {
    match action {
        Action::CreateNode | Action::CreateQueuedResource => on_create_error(err),
        _ => match err.kind {
            ErrorKind::PermissionDenied | ErrorKind::Unauthenticated => Some(Assessment::new(
                Progress::Stalled,
                reasons::PERMISSION_DENIED,
                TpuSlicePhase::Degraded,
                err.to_string(),
            )),
            _ => None,
        },
    }
}

/// How a failed create (call or operation) is reported. `None`: transient, retry with backoff.
pub fn on_create_error(err: &GcpError) -> Option<Assessment> {
    use TpuSlicePhase as P;
    let stalled = |reason| {
        Some(Assessment::new(
            Progress::Stalled,
            reason,
            P::Failed,
            err.to_string(),
        ))
    };
    match err.kind {
        // An exhausted project quota does not clear by itself: say so (Stalled, a Warning event)
        // and retry only slowly (`poll_stable`, and the permanent-error backoff for a refused
        // call), so the slice starts on its own once somebody raises the quota.
        ErrorKind::ResourceExhausted if err.exhaustion() == Some(Exhaustion::Quota) => Some(
            Assessment::new(
                Progress::Stalled,
                reasons::QUOTA_EXCEEDED,
                P::Provisioning,
                format!(
                    "the project's TPU quota{} is exhausted: request a quota increase (or free quota); the create is retried every few minutes: {err}",
                    err.quota_metric()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                ),
            )
            .capacity(false),
        ),
        ErrorKind::ResourceExhausted if !err.is_rate_limited() => Some(
            Assessment::new(
                Progress::Reconciling,
                reasons::WAITING_FOR_CAPACITY,
                P::Provisioning,
                match err.exhaustion() {
                    Some(Exhaustion::Stockout) => format!("no TPU capacity in the zone right now (stockout); retrying: {err}"),
                    _ => format!("no TPU capacity right now (stockout, or a quota the error does not name); retrying: {err}"),
                },
            )
            .requeue(Requeue::Capacity)
            .capacity(false),
        ),
        ErrorKind::AlreadyExists => Some(Assessment::new(
            Progress::Reconciling,
            reasons::CREATING,
            P::Provisioning,
            "the object already exists (an earlier create): adopting it",
        )),
        ErrorKind::PermissionDenied | ErrorKind::Unauthenticated => stalled(reasons::PERMISSION_DENIED),
        ErrorKind::InvalidArgument | ErrorKind::FailedPrecondition => stalled(reasons::INVALID_SPEC),
        ErrorKind::ResourceExhausted
        | ErrorKind::Transient
        | ErrorKind::NotFound
        | ErrorKind::Cancelled
        | ErrorKind::Unreadable
        | ErrorKind::Other => None,
    }
}

/// What deletion does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupStep {
    /// Issue this delete.
    Delete(Action),
    /// A delete is in progress.
    Wait(String),
    /// Nothing is left in the cloud.
    Done,
}

/// Deletion: the queued resource first (force: its nodes go with it), then a node; each must be
/// gone before the finalizer is dropped.
pub fn plan_cleanup(observed: &Observed) -> CleanupStep {
    let qrs = [&observed.queued, &observed.previous_queued];
    if let Some(qr) = qrs.into_iter().flatten().next() {
        return if is_qr_deleting(qr) {
            CleanupStep::Wait(format!("queued resource {} is being deleted", qr.name))
        } else {
            CleanupStep::Delete(Action::DeleteQueuedResource(qr.name.clone()))
        };
    }
    match [&observed.node, &observed.previous_node]
        .into_iter()
        .flatten()
        .next()
    {
        Some(n) if n.state == node::State::Deleting => {
            CleanupStep::Wait(format!("node {} is being deleted", n.name))
        }
        Some(n) => CleanupStep::Delete(Action::DeleteNode(n.name.clone())),
        None => CleanupStep::Done,
    }
}
