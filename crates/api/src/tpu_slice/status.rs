//! Observed state of a slice.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{CostEstimate, Links},
    training_pipeline::TimePart,
};

/// Lifecycle phase of a slice (for printer columns; conditions carry the detail).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TpuSlicePhase {
    /// Not reconciled yet.
    #[default]
    Pending,
    /// A queued resource waits for capacity.
    Queued,
    /// Waits for capacity (a stockout), a project quota, or the namespace's TpuPolicy limits:
    /// the Reason column (the Ready condition's reason) says which. A Warning Event is published
    /// when the wait starts and a Normal `WaitEnded` when it ends.
    Waiting,
    /// The node is being created.
    Provisioning,
    /// The node is READY and healthy.
    Ready,
    /// The node is up but unhealthy, repairing or restarting.
    Degraded,
    /// The node was preempted.
    Preempted,
    /// The preempted node is being replaced.
    Recreating,
    /// Terminal failure (see the Stalled condition).
    Failed,
    /// Cloud resources are being deleted.
    Deleting,
    /// `spec.suspend` is true and the node is gone: nothing bills.
    Suspended,
}

impl TpuSlicePhase {
    /// The part of `status.timeSpent` a slice in this phase spends its time in; `None` once it
    /// failed (the clock stops). `Deleting` is a node being deleted while the slice lives on
    /// (to replace it after a preemption, or for a suspension, a Kueue eviction or a move on the
    /// capacity plan): it bills and does not train, as provisioning. A deleted slice's status
    /// is not accounted any more.
    pub fn time_part(self) -> Option<TimePart> {
        use TpuSlicePhase as P;
        match self {
            P::Pending | P::Queued | P::Waiting => Some(TimePart::Queued),
            P::Provisioning | P::Degraded | P::Preempted | P::Recreating | P::Deleting => {
                Some(TimePart::Provisioning)
            }
            P::Ready => Some(TimePart::Productive),
            P::Suspended => Some(TimePart::Suspended),
            P::Failed => None,
        }
    }
}

