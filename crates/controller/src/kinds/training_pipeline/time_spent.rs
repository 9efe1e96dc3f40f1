//! `status.timeSpent` brought up to date by each status write: what the pass tells
//! [`TimeSpent::account`](tpu_operator_api::training_pipeline::TimeSpent::account) (the api crate has the rules).

use chrono::{DateTime, Utc};
use tpu_operator_api::training_pipeline::{TimeSpent, TimeStep, TrainingPipelineStatus};

use super::status::to_chrono;

/// `new.timeSpent` after the interval since `old` was written, when it is due
/// ([`TimeSpent::due`](tpu_operator_api::training_pipeline::TimeSpent::due)).
pub fn account(old: &TrainingPipelineStatus, new: &mut TrainingPipelineStatus, now: DateTime<Utc>) {
    // `new` still carries `old`'s `timeSpent`: equal means nothing else changed either.
    if !TimeSpent::due(
        old.time_spent.as_ref(),
        old.time_part(),
        new == old,
        now.timestamp_millis(),
    ) {
        return;
    }
    let checkpoint = new
        .checkpoint
        .as_ref()
        .and_then(|c| c.latest_time.as_ref())
        .map(to_chrono)
        .filter(|t| *t <= now)
        .map(|t| t.timestamp_millis());
    let step = TimeStep {
        was: old.time_part(),
        is: new.time_part(),
        now_ms: now.timestamp_millis(),
        spent_usd: new.spent_usd() - old.spent_usd(),
        interrupted: new.interrupted_since(old).then_some(checkpoint),
        attempt_failed: new.attempt_failed_since(old),
    };
    let before = old.time_spent.clone().unwrap_or_default();
    new.time_spent = Some(before.account(step));
}

#[cfg(test)]
mod tests {
    use tpu_operator_api::training_pipeline::TrainingPipelinePhase as Phase;

    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    /// A pass that changes nothing else leaves `timeSpent` alone for up to a minute (no status
    /// write), and the seconds it skipped are credited by the next update all the same.
    #[test]
    fn quiet_passes_are_coalesced_without_losing_a_second() {
        let mut first = TrainingPipelineStatus {
            phase: Phase::Waiting,
            ..Default::default()
        };
        account(&TrainingPipelineStatus::default(), &mut first, at(0));
        let mut quiet = first.clone();
        account(&first, &mut quiet, at(30));
        assert_eq!(quiet, first, "no write 30 s later");
        let mut still = first.clone();
        account(&first, &mut still, at(3600));
        assert_eq!(still, first, "a waiting run is not written for its seconds");
        let mut moved = first.clone();
        moved.phase = Phase::Provisioning;
        account(&first, &mut moved, at(5));
        let spent = |st: &TrainingPipelineStatus| st.time_spent.clone().unwrap();
        assert_eq!(spent(&moved).queued.seconds, 5, "a change of part");
        let mut soon = moved.clone();
        account(&moved, &mut soon, at(30));
        assert_eq!(soon, moved, "within the minute");
        let mut due = moved.clone();
        account(&moved, &mut due, at(66));
        assert_eq!(
            spent(&due).provisioning.seconds,
            61,
            "a part that bills, a minute on"
        );
    }
}
