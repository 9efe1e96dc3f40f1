//! What status says of a create the create limiter holds back: the project's rate quota is being
//! spent by the creates ahead of it. Not a failure and not a capacity wait: the slice stays
//! `Pending` (nothing was asked of Google), says its place in line and when its turn is due,
//! and looks again then.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};

use super::{Outcome, Requeue, Verdict};
use crate::runtime::capacity::{Line, Waiting};

/// What status says of a create waiting at `waiting` in `line`.
pub fn paced(line: &Line, waiting: &Waiting, now: DateTime<Utc>) -> Outcome {
    Verdict::new(
        TpuSlicePhase::Pending,
        Progress::Reconciling,
        reasons::WAITING_FOR_CREATE_RATE,
        waiting.message(line),
    )
    .requeue(Requeue::After(waiting.wait(now)))
    .into()
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::kinds::tpu_slice::plan::Said;
    use crate::runtime::capacity::Group;

    #[test]
    fn a_paced_create_is_pending_and_names_its_place_the_line_and_its_turn() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let waiting = Waiting {
            position: 37,
            of: 412,
            due: now + Duration::seconds(25),
            per_minute: 86.0,
            paused_until: None,
        };
        let a = paced(&Line::new(Group::TpuCreate, "team-a"), &waiting, now);
        assert_eq!(
            (
                a.verdict.said().progress,
                a.verdict.said().reason,
                a.verdict.phase,
                a.details.capacity
            ),
            (
                Progress::Reconciling,
                reasons::WAITING_FOR_CREATE_RATE,
                TpuSlicePhase::Pending,
                None
            )
        );
        assert!(a.details.failure.is_none());
        for part in [
            "37 of 412",
            "project team-a's line of TPU creates",
            "due at 2027-01-15T08:00:25Z",
            "at most 86 a minute",
        ] {
            assert!(
                a.verdict.said().message.contains(part),
                "{part:?} in {:?}",
                a.verdict.said().message
            );
        }
        assert_eq!(
            a.verdict.requeue,
            Requeue::After(std::time::Duration::from_secs(25))
        );
    }
}
