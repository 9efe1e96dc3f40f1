//! From (spec, observed cloud state, status, now) to one action and the slice's assessment.
//!
//! Does not touch Kubernetes or Google Cloud. Every TPU node state and queued-resource state is
//! matched explicitly (the generated enums are `#[non_exhaustive]`, so a last arm covers values
//! newer than the client library).

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    accelerator::SliceShape,
    conditions::{Progress, reasons},
    tpu_slice::{TpuSlicePhase, TpuSliceSpec},
};

use super::{
    observe::{Names, Observed, OperationView},
    spec::Desired,
};

mod absent;
mod cleanup;
mod drift;
mod errors;
mod kueue_gate;
mod multislice;
mod on_node;
mod paced;
mod queued;
mod reap;
mod slices;
mod withheld;

use absent::plan_absent;
use cleanup::is_qr_deleting;
pub use cleanup::{CleanupStep, deleting, plan_cleanup, plan_deletion};
pub use errors::{node_busy, on_action_error, on_create_error};
pub use paced::paced;
use reap::{flex_run_over, idle_timeout_exceeded, max_run_exceeded, suspended};
pub use slices::slice_restarts;
pub use withheld::withheld;

pub use super::spec::drift_mask;
use drift::immutable_drift;
use multislice::plan_multislice;
pub use on_node::{health_name, state_name};
use on_node::{plan_node, plan_preempted};
#[cfg(test)]
mod tests;

/// The one cloud call (or status-only step) of this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    CreateNode,
    CreateQueuedResource,
    /// Multislice, one queued resource per slice: `queuedResources.create` of slice `k`'s.
    CreateSliceQueuedResource(usize),
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
    /// `nodes.patch` of `node`'s metadata asking its workload for a checkpoint before an
    /// announced maintenance window: the whole map (a map in an update mask is replaced whole),
    /// as the node has it plus the request.
    RequestCheckpoint {
        node: String,
        metadata: std::collections::BTreeMap<String, String>,
    },
    /// `node`'s (full name) reschedulable maintenance starts now, right after the asked
    /// checkpoint was committed: through `queued` (full name) for a queued resource's node, and
    /// on each VM under notice on Compute Engine ([`super::early_start`]).
    PerformMaintenance {
        node: String,
        queued: Option<String>,
    },
    /// Status only: count a preemption (`recreations + 1`), which moves `current` to a new id.
    RecordPreemption,
    /// Status only: count the loss of multislice slice `k` (`sliceRestarts[k] + 1`) and mark it
    /// replaced, before its queued resource is deleted and asked for again.
    RecordSliceLoss(usize),
    /// Status only: count a suspension (`suspensions + 1`) once its node is gone, so the node
    /// created on resume has a new id and a create request id of its own. Also a stop for Kueue
    /// (evicted, or a node that ran without admission).
    RecordSuspension,
    /// Status only: the queued resource left on the capacity plan's previous rung was granted
    /// after the slice moved on (and before it was deleted): undo the move, so the slice runs on
    /// the capacity granted there instead of throwing it away. Nothing was created for the next
    /// rung (a create waits until the previous request is gone).
    ReturnToGranted,
    /// Kubernetes only: create the slice's Kueue Workload.
    CreateWorkload,
    /// Kubernetes only: release the evicted Workload's reservation (the node is gone).
    ReleaseWorkload,
    /// Kubernetes only: delete a Workload of the slice's name that is not the slice's.
    DeleteWorkload,
    /// Deletion, once every incarnation is gone: release what they shared (a Compute Engine
    /// group's instance template and policy; nothing on the TPU API). The backend says whether
    /// anything is still going.
    ReleaseShared,
}

impl Action {
    /// A create: what the namespace's policy admits and the create pacing and stockout memory
    /// count.
    pub fn creates(&self) -> bool {
        matches!(
            self,
            Action::CreateNode | Action::CreateQueuedResource | Action::CreateSliceQueuedResource(_)
        )
    }

    /// A patch or start of an existing node: what only a backend with node updates does.
    pub fn needs_node_updates(&self) -> bool {
        matches!(
            self,
            Action::PatchNode(_) | Action::StartNode | Action::PatchSliceNode { .. }
        )
    }

    /// A change to an existing node (one of [`Action::needs_node_updates`], a checkpoint
    /// request, or its maintenance started, which every backend does), which another operation
    /// running on the node can hold up.
    pub fn updates_node(&self) -> bool {
        self.needs_node_updates()
            || matches!(
                self,
                Action::RequestCheckpoint { .. } | Action::PerformMaintenance { .. }
            )
    }
}

pub use crate::runtime::requeue::Requeue;

/// What a slice's status says, as the reconcile pass shares it: phase, kstatus conditions and
/// when to look again.
pub type Verdict = crate::reconcile::plan::Verdict<TpuSlicePhase>;

/// One pass's plan: the action, the shared verdict and what only a slice reports.
pub type Plan = crate::reconcile::plan::Plan<Action, TpuSlicePhase, Details>;

