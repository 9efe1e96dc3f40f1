use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::{AttemptOutcome, CapacityPlanStatus, PlanPlace, TpuSlice, TpuSlicePhase, TpuSliceSpec},
};

use super::{Turn, after_pass, deadline};
use crate::kinds::tpu_slice::plan::{Outcome, Verdict};

/// Reserved in a (10 min), spot in a then b (at once), on-demand in b (the last place).
fn spec() -> TpuSliceSpec {
    serde_json::from_value(json!({
        "zone": "us-east5-a",
        "acceleratorType": "v6e-8",
        "runtimeVersion": "v2-alpha-tpuv6e",
        "capacityPlan": {"rungs": [
            {"reserved": {"reservationName": "r"}, "waitFor": "10m"},
            {"spot": {}, "zones": ["us-east5-a", "us-east5-b"]},
            {"onDemand": {}, "zones": ["us-east5-b"]},
        ]},
    }))
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn seen(reason: &'static str, phase: TpuSlicePhase) -> Outcome {
    Outcome::from(Verdict::new(
        phase,
        Progress::Reconciling,
        reason,
        format!("saw {reason}"),
    ))
}

/// One pass: `old` status, what it saw, when.
fn pass(
    spec: &TpuSliceSpec,
    old: Option<&CapacityPlanStatus>,
    a: &Outcome,
    now: DateTime<Utc>,
) -> (CapacityPlanStatus, Option<String>) {
    after_pass(&Turn {
        spec,
        old,
        base: 0,
        lost: false,
        outcome: a,
        earlier_gone: true,
        now,
    })
    .unwrap()
}

fn at(st: &CapacityPlanStatus) -> (i32, &str, i32) {
    (st.rung, st.zone.as_str(), st.moves)
}

#[test]
fn the_first_pass_asks_the_first_rung_in_its_first_zone() {
    let s = spec();
    let (st, moved) = pass(&s, None, &seen(reasons::CREATING, TpuSlicePhase::Queued), t0());
    assert_eq!((at(&st), moved), ((0, "us-east5-a", 0), None));
    assert_eq!(st.attempts.len(), 1);
    let a = &st.attempts[0];
    assert_eq!(
        (a.capacity.as_str(), a.incarnation, a.outcome),
        ("reserved", 0, AttemptOutcome::Trying)
    );
    assert_eq!(deadline(&s, &st), Some(t0() + Duration::minutes(10)));
}

#[test]
fn a_waiting_rung_waits_its_wait_for_then_moves_on() {
    let s = spec();
    let waiting = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Queued);
    let (st, _) = pass(&s, None, &waiting, t0());
    let (st, moved) = pass(&s, Some(&st), &waiting, t0() + Duration::minutes(9));
    assert_eq!(
        (at(&st), moved),
        ((0, "us-east5-a", 0), None),
        "before its waitFor"
    );
    let (st, moved) = pass(&s, Some(&st), &waiting, t0() + Duration::minutes(10));
    assert_eq!(at(&st), (1, "us-east5-a", 1));
    let moved = moved.expect("moved");
    assert!(moved.contains("no reserved capacity in us-east5-a"), "{moved}");
    assert!(moved.contains("rung 2 (spot in us-east5-a)"), "{moved}");
    let [left, now] = &st.attempts[..] else {
        panic!("{:?}", st.attempts)
    };
    assert_eq!((left.outcome, left.incarnation), (AttemptOutcome::MovedOn, 0));
    assert!(left.end_time.is_some());
    assert_eq!(
        (now.outcome, now.incarnation, now.capacity.as_str()),
        (AttemptOutcome::Trying, 1, "spot")
    );
}

#[test]
fn a_direct_rung_without_wait_for_moves_on_at_the_first_refusal_zone_by_zone() {
    let s = spec();
    let mut st = pass(&s, None, &seen(reasons::QUEUED, TpuSlicePhase::Queued), t0()).0;
    st.rung = 1; // as if it had moved onto the spot rung
    st.attempts.last_mut().unwrap().rung = 1;
    let stockout = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Waiting);
    let (st, moved) = pass(&s, Some(&st), &stockout, t0());
    assert_eq!(at(&st), (1, "us-east5-b", 1), "{moved:?}");
    let quota = Outcome::from(Verdict::new(
        TpuSlicePhase::Waiting,
        Progress::Stalled,
        reasons::QUOTA_EXCEEDED,
        "quota",
    ));
    let (st, _) = pass(&s, Some(&st), &quota, t0());
    assert_eq!(at(&st), (2, "us-east5-b", 2), "an exhausted quota moves on too");
    let (st, moved) = pass(&s, Some(&st), &stockout, t0() + Duration::days(1));
    assert_eq!(
        (at(&st), moved),
        ((2, "us-east5-b", 2), None),
        "the last place stays"
    );
    assert_eq!(deadline(&s, &st), None);
}

