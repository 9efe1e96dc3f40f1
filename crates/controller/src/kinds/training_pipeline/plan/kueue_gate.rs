//! The Kueue gate of a Vertex training stage (pure; a TPU VM stage is gated at its slice, see
//! `super::super::queue`). A pipeline Kueue gates creates no Vertex job before its Workload is
//! admitted ([`Planner::kueue_holds`], checked where an attempt would start, so a held attempt
//! records nothing); when Kueue evicts it, the job is cancelled as `spec.suspend` cancels it
//! (checkpoints kept), and only once the job has ended is the reservation released for Kueue to
//! give to another. The attempt that follows the re-admission resumes from `CHECKPOINT_DIR` and
//! spends no retry. The Workload exists while training may hold TPUs: it is written when training
//! is about to start and deleted once the run is over (finished, suspended) and nothing bills.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, TrainingPipelinePhase as Phase},
};

use super::{Action, Planner, Requeue, Step, TrainingObserved, is_finished, observed::job_ended};
use crate::kueue::{
    Gate,
    queued::{Queued, Write},
};

/// Event reason of a pipeline whose Workload Kueue admitted.
pub const ADMITTED: &str = "Admitted";

impl Planner<'_> {
    /// Whether Kueue holds the training stage back now: gated and not admitted.
    pub(super) fn kueue_holds(&self) -> bool {
        self.input.queue.is_some_and(|q| !q.gate.admitted())
    }

    /// The step a held attempt takes instead of creating `what` ([`Self::apply_kueue`] says
    /// what the pipeline waits for).
    pub(super) fn held_by_kueue(&self, what: &str) -> Step {
        Step::working(
            Phase::Waiting,
            reasons::QUEUED_IN_KUEUE,
            format!("{what} is created once Kueue admits the training stage"),
            Action::Nothing,
            Requeue::Capacity,
        )
    }

    /// The gate after the pass decided its step: `status.kueue`, the Workload written or
    /// deleted, and what bills stopped while Kueue does not admit the training stage.
    pub(super) fn apply_kueue(&mut self, step: Step) -> Step {
        let Some(queued) = self.input.queue else {
            return step;
        };
        self.note_kueue(queued);
        // Suspended (by its spec or a budget) frees the quota as an ended run does.
        let training = !is_finished(step.phase)
            && step.phase != Phase::Suspended
            && self.record.current_stage == Some(StageName::Train);
        if !training {
            // Over, suspended or still preprocessing: the quota is free once nothing bills.
            let idle = step.action == Action::Nothing && !self.training_bills();
            return match queued.found {
                Some(_) if idle => Step {
                    action: Action::Workload(Write::Delete),
                    ..step
                },
                _ => step,
            };
        }
        match queued.holding() {
            Some((reason, why)) => self.held_step(step, queued, reason, why),
            None => step,
        }
    }

    /// Kueue does not admit the training stage: stop what bills, wait until nothing does, then
    /// write the Workload (create, release, replace) and wait for the admission.
    fn held_step(&mut self, step: Step, queued: &Queued, reason: &'static str, why: String) -> Step {
        if let Some(stop) = self.stop_billing(super::suspend::BY_KUEUE) {
            let kueue = self.record.kueue.get_or_insert_with(Default::default);
            kueue.stopped = true;
            kueue.stopped_attempt = stop.attempt.or(kueue.stopped_attempt);
            return Step::working(
                Phase::Waiting,
                reason,
                format!(
                    "{why}; {}; checkpoints are kept and training resumes from them once Kueue admits it again",
                    stop.what
                ),
                stop.action,
                Requeue::Active,
            );
        }
        if self.training_bills() {
            return Step::working(
                Phase::Waiting,
                reason,
                format!("{why}; waiting for the custom job to stop"),
                keep_unless_creating(step.action),
                Requeue::Active,
            );
        }
        if let (Gate::Missing, Err(message)) = (&queued.gate, &queued.priority) {
            return Step {
                phase: Phase::Waiting,
                kstatus: Some((
                    Progress::Stalled,
                    reasons::PRIORITY_CLASS_NOT_FOUND,
                    message.clone(),
                )),
                action: Action::Nothing,
                requeue: Requeue::Capacity,
            };
        }
        let (action, message) = match (keep_unless_creating(step.action), workload_write(&queued.gate)) {
            (Action::Nothing, Some(Write::Create)) => (
                Action::Workload(Write::Create),
                format!(
                    "Workload {} created in Kueue LocalQueue {}; waiting for Kueue to admit it",
                    queued.workload, queued.local_queue
                ),
            ),
            (Action::Nothing, Some(Write::Release)) => (
                Action::Workload(Write::Release),
                format!("{why}; nothing bills now, quota released, waiting to be admitted again"),
            ),
            (Action::Nothing, Some(write)) => (Action::Workload(write), why),
            (action, _) => (action, why),
        };
        let requeue = if action == Action::Nothing {
            Requeue::Capacity
        } else {
            Requeue::Active
        };
        Step::working(Phase::Waiting, reason, message, action, requeue)
    }

    /// `status.kueue` from the Workload as read: evictions counted once each (admitted before,
    /// evicted now), `stopped` kept until the next admission.
    fn note_kueue(&mut self, queued: &Queued) {
        let before = self.record.kueue.clone().unwrap_or_default();
        let newly_evicted = matches!(queued.gate, Gate::Evicted { .. }) && before.admitted;
        if queued.gate.admitted() && !before.admitted {
            self.event(
                false,
                ADMITTED,
                format!(
                    "Kueue admitted Workload {} in ClusterQueue {}",
                    queued.workload,
                    queued.cluster_queue().unwrap_or_default()
                ),
            );
        }
        let stopped = before.stopped;
        self.record.kueue = Some(queued.status(before, newly_evicted, stopped));
    }

    /// Whether the Vertex job may still bill: not yet ended (a cancelling one included).
    pub(super) fn training_bills(&self) -> bool {
        match &self.input.observed.training {
            TrainingObserved::Vertex { job: Some(job) } => !job_ended(&job.state),
            // A TPU VM slice is its own Workload's to count.
            TrainingObserved::Vertex { job: None } | TrainingObserved::TpuVm { .. } => false,
        }
    }
}

/// The Workload write a held stage needs once nothing bills: its Workload created, a foreign
/// one deleted, an evicted one's reservation released; none while it is pending.
fn workload_write(gate: &Gate) -> Option<Write> {
    match gate {
        Gate::Missing => Some(Write::Create),
        Gate::Foreign { .. } => Some(Write::Delete),
        Gate::Evicted { .. } => Some(Write::Release),
        Gate::Pending { .. } | Gate::Admitted { .. } => None,
    }
}

/// The step's own action while Kueue holds the stage: anything but a create (releasing an old
/// slice, say) goes on; a create waits.
fn keep_unless_creating(action: Action) -> Action {
    if action.creates() { Action::Nothing } else { action }
}