/// Observed state of a slice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TpuSliceStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: TpuSlicePhase,
    /// Ready / Reconciling / Stalled plus CapacityAvailable, NodeHealthy, SpecDrift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The zone the slice asks for capacity in, or runs in: `spec.zone`, or with a
    /// `capacityPlan` the zone of the rung in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Where the slice stands on `spec.capacityPlan`: the rung and zone asked now, and every
    /// rung and zone tried with its outcome, reason and times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_plan: Option<super::CapacityPlanStatus>,
    /// Full name of the TPU node, `projects/<p>/locations/<zone>/nodes/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The node's id, the last segment of `nodeName`: what gcloud takes with the slice's
    /// `spec.zone`, as in `gcloud compute tpus tpu-vm ssh NODE_ID --zone ZONE` (on Compute
    /// Engine, the instance or MIG name). Set whenever `nodeName` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Full name of the queued resource, when capacity is queued or reserved (both go through one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_resource_name: Option<String>,
    /// Long-running operation in flight (create / delete), polled on every reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_operation: Option<String>,
    /// Node state as GCP reports it (CREATING, READY, PREEMPTED, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_state: Option<String>,
    /// Node health as GCP reports it (HEALTHY, TIMEOUT, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Queued resource state (ACCEPTED, WAITING_FOR_RESOURCES, ACTIVE, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_resource_state: Option<String>,
    /// Accelerator type in effect (normalized from `acceleratorType` or `acceleratorConfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
    /// TPU chips in the slice (all slices of a multislice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<i32>,
    /// TPU VM hosts (workers) in the slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<i32>,
    /// Internal IP address of each worker (of slice 0 for a multislice).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_ips: Vec<String>,
    /// Multislice only: the state of each slice's node, by slice id (`[READY, CREATING]`; `-`
    /// for a node not there). `chips` and `hosts` count all slices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_states: Vec<String>,
    /// When the current node was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_time: Option<Time>,
    /// When the current node first became READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_time: Option<Time>,
    /// When the last preemption was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_preemption_time: Option<Time>,
    /// When the workload last ended (its completion marker's time; `idleTimeout` counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_time: Option<Time>,
    /// How many times the slice was recreated after a preemption.
    #[serde(default)]
    pub recreations: i32,
    /// How many times a maintenance interrupted the slice's node (counted apart from
    /// `recreations`: it spends no `spec.preemption.maxRecreations`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub maintenance_restarts: i32,
    /// Multislice: how many times each slice (by slice id) was lost and replaced alone, counted
    /// apart from `recreations` (a whole-run recreation) and against
    /// `spec.multislice.maxSliceRestarts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slice_restarts: Vec<i32>,
    /// Multislice: the slices whose loss is counted and whose replacement has not been asked for
    /// yet (their lost queued resource is being deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacing_slices: Vec<i32>,
    /// The maintenance Google announced for the slice's node: announced, under way, or (`Ended`)
    /// the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<super::MaintenanceStatus>,
    /// How many times `spec.suspend` (or Kueue, evicting the slice) deleted the node. With
    /// `recreations` it numbers the incarnation (the node's id, the create's request id), so a
    /// resumed slice is a new node.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspensions: i32,
    /// Kueue's view of the slice, when it is queued through Kueue (the `kueue.x-k8s.io/queue-name`
    /// label, with Kueue enabled in the operator): its Workload, queue, position, admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<crate::kueue::KueueStatus>,
    /// Where the slice's wall time and estimated dollars went: queued, provisioning (a node
    /// being created, repaired or replaced after a preemption), productive (the node Ready),
    /// suspended, and failed (a slice that ended `Failed`). A slice does not know its
    /// workload's steps: `lostToInterruptions` stays 0 here (a `TrainingPipeline`'s own
    /// `timeSpent` has it) and `preprocessing` does not apply (docs/cost-model.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_spent: Option<crate::training_pipeline::TimeSpent>,
    /// Estimated cost so far and burn rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<CostEstimate>,
    /// The node's Cloud Console page and the Logs Explorer query of the workload's logs (all
    /// hosts and recreations; a slice with its own `startupScript`: the TPU VM hosts' logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Links>,
    /// Human-readable summary of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fields a newer release wrote that this one does not know ([`crate::common::NewerFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub newer_fields: crate::common::NewerFields,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl TpuSliceStatus {
    /// The incarnation this status runs: one more per preemption, per suspension and per move
    /// on the capacity plan (the node's id and its create's request id follow it).
    pub fn incarnation(&self) -> u32 {
        let moves = self.capacity_plan.as_ref().map_or(0, |p| p.moves.max(0));
        (self.recreations.max(0) + self.suspensions.max(0) + moves) as u32
    }

    /// How many times the slice moved along its capacity plan.
    pub fn plan_moves(&self) -> i32 {
        self.capacity_plan.as_ref().map_or(0, |p| p.moves)
    }

    /// The capacity plan's rung and zone asked now (`None`: no plan, or not started).
    pub fn plan_place(&self) -> Option<super::PlanPlace> {
        self.capacity_plan.as_ref().map(super::CapacityPlanStatus::place)
    }

    /// The incarnation before the current one was left by a move along the capacity plan (not
    /// lost to a preemption or a suspension): the attempt before the last one moved on.
    pub fn left_by_a_move(&self) -> bool {
        self.capacity_plan
            .as_ref()
            .and_then(|p| p.attempts.iter().rev().nth(1))
            .is_some_and(|a| a.outcome == super::AttemptOutcome::MovedOn)
    }

    /// What the slice has cost so far, in US dollars (0 before any estimate).
    pub fn spent_usd(&self) -> f64 {
        self.estimated_cost.as_ref().map_or(0.0, |c| c.so_far_usd)
    }
}
