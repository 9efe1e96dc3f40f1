//! A slice's `status.timeSpent`, brought up to date by each status write: the pipeline's rules
//! ([`TimeSpent::account`]), with the slice's phases as the parts. A slice does not know its
//! workload's steps or checkpoints, so no interruption moves time to `lostToInterruptions`: the
//! node being replaced counts as provisioning.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    tpu_slice::{TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{TimeSpent, TimeStep},
};

/// `new.timeSpent` after the interval since `old` was written, when it is due
/// ([`TimeSpent::due`]). `new` carries `old`'s `timeSpent` on entry. `deleted`: the slice
/// itself is being deleted, which stops the clock as a pipeline's deletion does (its node
/// being deleted then is not the slice's run).
pub fn account(old: &TpuSliceStatus, new: &mut TpuSliceStatus, deleted: bool, now: DateTime<Utc>) {
    let was = match old.phase {
        TpuSlicePhase::Deleting if deleted => None,
        phase => phase.time_part(),
    };
    if !TimeSpent::due(old.time_spent.as_ref(), was, new == old, now.timestamp_millis()) {
        return;
    }
    let step = TimeStep {
        was,
        is: new.phase.time_part().filter(|_| !deleted),
        now_ms: now.timestamp_millis(),
        spent_usd: new.spent_usd() - old.spent_usd(),
        interrupted: None,
        attempt_failed: new.phase == TpuSlicePhase::Failed && old.phase != TpuSlicePhase::Failed,
    };
    let before = old.time_spent.clone().unwrap_or_default();
    new.time_spent = Some(before.account(step));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::common::CostEstimate;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn status(phase: TpuSlicePhase, usd: f64) -> TpuSliceStatus {
        TpuSliceStatus {
            phase,
            estimated_cost: Some(CostEstimate {
                so_far_usd: usd,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Writes `next` after `old` at `now`, as a pass does: `next` carries `old`'s `timeSpent`.
    fn write(old: &TpuSliceStatus, mut next: TpuSliceStatus, now: i64) -> TpuSliceStatus {
        next.time_spent = old.time_spent.clone();
        account(old, &mut next, false, at(now));
        next
    }

    #[test]
    fn a_preempted_slices_time_splits_by_phase_and_sums_to_its_wall_time() {
        use TpuSlicePhase as P;
        let mut st = write(&TpuSliceStatus::default(), status(P::Waiting, 0.0), 0);
        for (phase, usd, now) in [
            (P::Provisioning, 0.0, 120),
            (P::Ready, 0.5, 300),
            (P::Ready, 2.0, 900),
            (P::Preempted, 3.0, 1_200),
            (P::Deleting, 3.05, 1_205),
            (P::Recreating, 3.1, 1_210),
            (P::Ready, 3.5, 1_500),
            (P::Suspended, 4.0, 1_800),
            (P::Provisioning, 4.0, 2_000),
        ] {
            st = write(&st, status(phase, usd), now);
        }
        let t = st.time_spent.expect("timeSpent");
        assert_eq!(t.queued.seconds, 120);
        assert_eq!(t.provisioning.seconds, 180 + 300);
        assert_eq!(t.productive.seconds, 900 + 300);
        assert_eq!(t.suspended.seconds, 200);
        assert_eq!(t.wall_seconds(), 2_000);
        assert_eq!(t.lost_to_interruptions.seconds, 0);
        assert_eq!(t.goodput_percent, Some(60));
        let usd: f64 = t.parts().iter().map(|(_, s)| s.usd).sum();
        assert!((usd - 4.0).abs() < 1e-9, "{usd}");
    }

    #[test]
    fn a_ready_slice_is_written_for_it_at_most_once_a_minute_and_loses_no_second() {
        use TpuSlicePhase as P;
        let ready = write(&TpuSliceStatus::default(), status(P::Ready, 0.0), 0);
        // 30 s later with nothing else changed: not due, the status stays as it was.
        let mut same = ready.clone();
        account(&ready, &mut same, false, at(30));
        assert_eq!(same, ready);
        // 90 s later: due, and the 90 s are all credited.
        let later = write(&ready, status(P::Ready, 0.0), 90);
        assert_eq!(later.time_spent.unwrap().productive.seconds, 90);
    }

    #[test]
    fn a_deleted_slices_clock_stops_when_its_deletion_starts() {
        use TpuSlicePhase as P;
        let ready = write(&TpuSliceStatus::default(), status(P::Ready, 0.0), 0);
        let mut deleting = status(P::Deleting, 1.0);
        deleting.time_spent = ready.time_spent.clone();
        account(&ready, &mut deleting, true, at(300));
        let mut later = status(P::Deleting, 1.2);
        later.time_spent = deleting.time_spent.clone();
        account(&deleting, &mut later, true, at(900));
        let t = later.time_spent.unwrap();
        assert_eq!((t.productive.seconds, t.provisioning.seconds), (300, 0));
        assert_eq!(t.wall_seconds(), 300);
    }

    #[test]
    fn a_failed_slice_counts_its_run_as_a_failed_attempt_and_stops_the_clock() {
        use TpuSlicePhase as P;
        let st = write(&TpuSliceStatus::default(), status(P::Provisioning, 0.0), 0);
        let st = write(&st, status(P::Failed, 0.2), 600);
        let st = write(&st, status(P::Failed, 0.2), 6_000);
        let t = st.time_spent.unwrap();
        assert_eq!((t.failed_attempts.seconds, t.provisioning.seconds), (600, 0));
        assert_eq!(t.wall_seconds(), 600);
    }
}
