//! What status says of a create the stockout memory held back: the place stocked out (for this
//! slice or another) and is blocked until a time status shows, or another slice's create is
//! asking it now. Not a failure: the slice waits as any stockout does (`WaitingForCapacity`,
//! `CapacityAvailable=False` reason `Stockout`), and looks again when the block ends.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, SecondsFormat, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};

use super::{Outcome, Requeue};
use crate::runtime::capacity::{Place, Verdict};

/// How often a slice waiting for another's probe looks again: the probe's answer (a call, or a
/// node coming up) is what it waits for, and a stockout answer sends it back to the block.
const PROBE_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// What status says of a create `verdict` withheld at `place`.
pub fn withheld(place: &Place, verdict: &Verdict, now: DateTime<Utc>) -> Outcome {
    let what = format!(
        "{} {} capacity in {} (project {})",
        place.accelerator, place.kind, place.zone, place.project
    );
    let at = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let wait = |until: &DateTime<Utc>| (*until - now).to_std().unwrap_or_default();
    let (message, requeue) = match verdict {
        Verdict::Blocked {
            until,
            since,
            strikes,
        } => (
            format!(
                "no {what}: a create stocked out at {} ({strikes} in a row); not asked again until {} (stockout memory, shared by every slice)",
                at(since),
                at(until),
            ),
            wait(until),
        ),
        Verdict::Probing { until } => (
            format!(
                "no {what} at the last ask: another slice's create is asking again; this one follows its answer, and asks itself by {} at the latest",
                at(until),
            ),
            wait(until).min(PROBE_POLL),
        ),
        Verdict::Go => (format!("{what} may be asked"), std::time::Duration::ZERO),
    };
    Outcome::unavailable(
        super::Verdict::new(
            TpuSlicePhase::Waiting,
            Progress::Reconciling,
            reasons::WAITING_FOR_CAPACITY,
            message,
        )
        .requeue(Requeue::After(requeue)),
    )
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::kinds::tpu_slice::plan::Said;

    fn place() -> Place {
        Place {
            project: "team-a".into(),
            zone: "us-east5-b".into(),
            accelerator: "v6e-8".into(),
            kind: "spot",
        }
    }

    #[test]
    fn a_blocked_place_waits_for_capacity_and_names_the_place_and_the_next_ask() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let until = now + Duration::minutes(4);
        let verdict = Verdict::Blocked {
            until,
            since: now - Duration::minutes(1),
            strikes: 2,
        };
        let a = withheld(&place(), &verdict, now);
        assert_eq!(
            (
                a.verdict.said().progress,
                a.verdict.said().reason,
                a.verdict.phase,
                a.details.capacity
            ),
            (
                Progress::Reconciling,
                reasons::WAITING_FOR_CAPACITY,
                TpuSlicePhase::Waiting,
                Some(false)
            )
        );
        assert!(a.details.failure.is_none(), "no error: {a:?}");
        for part in [
            "v6e-8 spot capacity in us-east5-b",
            "team-a",
            "2 in a row",
            "not asked again until 2027-01-15T08:04:00Z",
        ] {
            assert!(
                a.verdict.said().message.contains(part),
                "{part:?} in {:?}",
                a.verdict.said().message
            );
        }
        assert_eq!(
            a.verdict.requeue,
            Requeue::After(std::time::Duration::from_secs(240))
        );
    }

    #[test]
    fn a_slice_behind_another_probe_looks_again_soon() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let a = withheld(
            &place(),
            &Verdict::Probing {
                until: now + Duration::minutes(10),
            },
            now,
        );
        assert_eq!(
            (a.verdict.said().reason, a.verdict.phase),
            (reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Waiting)
        );
        assert!(
            a.verdict.said().message.contains("by 2027-01-15T08:10:00Z"),
            "{}",
            a.verdict.said().message
        );
        assert_eq!(a.verdict.requeue, Requeue::After(PROBE_POLL));
    }
}
