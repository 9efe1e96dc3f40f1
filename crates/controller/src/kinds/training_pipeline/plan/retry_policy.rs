//! `spec.retryPolicy`: a failed training attempt treated as its exit code says.

use tpu_operator_api::training_pipeline::{RetryAction, StageName, StageState};

use super::{Action, Planner, Step, training::MAX_UNCOUNTED_PREEMPTIONS};

/// Reason of a run ended by a `spec.retryPolicy` rule with action `FailRun`.
pub const FAILED_BY_RETRY_POLICY: &str = "FailedByRetryPolicy";

impl Planner<'_> {
    /// A training attempt failed with `exit_code`: as the first `spec.retryPolicy` rule that
    /// matches says, the run fails now (`FailRun`), retries without spending `maxRetries`
    /// (`Ignore`, while uncounted attempts stay under [`MAX_UNCOUNTED_PREEMPTIONS`]) or counts.
    pub(super) fn failed_as_the_policy_says(
        &mut self,
        detail: String,
        exit_code: Option<i32>,
        before_retry: Action,
    ) -> Step {
        let decided = self.spec().retry_policy.as_ref().map(|p| p.decide(exit_code));
        let (Some((action, Some(rule))), Some(code)) = (decided, exit_code) else {
            return self.attempt_failed(detail, before_retry, true);
        };
        match action {
            RetryAction::FailRun => {
                let msg = format!(
                    "{detail}; exit code {code} matches spec.retryPolicy.rules[{}] (FailRun): not retried",
                    rule - 1
                );
                self.record.stage_mut(StageName::Train).state = StageState::Failed;
                let release = match before_retry {
                    Action::DeleteSlice => Action::DeleteSlice,
                    _ => Action::Nothing,
                };
                self.finish_failed(FAILED_BY_RETRY_POLICY, msg, release)
            }
            RetryAction::Ignore if self.uncounted_attempts() < MAX_UNCOUNTED_PREEMPTIONS => {
                let detail = format!(
                    "{detail}; exit code {code} matches spec.retryPolicy.rules[{}] (Ignore): retried without spending maxRetries",
                    rule - 1
                );
                self.attempt_failed(detail, before_retry, false)
            }
            RetryAction::Ignore | RetryAction::Count => self.attempt_failed(detail, before_retry, true),
        }
    }
}
