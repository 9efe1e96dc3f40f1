//! The pipeline status's stage entries, the conditions derived from them and from the
//! pipeline's progress, and what the accounting of `timeSpent` reads of a status: what every
//! reader of a `TrainingPipelineStatus` shares (the controller's plan and report, its observe and
//! links), beside the type.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    Interruptions, StageKind, StageName, StageState, StageStatus, TimePart, TrainingMode,
    TrainingPipelinePhase, TrainingPipelineStatus,
};
use crate::conditions::{self, Progress, condition, reasons, set_condition, types};

/// A stage entry never created: Pending, nothing known of it.
const NO_STAGE: StageStatus = StageStatus {
    name: StageName::Train,
    kind: StageKind::VertexCustomJob,
    resource_name: None,
    gcp_name: None,
    state: StageState::Pending,
    start_time: None,
    end_time: None,
    attempts: 0,
    capacity: None,
    interruptions: None,
    message: None,
    links: None,
};

impl StageStatus {
    /// Inserts the stage entry `name` into `stages` if missing (its kind follows the training
    /// mode). Shared by the status and by whatever else keeps a pipeline's stage list (the
    /// controller's plan record).
    pub fn ensure(stages: &mut Vec<StageStatus>, name: StageName, mode: TrainingMode, initial: StageState) {
        let kind = match name {
            StageName::Preprocess => StageKind::PreprocessBatch,
            StageName::Train => mode.stage_kind(),
        };
        if !stages.iter().any(|s| s.name == name) {
            stages.push(StageStatus {
                name,
                kind,
                state: initial,
                ..NO_STAGE
            });
        }
    }

    /// The stage entry `name` of `stages` (a pending placeholder when it was never created).
    pub fn find(stages: &[StageStatus], name: StageName) -> &StageStatus {
        stages.iter().find(|s| s.name == name).unwrap_or(&NO_STAGE)
    }

    /// The stage entry `name` of `stages`, created as Pending if missing.
    pub fn find_mut(stages: &mut Vec<StageStatus>, name: StageName) -> &mut StageStatus {
        let pos = match stages.iter().position(|s| s.name == name) {
            Some(pos) => pos,
            None => {
                stages.push(StageStatus { name, ..NO_STAGE });
                stages.len() - 1
            }
        };
        &mut stages[pos]
    }
}

impl TrainingPipelineStatus {
    /// Inserts the stage entry if missing (its kind follows the training mode).
    pub fn ensure_stage(&mut self, name: StageName, mode: TrainingMode, initial: StageState) {
        StageStatus::ensure(&mut self.stages, name, mode, initial);
    }

    /// The stage entry (a pending placeholder when it was never created).
    pub fn stage(&self, name: StageName) -> &StageStatus {
        StageStatus::find(&self.stages, name)
    }

    /// The stage entry, created as Pending if missing.
    pub fn stage_mut(&mut self, name: StageName) -> &mut StageStatus {
        StageStatus::find_mut(&mut self.stages, name)
    }

    /// The kstatus conditions (`Ready`, `Reconciling`, `Stalled`) for `progress`, at the
    /// status's observed generation.
    pub fn set_kstatus(&mut self, progress: Progress, reason: &str, message: &str, now: Time) {
        let generation = self.observed_generation;
        conditions::set_kstatus(&mut self.conditions, progress, reason, message, generation, now);
    }

    /// `Preprocessed`, `Trained`, `OutputVerified` and `Suspended`, derived from the stage entries
    /// (`suspended`: the spec's `suspend`).
    pub fn set_stage_conditions(&mut self, suspended: bool, now: Time) {
        let generation = self.observed_generation;
        let (pre_ok, pre_reason) = preprocessed(self.stage(StageName::Preprocess).state);
        let (train_ok, train_reason) = trained(self.stage(StageName::Train).state);
        let model = self.outputs.as_ref().and_then(|o| o.model_uri.clone());
        let (out_reason, out_msg) = match &model {
            Some(uri) => (reasons::OUTPUT_FOUND, format!("model found at {uri}")),
            None => (
                reasons::PENDING,
                "training has not produced a model yet".to_string(),
            ),
        };
        let (susp_reason, susp_msg) = if suspended {
            (reasons::SUSPENDED, "spec.suspend is true")
        } else {
            (reasons::PENDING, "spec.suspend is false")
        };
        let cond = |type_: &str, ok: bool, reason: &str, message: &str| {
            condition(type_, ok, reason, message, generation, now.clone())
        };
        for c in [
            cond(types::PREPROCESSED, pre_ok, pre_reason, ""),
            cond(types::TRAINED, train_ok, train_reason, ""),
            cond(types::OUTPUT_VERIFIED, model.is_some(), out_reason, &out_msg),
            cond(types::SUSPENDED, suspended, susp_reason, susp_msg),
        ] {
            set_condition(&mut self.conditions, c);
        }
    }
}