#[test]
fn only_a_want_of_capacity_moves_on() {
    let s = spec();
    let (st, _) = pass(&s, None, &seen(reasons::QUEUED, TpuSlicePhase::Queued), t0());
    let later = t0() + Duration::hours(1);
    for reason in [
        reasons::RATE_LIMITED,
        reasons::WAITING_FOR_CREATE_RATE,
        reasons::CREATING,
        reasons::POLICY_DENIED,
        reasons::INVALID_SPEC,
        reasons::PERMISSION_DENIED,
        reasons::QUEUED_IN_KUEUE,
    ] {
        let (after, moved) = pass(&s, Some(&st), &seen(reason, TpuSlicePhase::Pending), later);
        assert_eq!((at(&after), moved), ((0, "us-east5-a", 0), None), "{reason}");
    }
}

#[test]
fn nothing_moves_while_an_earlier_incarnation_is_still_there() {
    let s = spec();
    let waiting = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Queued);
    let (st, _) = pass(&s, None, &waiting, t0());
    let turn = Turn {
        spec: &s,
        old: Some(&st),
        base: 0,
        lost: false,
        outcome: &waiting,
        earlier_gone: false,
        now: t0() + Duration::hours(1),
    };
    let (after, moved) = after_pass(&turn).unwrap();
    assert_eq!((at(&after), moved), ((0, "us-east5-a", 0), None));
}

#[test]
fn an_expired_queued_request_moves_on_before_its_wait_for() {
    let s = spec();
    let (st, _) = pass(&s, None, &seen(reasons::QUEUED, TpuSlicePhase::Queued), t0());
    let expired = Outcome::from(Verdict::new(
        TpuSlicePhase::Failed,
        Progress::Stalled,
        reasons::QUEUE_EXPIRED,
        "expired",
    ));
    let (after, moved) = pass(&s, Some(&st), &expired, t0() + Duration::minutes(1));
    assert_eq!(at(&after), (1, "us-east5-a", 1), "{moved:?}");
    // FAILED by the service (its reservation is gone): moves on at once too; FAILED for another
    // cause (a queued resource a user suspended) is no capacity answer and stays.
    let mut failed = Outcome::from(Verdict::new(
        TpuSlicePhase::Failed,
        Progress::Stalled,
        reasons::FAILED,
        "FAILED",
    ));
    let (stays, _) = pass(&s, Some(&st), &failed, t0() + Duration::minutes(1));
    assert_eq!(at(&stays), (0, "us-east5-a", 0));
    failed.details.capacity = Some(false);
    let (after, _) = pass(&s, Some(&st), &failed, t0() + Duration::minutes(1));
    assert_eq!(at(&after), (1, "us-east5-a", 1));
}

#[test]
fn landing_ends_the_plan_and_a_lost_node_starts_it_again() {
    let s = spec();
    let stockout = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Waiting);
    let (mut st, _) = pass(&s, None, &stockout, t0());
    st.rung = 1;
    st.attempts.last_mut().unwrap().rung = 1;
    let (st, _) = pass(&s, Some(&st), &stockout, t0());
    let ready = Outcome::from(Verdict::new(
        TpuSlicePhase::Ready,
        Progress::Ready,
        reasons::RUNNING,
        "node READY",
    ));
    let (st, moved) = pass(&s, Some(&st), &ready, t0() + Duration::minutes(2));
    assert_eq!((at(&st), moved), ((1, "us-east5-b", 1), None));
    assert_eq!(st.attempts.last().unwrap().outcome, AttemptOutcome::Landed);
    assert_eq!(deadline(&s, &st), None, "landed: no deadline");

    // Preempted: counted as a recreation (base 1), back to the first place as incarnation 2.
    let preempted = Outcome::from(Verdict::new(
        TpuSlicePhase::Preempted,
        Progress::Reconciling,
        reasons::PREEMPTED,
        "gone",
    ));
    let (st, _) = after_pass(&Turn {
        spec: &s,
        old: Some(&st),
        base: 1,
        lost: true,
        outcome: &preempted,
        earlier_gone: true,
        now: t0() + Duration::hours(3),
    })
    .unwrap();
    assert_eq!(at(&st), (0, "us-east5-a", 1));
    let n = st.attempts.len();
    assert_eq!(st.attempts[n - 2].outcome, AttemptOutcome::Lost);
    assert_eq!(st.attempts[n - 2].incarnation, 1);
    assert_eq!(st.attempts[n - 1].incarnation, 2);
    assert_eq!(
        st.place_of(1),
        Some(PlanPlace {
            rung: 1,
            zone: "us-east5-b".into()
        })
    );
}

