//! The training stage in Vertex mode: one Vertex custom job per attempt, followed from queued to
//! its end. A success waits for the model under `artifacts.modelDir`; a preemption or an expired
//! capacity wait is retried without counting, a failure as the retry policy says.

use tpu_operator_api::{
    conditions::reasons,
    training_pipeline::{StageName, StageState, TrainingPipelinePhase as Phase},
};
use tpu_operator_gcp::aiplatform_v1::model::JobState;

use super::{
    Action, JobView, Planner, Requeue, Step, join_uri, status::time, training::MAX_UNCOUNTED_PREEMPTIONS,
};

impl Planner<'_> {
    pub(super) fn vertex(&mut self, job: Option<&JobView>) -> Step {
        let Some(job) = job else {
            return self.start_attempt(self.record.attempts + 1, true, None);
        };
        self.record_job(job);
        let attempt = job.attempt;
        match job.state {
            JobState::Queued | JobState::Pending => {
                self.train_stage_state(StageState::Queued);
                Step::working(
                    Phase::Provisioning,
                    reasons::QUEUED,
                    format!(
                        "custom job {} (attempt {attempt}) waits for TPU capacity",
                        job.name
                    ),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            JobState::Running | JobState::Updating | JobState::Paused => {
                self.train_stage_state(StageState::Running);
                Step::working(
                    Phase::Training,
                    reasons::RUNNING,
                    format!(
                        "custom job {} (attempt {attempt}) is {}",
                        job.name,
                        job_state_name(&job.state)
                    ),
                    Action::Nothing,
                    Requeue::Active,
                )
            }
            JobState::Succeeded | JobState::PartiallySucceeded => self.job_succeeded(job),
            JobState::Failed | JobState::Expired | JobState::Cancelling | JobState::Cancelled => {
                self.job_ended(job)
            }
            // Unspecified and states newer than this client: keep polling.
            _ => Step::working(
                Phase::Training,
                reasons::RUNNING,
                format!(
                    "custom job {} is in state {}",
                    job.name,
                    job_state_name(&job.state)
                ),
                Action::Nothing,
                Requeue::Active,
            ),
        }
    }

    /// The observed job is this attempt's: its name and attempt number go to status, and the
    /// train stage has started.
    fn record_job(&mut self, job: &JobView) {
        let now = time(self.input.now);
        self.record.attempts = self.record.attempts.max(job.attempt);
        self.record.custom_job_name = Some(job.name.clone());
        let stage = self.record.stage_mut(StageName::Train);
        stage.gcp_name = Some(job.name.clone());
        stage.attempts = stage.attempts.max(1);
        stage.start_time.get_or_insert(now);
    }

    fn train_stage_state(&mut self, state: StageState) {
        self.record.stage_mut(StageName::Train).state = state;
    }

    /// A succeeded job is done once its model is seen under `artifacts.modelDir`.
    fn job_succeeded(&mut self, job: &JobView) -> Step {
        let model = join_uri(&self.spec().artifacts.model_dir, "model/");
        match job.model_exists {
            Some(true) => self.finish_succeeded(model),
            Some(false) => {
                self.train_stage_state(StageState::Failed);
                let msg = format!(
                    "custom job {} succeeded but wrote no model under {model}",
                    job.name
                );
                self.finish_failed(reasons::OUTPUT_MISSING, msg, Action::Nothing)
            }
            None => Step::working(
                Phase::Training,
                reasons::SUCCEEDED,
                "verifying the model output".into(),
                Action::Nothing,
                Requeue::Active,
            ),
        }
    }

    /// A job that ended without success: preempted or expired (a new attempt that does not count),
    /// failed (a retry, if any are left) or cancelled by someone else (the pipeline fails).
    fn job_ended(&mut self, job: &JobView) -> Step {
        let attempt = job.attempt;
        match job.state {
            JobState::Failed if job.preempted && self.uncounted_attempts() < MAX_UNCOUNTED_PREEMPTIONS => {
                // Like a preempted TpuSlice: a new job, not a spent retry.
                let detail = format!(
                    "custom job {} (attempt {attempt}) lost its Spot VMs (preempted): {}; not counted against maxRetries",
                    job.name, job.message
                );
                let note = (true, reasons::PREEMPTED, detail.clone());
                let before = self.record.attempts;
                let step = self.retry(attempt + 1, false, detail, note);
                // Counted apart from retries, as a TPU VM slice's preemptions are, once: when
                // the new attempt starts (a suspended pipeline sees the same job again).
                if self.record.attempts > before {
                    let stage = self.record.stage_mut(StageName::Train);
                    stage
                        .interruptions
                        .get_or_insert_with(Default::default)
                        .preemptions += 1;
                }
                step
            }
            JobState::Failed => {
                let detail = format!(
                    "custom job {} (attempt {attempt}) failed: {}",
                    job.name, job.message
                );
                self.failed_as_the_policy_says(
                    detail,
                    job.exit_code,
                    Action::CreateJob { attempt: attempt + 1 },
                )
            }
            JobState::Cancelling | JobState::Cancelled if let Some(by) = self.stopped_by(attempt) => {
                self.after_stopped_job(job, by)
            }
            JobState::Expired => {
                let detail = format!(
                    "custom job {} (attempt {attempt}) expired waiting for capacity; not counted as a failure",
                    job.name
                );
                self.start_attempt(attempt + 1, false, Some(detail))
            }
            _ => {
                self.train_stage_state(StageState::Cancelled);
                let msg = format!("custom job {} was cancelled outside the operator", job.name);
                self.finish_failed(reasons::CANCELLED, msg, Action::Nothing)
            }
        }
    }
}

fn job_state_name(state: &JobState) -> &str {
    state.name().unwrap_or("JOB_STATE_UNKNOWN")
}