/// `Preprocessed`'s status and reason for the Preprocess stage's state (skipped counts as done).
fn preprocessed(state: StageState) -> (bool, &'static str) {
    match state {
        StageState::Succeeded => (true, reasons::SUCCEEDED),
        StageState::Skipped => (true, reasons::SKIPPED),
        StageState::Failed => (false, reasons::FAILED),
        StageState::Running | StageState::Queued => (false, reasons::RUNNING),
        StageState::Pending => (false, reasons::PENDING),
        StageState::Cancelled => (false, reasons::CANCELLED),
    }
}

/// `Trained`'s status and reason for the Train stage's state.
fn trained(state: StageState) -> (bool, &'static str) {
    match state {
        StageState::Succeeded => (true, reasons::SUCCEEDED),
        StageState::Failed => (false, reasons::FAILED),
        StageState::Running => (false, reasons::RUNNING),
        StageState::Queued => (false, reasons::QUEUED),
        StageState::Pending | StageState::Skipped => (false, reasons::PENDING),
        StageState::Cancelled => (false, reasons::CANCELLED),
    }
}

/// What the accounting of `timeSpent` reads of a status (see [`super::TimeSpent::account`]).
impl TrainingPipelineStatus {
    /// Interruptions of the training slice so far.
    pub fn train_interruptions(&self) -> i32 {
        Interruptions::total(self.stage(StageName::Train).interruptions.as_ref())
    }

    /// Whether this status shows an interruption `old` did not.
    pub fn interrupted_since(&self, old: &TrainingPipelineStatus) -> bool {
        self.train_interruptions() > old.train_interruptions()
    }

    /// Whether this status (being built) or the training slice read this pass (`read`, which
    /// the status will show) has an interruption the stored status (`old`) does not.
    pub fn noticed_interruption(
        &self,
        old: Option<&TrainingPipelineStatus>,
        read: Option<&Interruptions>,
    ) -> bool {
        let stored = old.map_or(0, TrainingPipelineStatus::train_interruptions);
        Interruptions::total(read).max(self.train_interruptions()) > stored
    }

    /// The part of the run's time this status's phase and train stage name.
    pub fn time_part(&self) -> Option<TimePart> {
        TimePart::of(self.phase, self.stage(StageName::Train).state)
    }

    /// Whether, since `old`, a stage started another attempt after a failed one, or the run
    /// failed.
    pub fn attempt_failed_since(&self, old: &TrainingPipelineStatus) -> bool {
        let retried = |s: &StageStatus| {
            let before = old
                .stages
                .iter()
                .find(|o| o.name == s.name)
                .map_or(0, |o| o.attempts);
            before >= 1 && s.attempts > before
        };
        let failed =
            self.phase == TrainingPipelinePhase::Failed && old.phase != TrainingPipelinePhase::Failed;
        self.stages.iter().any(retried) || failed
    }

    /// The estimated spend so far, in US dollars.
    pub fn spent_usd(&self) -> f64 {
        self.estimated_cost.as_ref().map_or(0.0, |c| c.so_far_usd)
    }
}

impl Interruptions {
    /// Interruptions counted in `i` (preemptions, maintenance restarts, slices replaced alone).
    pub fn total(i: Option<&Interruptions>) -> i32 {
        i.map_or(0, |i| i.preemptions + i.maintenance_restarts + i.slice_restarts)
    }
}