#[test]
fn status_keeps_the_last_attempts_only() {
    let s: TpuSliceSpec = serde_json::from_value(json!({
        "zone": "z-a",
        "capacityPlan": {"rungs": [
            {"spot": {}, "zones": ["a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "a-8"]},
            {"spot": {}, "zones": ["b-1", "b-2", "b-3", "b-4", "b-5", "b-6", "b-7", "b-8"]},
            {"spot": {}, "zones": ["c-1", "c-2", "c-3", "c-4"]},
        ]},
    }))
    .unwrap();
    let stockout = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Waiting);
    let mut st = pass(&s, None, &stockout, t0()).0;
    for _ in 0..30 {
        st = pass(&s, Some(&st), &stockout, t0()).0;
    }
    assert_eq!(at(&st), (2, "c-4", 19));
    assert_eq!(st.attempts.len(), tpu_operator_api::tpu_slice::KEPT_ATTEMPTS);
    assert_eq!(st.attempts.last().unwrap().incarnation, 19);
}

#[test]
fn a_pass_runs_where_status_stands_and_the_previous_incarnation_where_it_stood() {
    let s = spec();
    let mut slice = TpuSlice::new("s", s.clone());
    assert_eq!(slice.place_in_effect(), s.first_place());
    assert_eq!(slice.previous_place(), None, "no earlier incarnation");
    let waiting = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Queued);
    let (st, _) = pass(&s, None, &waiting, t0());
    let (st, _) = pass(&s, Some(&st), &waiting, t0() + Duration::minutes(10));
    slice.status = Some(tpu_operator_api::tpu_slice::TpuSliceStatus {
        capacity_plan: Some(st),
        ..Default::default()
    });
    assert_eq!(
        slice.place_in_effect(),
        Some(PlanPlace {
            rung: 1,
            zone: "us-east5-a".into()
        })
    );
    assert_eq!(
        slice.previous_place(),
        Some(PlanPlace {
            rung: 0,
            zone: "us-east5-a".into()
        })
    );
    let here = s.at(slice.place_in_effect().as_ref());
    let before = s.at(slice.previous_place().as_ref());
    assert!(!here.uses_queued_resource() && before.uses_queued_resource());
}

#[test]
fn a_place_the_plan_does_not_have_falls_back_to_the_first() {
    let s = spec();
    let mut slice = TpuSlice::new("s", s.clone());
    let (mut st, _) = pass(&s, None, &seen(reasons::QUEUED, TpuSlicePhase::Queued), t0());
    st.zone = "europe-west4-a".into();
    slice.status = Some(tpu_operator_api::tpu_slice::TpuSliceStatus {
        capacity_plan: Some(st),
        ..Default::default()
    });
    assert_eq!(slice.place_in_effect(), s.first_place());
}

#[test]
fn going_back_undoes_the_last_move_and_asks_the_granted_rung_again() {
    let s = spec();
    let waiting = seen(reasons::WAITING_FOR_CAPACITY, TpuSlicePhase::Queued);
    let (st, _) = pass(&s, None, &waiting, t0());
    let (moved, _) = pass(&s, Some(&st), &waiting, t0() + Duration::minutes(10));
    assert_eq!(at(&moved), (1, "us-east5-a", 1));
    let back = super::go_back(&moved, t0() + Duration::minutes(11)).expect("a move to undo");
    assert_eq!(at(&back), (0, "us-east5-a", 0));
    assert_eq!(back.attempts.len(), 1);
    let a = &back.attempts[0];
    assert_eq!(
        (a.incarnation, a.outcome, a.end_time.clone()),
        (0, AttemptOutcome::Trying, None)
    );
    assert_eq!(
        deadline(&s, &back),
        Some(t0() + Duration::minutes(10)),
        "its own deadline, passed"
    );
    assert!(super::go_back(&back, t0()).is_none(), "nothing more to undo");
}
