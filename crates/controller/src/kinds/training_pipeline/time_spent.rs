//! `status.timeSpent` brought up to date by each status write: what the pass tells
//! [`TimeSpent::account`](tpu_operator_api::training_pipeline::TimeSpent::account) (the api crate has the rules).

use chrono::{DateTime, Utc};
use tpu_operator_api::training_pipeline::{
    Interruptions, StageName, StageStatus, TimePart, TimeSpent, TimeStep, TrainingPipelinePhase as Phase,
    TrainingPipelineStatus,
};

use super::status::to_chrono;

/// Interruptions counted in `i` (preemptions, maintenance restarts, slices replaced alone).
fn count(i: Option<&Interruptions>) -> i32 {
    i.map_or(0, |i| i.preemptions + i.maintenance_restarts + i.slice_restarts)
}

/// Interruptions of the training slice so far.
fn interruptions(st: &TrainingPipelineStatus) -> i32 {
    count(st.stage(StageName::Train).interruptions.as_ref())
}

/// Whether `new` noticed an interruption `old` did not show.
fn interrupted(old: &TrainingPipelineStatus, new: &TrainingPipelineStatus) -> bool {
    interruptions(new) > interruptions(old)
}

/// Whether this pass noticed an interruption the stored status (`old`) does not show: in the
/// status being built (`new`: a Vertex job preempted) or in the training slice read this pass
/// (`read`, which the report copies into the status).
pub fn noticed(
    old: Option<&TrainingPipelineStatus>,
    new: &TrainingPipelineStatus,
    read: Option<&Interruptions>,
) -> bool {
    count(read).max(interruptions(new)) > old.map_or(0, interruptions)
}

fn part(st: &TrainingPipelineStatus) -> Option<TimePart> {
    TimePart::of(st.phase, st.stage(StageName::Train).state)
}

/// A stage started another attempt after a failed one, or the run failed.
fn attempt_failed(old: &TrainingPipelineStatus, new: &TrainingPipelineStatus) -> bool {
    let retried = |s: &StageStatus| {
        let before = old
            .stages
            .iter()
            .find(|o| o.name == s.name)
            .map_or(0, |o| o.attempts);
        before >= 1 && s.attempts > before
    };
    new.stages.iter().any(retried) || (new.phase == Phase::Failed && old.phase != Phase::Failed)
}

fn spent(st: &TrainingPipelineStatus) -> f64 {
    st.estimated_cost.as_ref().map_or(0.0, |c| c.so_far_usd)
}

/// `new.timeSpent` after the interval since `old` was written, when it is due
/// ([`TimeSpent::due`](tpu_operator_api::training_pipeline::TimeSpent::due)).
pub fn account(old: &TrainingPipelineStatus, new: &mut TrainingPipelineStatus, now: DateTime<Utc>) {
    // `new` still carries `old`'s `timeSpent`: equal means nothing else changed either.
    if !TimeSpent::due(
        old.time_spent.as_ref(),
        part(old),
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
        was: part(old),
        is: part(new),
        now_ms: now.timestamp_millis(),
        spent_usd: spent(new) - spent(old),
        interrupted: interrupted(old, new).then_some(checkpoint),
        attempt_failed: attempt_failed(old, new),
    };
    let before = old.time_spent.clone().unwrap_or_default();
    new.time_spent = Some(before.account(step));
}

#[cfg(test)]
mod tests {
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
