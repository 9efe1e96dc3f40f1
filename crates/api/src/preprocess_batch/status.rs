//! What a batch's status says about its attempts, and the changes to it that need nothing but
//! the status and plain values: kept beside the type, so the controller's status builders and
//! anything else reading a `PreprocessBatchStatus` (the CLI, the invariant checks) share one
//! meaning of "settled", "its only batch" and "a new attempt".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{PreprocessBatchPhase as Phase, PreprocessBatchStatus};
use crate::{
    common::Links,
    conditions::{Progress, set_kstatus},
};

impl Phase {
    /// Whether the status in this phase already says how the current attempt ended, so its
    /// batch need not be read again (and its usage is counted for the last time).
    pub fn attempt_settled(self) -> bool {
        match self {
            Phase::Retrying | Phase::Succeeded | Phase::Failed | Phase::Cancelled => true,
            Phase::Pending
            | Phase::Waiting
            | Phase::Submitted
            | Phase::Running
            | Phase::Cancelling
            | Phase::Deleting => false,
        }
    }
}

impl PreprocessBatchStatus {
    /// The batch a finished single-attempt object ran, when that is provably its only batch: a
    /// terminal phase is written only after the batch was seen finished, and a second attempt
    /// is created only from `Retrying`.
    pub fn only_batch(&self) -> Option<&str> {
        let finished = matches!(self.phase, Phase::Succeeded | Phase::Failed | Phase::Cancelled);
        (finished && self.attempts == 1 && self.pending_operation.is_none())
            .then_some(self.batch_name.as_deref())
            .flatten()
    }

    /// This status with the kstatus conditions `progress` for `reason` with `message` (their
    /// `lastTransitionTime` moves only on a real flip), nothing else changed.
    #[must_use]
    pub fn with_kstatus(
        mut self,
        progress: Progress,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        now: Time,
    ) -> Self {
        set_kstatus(&mut self.conditions, progress, reason, message, generation, now);
        self
    }

    /// This status stalled for `reason` with `message` (no Dataproc call was made): the phase as
    /// it was, or `Waiting` when the stall is a wait (`waits`: the caller's rule of which stalls
    /// are looked at again by themselves).
    #[must_use]
    pub fn stalled(
        &self,
        generation: Option<i64>,
        reason: &str,
        message: &str,
        waits: bool,
        now: Time,
    ) -> Self {
        let mut s = self.clone();
        s.observed_generation = generation;
        if waits {
            s.phase = Phase::Waiting;
        }
        s.message = Some(message.to_owned());
        s.with_kstatus(Progress::Stalled, reason, message, generation, now)
    }

    /// The batch of attempt `attempt` replaces the last one: that one's name joins the previous
    /// batches, and nothing read of it (state, output, end) stays. `links`: the new batch's.
    pub fn replace_batch(&mut self, attempt: u32, batch_name: &str, links: Option<Links>) {
        if let Some(previous) = self.batch_name.take()
            && previous != batch_name
            && !self.previous_batches.contains(&previous)
        {
            self.previous_batches.push(previous);
        }
        self.attempts = i32::try_from(attempt).unwrap_or(i32::MAX);
        self.batch_name = Some(batch_name.to_string());
        self.links = links;
        for field in [
            &mut self.batch_uuid,
            &mut self.batch_state,
            &mut self.state_message,
            &mut self.driver_output_uri,
        ] {
            *field = None;
        }
        self.completion_time = None;
        self.output_uri = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: Phase, attempts: i32) -> PreprocessBatchStatus {
        PreprocessBatchStatus {
            phase,
            attempts,
            batch_name: Some("projects/p/locations/r/batches/b-a1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_finished_single_attempt_names_its_only_batch() {
        let name = Some("projects/p/locations/r/batches/b-a1");
        assert_eq!(status(Phase::Succeeded, 1).only_batch(), name);
        assert_eq!(status(Phase::Cancelled, 1).only_batch(), name);
        assert_eq!(status(Phase::Failed, 2).only_batch(), None);
        assert_eq!(status(Phase::Running, 1).only_batch(), None);
        let mut cancelling = status(Phase::Failed, 1);
        cancelling.pending_operation = Some("op".into());
        assert_eq!(cancelling.only_batch(), None);
    }

    #[test]
    fn a_new_attempt_keeps_the_last_batch_name_and_forgets_what_was_read_of_it() {
        let mut s = status(Phase::Retrying, 1);
        s.batch_state = Some("FAILED".into());
        s.output_uri = Some("gs://b/out/".into());
        s.replace_batch(2, "projects/p/locations/r/batches/b-a2", None);
        assert_eq!(s.previous_batches, vec!["projects/p/locations/r/batches/b-a1"]);
        assert_eq!(
            s.batch_name.as_deref(),
            Some("projects/p/locations/r/batches/b-a2")
        );
        assert_eq!((s.attempts, s.batch_state, s.output_uri), (2, None, None));
    }
}
