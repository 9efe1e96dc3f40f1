//! Stage 1: the owned `PreprocessBatch`, created, waited on, and judged.

use tpu_operator_api::{
    conditions::reasons,
    training_pipeline::{PipelineOutputs, StageName, StageState, TrainingPipelinePhase as Phase},
};

use super::{Action, CHILD_NOT_OWNED, Child, PREPROCESS_FAILED, Planner, Requeue, Step, held, status::time};

impl Planner<'_> {
    /// Stage 1. `None` when it succeeded now and training may start in this same pass.
    pub(super) fn preprocess(&mut self) -> Option<Step> {
        let name = self.input.preprocess_child;
        let observed = self.input.observed;
        self.record.current_stage = Some(StageName::Preprocess);
        let stage = self.record.stage_mut(StageName::Preprocess);
        stage.resource_name = Some(name.to_string());
        // Re-run after a failed preprocessing: the stage was reset, the old batch is still there.
        let earlier_run = stage.state == StageState::Pending && stage.attempts > 0;
        let step = match &observed.preprocess {
            Child::Absent => self.create_preprocess(name),
            Child::NotOwned => {
                let msg = format!("PreprocessBatch {name} exists and is not owned by this pipeline");
                self.finish_failed(CHILD_NOT_OWNED, msg, Action::Nothing)
            }
            Child::Stalled { .. } | Child::Ready { .. } if earlier_run => Step::working(
                Phase::Preprocessing,
                reasons::DELETING,
                format!("deleting PreprocessBatch {name} of the earlier run before running it again"),
                Action::DeletePreprocess,
                Requeue::Active,
            ),
            Child::Deleting => Step::working(
                Phase::Preprocessing,
                reasons::DELETING,
                format!("waiting for PreprocessBatch {name} to finish deleting"),
                Action::Nothing,
                Requeue::Active,
            ),
            Child::Progressing { reason, message } => self.preprocessing(name, reason, message),
            Child::Ready { message } => {
                self.preprocess_succeeded(name, message);
                return None;
            }
            Child::Stalled { reason, message } => self.preprocess_failed(name, reason, message),
        };
        Some(step)
    }

    /// No batch yet: create it (an attempt, unless one is already running). Nothing of a batch
    /// not created is recorded, so while suspended (by the spec or a budget) it is only held.
    fn create_preprocess(&mut self, name: &str) -> Step {
        if self.spec().suspend {
            return held(&format!("PreprocessBatch {name}"), None);
        }
        if let Some(hold) = self.budget_holds().cloned() {
            return self.held_by_budget(&hold, &format!("PreprocessBatch {name}"));
        }
        let now = time(self.input.now);
        let stage = self.record.stage_mut(StageName::Preprocess);
        if stage.state != StageState::Running {
            stage.attempts += 1;
        }
        stage.state = StageState::Running;
        stage.start_time.get_or_insert(now);
        Step::working(
            Phase::Preprocessing,
            reasons::CREATING,
            format!("creating PreprocessBatch {name}"),
            Action::CreatePreprocess,
            Requeue::Active,
        )
    }

    /// The batch is still working: its reason and message are the stage's.
    fn preprocessing(&mut self, name: &str, reason: &str, message: &str) -> Step {
        let stage = self.record.stage_mut(StageName::Preprocess);
        stage.state = StageState::Running;
        stage.message = Some(format!("{reason}: {message}"));
        Step::working(
            Phase::Preprocessing,
            reasons::RUNNING,
            format!("preprocessing ({name}): {message}"),
            Action::Nothing,
            Requeue::Stable,
        )
    }

    /// The batch succeeded: the stage ends and the processed data becomes an output.
    fn preprocess_succeeded(&mut self, name: &str, message: &str) {
        let stage = self.record.stage_mut(StageName::Preprocess);
        stage.state = StageState::Succeeded;
        stage.end_time = Some(time(self.input.now));
        stage.message = Some(message.to_string());
        let processed = self.spec().artifacts.processed_data.clone();
        self.record
            .outputs
            .get_or_insert_with(PipelineOutputs::default)
            .processed_data = processed;
        self.event(
            false,
            "PreprocessSucceeded",
            format!("PreprocessBatch {name} succeeded"),
        );
    }

    /// The batch stalled: the stage and the pipeline fail.
    fn preprocess_failed(&mut self, name: &str, reason: &str, message: &str) -> Step {
        let stage = self.record.stage_mut(StageName::Preprocess);
        stage.state = StageState::Failed;
        stage.end_time = Some(time(self.input.now));
        stage.message = Some(format!("{reason}: {message}"));
        let msg = format!("preprocessing failed (PreprocessBatch {name}, {reason}): {message}");
        self.finish_failed(PREPROCESS_FAILED, msg, Action::Nothing)
    }
}