/// What only a slice reports besides the verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    /// `CapacityAvailable` condition, when known.
    pub capacity: Option<bool>,
    /// An immutable field differs between the node and the spec (`SpecDrift`).
    pub drift: Option<String>,
    /// The failed create (call or operation) this pass reports, for the failure metric and the
    /// zone's stockout memory. A failed operation is read once (status forgets a finished
    /// operation), so act counts it once.
    pub failure: Option<tpu_operator_gcp::GcpError>,
}

/// A verdict and the slice's details without an action: what a failed create reports (in the
/// plan, or instead of the plan's once the call was refused), and what a create the process held
/// back reports. `act` returns it in its `Done`; status is built from it there.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub details: Details,
}

impl From<Verdict> for Outcome {
    fn from(verdict: Verdict) -> Self {
        Self {
            verdict,
            details: Details::default(),
        }
    }
}

impl Outcome {
    /// `verdict` with capacity known to be missing (`CapacityAvailable=False`).
    fn unavailable(verdict: Verdict) -> Self {
        let details = Details {
            capacity: Some(false),
            ..Details::default()
        };
        Self { verdict, details }
    }

    /// What `plan` reports.
    pub fn of(plan: &Plan) -> Self {
        Self {
            verdict: plan.verdict.clone(),
            details: plan.details.clone(),
        }
    }

    /// `action`, reporting this.
    fn plan(self, action: Action) -> Plan {
        Plan::new(action, self.verdict, self.details)
    }

    /// No call: only this is reported.
    fn report(self) -> Plan {
        self.plan(Action::Nothing)
    }
}

/// No call: only `verdict` is reported.
fn report(verdict: Verdict) -> Plan {
    doing(Action::Nothing, verdict)
}

/// `action`, reporting `verdict`.
fn doing(action: Action, verdict: Verdict) -> Plan {
    Plan::new(action, verdict, Details::default())
}

/// Prefixes the message `verdict` reports with `context` (which slice of a multislice).
fn prefix(verdict: &mut Verdict, context: std::fmt::Arguments<'_>) {
    if let Some(k) = verdict.kstatus.as_mut() {
        k.message = format!("{context}{}", k.message);
    }
}

/// Tests read what a verdict says through this: every slice verdict sets the kstatus conditions.
#[cfg(test)]
pub trait Said {
    fn said(&self) -> &crate::reconcile::plan::Kstatus;
}

#[cfg(test)]
impl Said for Verdict {
    fn said(&self) -> &crate::reconcile::plan::Kstatus {
        self.kstatus
            .as_ref()
            .expect("a slice's verdict sets the kstatus conditions")
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
    /// The status already says `Suspended` (its suspension was counted).
    pub suspended: bool,
    /// Kueue gates the slice: its Workload as read this pass.
    pub queue: Option<&'a super::queue::Queued>,
    /// A node was created for the current incarnation (`status.nodeName` or
    /// `status.queuedResourceName` is set): stopping it for Kueue is counted.
    pub ran_node: bool,
    /// The stop for Kueue is already counted (`status.kueue.stopped`).
    pub queue_stopped: bool,
    /// When the current incarnation first became READY (`status.readyTime`).
    pub ready_since: Option<DateTime<Utc>>,
    /// When the slice's workload last finished (`status.lastActiveTime`, or a completion marker
    /// seen this pass): where `spec.idleTimeout` counts from.
    pub last_active: Option<DateTime<Utc>>,
    /// This generation already ran out its flex-start run (status is Stalled with reason
    /// `MaxRunDurationExceeded`): nothing is created again.
    pub run_over: bool,
    /// Multislice: how often each slice was replaced alone (`status.sliceRestarts`).
    pub slice_restarts: &'a [i32],
    /// Multislice: the slices whose loss is counted and whose replacement is not asked yet.
    pub replacing: &'a [i32],
    /// The incarnation before the current one was left by a move along the capacity plan (not
    /// lost to a preemption or a suspension).
    pub spec_moved: bool,
    pub now: DateTime<Utc>,
}

impl Input<'_> {
    fn max_recreations(&self) -> i32 {
        self.spec.preemption.clone().unwrap_or_default().max_recreations
    }

    fn max_slice_restarts(&self) -> i32 {
        self.spec
            .multislice
            .as_ref()
            .map_or(0, tpu_operator_api::tpu_slice::Multislice::max_slice_restarts)
    }
}

/// The slice exists (not being deleted): create, wait, recreate, correct drift, or report.
pub fn plan(input: &Input<'_>) -> Plan {
    let mut plan = decide(input);
    // A backend without node updates (Compute Engine: labels and metadata are fixed at creation,
    // a stopped slice is not started; a checkpoint request and an early maintenance start are
    // their own) is never asked for one: the assessment stands and the slice is looked at
    // again as it says.
    if input.names.backend().updates().is_none() && plan.action.needs_node_updates() {
        plan.action = Action::Nothing;
    }
    plan
}

fn decide(input: &Input<'_>) -> Plan {
    if let Err(message) = input.shape {
        return report(Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reasons::INVALID_SPEC,
            message.to_string(),
        ));
    }
    if let Some(plan) = suspended(input)
        .or_else(|| kueue_gate::gated(input))
        .or_else(|| max_run_exceeded(input))
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
