//! The assessment of a create the create limiter holds back: the project's rate quota is being
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

use super::{Assessment, Requeue};
use crate::runtime::capacity::{Line, Waiting};

/// What status says of a create waiting at `waiting` in `line`.
pub fn paced(line: &Line, waiting: &Waiting, now: DateTime<Utc>) -> Assessment {
    Assessment::new(
        Progress::Reconciling,
        reasons::WAITING_FOR_CREATE_RATE,
        TpuSlicePhase::Pending,
        waiting.message(line),
    )
    .requeue(Requeue::After(waiting.wait(now)))
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
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
            (a.progress, a.reason, a.phase, a.capacity),
            (
                Progress::Reconciling,
                reasons::WAITING_FOR_CREATE_RATE,
                TpuSlicePhase::Pending,
                None
            )
        );
        assert!(a.failure.is_none());
        for part in [
            "37 of 412",
            "project team-a's line of TPU creates",
            "due at 2027-01-15T08:00:25Z",
            "at most 86 a minute",
        ] {
            assert!(a.message.contains(part), "{part:?} in {:?}", a.message);
        }
        assert_eq!(a.requeue, Requeue::After(std::time::Duration::from_secs(25)));
    }
}
