use std::collections::BTreeMap;

use super::*;

fn t0() -> DateTime<Utc> {
    // 2027-01-15T08:00:00Z: on a minute boundary, so the windows below are Google's.
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn line() -> Line {
    Line::new(Group::TpuCreate, "demo")
}

fn asker<'a>(who: &'a str, tenant: &'a str) -> Asker<'a> {
    Asker {
        who,
        tenant,
        kind: "TpuSlice",
        name: who,
    }
}

fn limited(per_minute: u32) -> Limiter {
    let mut limits = Limits(BTreeMap::new());
    limits.set(&format!("tpuCreate={per_minute}")).unwrap();
    Limiter::new(limits)
}

/// Every waiter comes back exactly when told (as a requeue at its turn does); returns when
/// each got its turn.
fn drain(limiter: &mut Limiter, waiters: &[(String, &str)], start: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut next: Vec<(DateTime<Utc>, usize)> = (0..waiters.len()).map(|i| (start, i)).collect();
    let mut went = vec![None; waiters.len()];
    while let Some(&(at, i)) = next.iter().min() {
        next.retain(|&(_, j)| j != i);
        let (who, tenant) = &waiters[i];
        match limiter.turn(&line(), asker(who, tenant), at) {
            Turn::Go => went[i] = Some(at),
            Turn::Wait(w) => {
                assert!(w.due >= at, "a turn in the past: {w:?} at {at}");
                // A pass takes at least a millisecond: never the same instant twice.
                next.push((w.due.max(at + Duration::milliseconds(1)), i));
            }
        }
    }
    went.into_iter().map(Option::unwrap).collect()
}

#[test]
fn five_hundred_creates_keep_under_the_quota_in_every_minute_and_near_it_overall() {
    let mut limiter = limited(91);
    let waiters: Vec<(String, &str)> = (0..500).map(|i| (format!("s-{i:03}"), "team-a")).collect();
    let went = drain(&mut limiter, &waiters, t0());
    // Every 60 s span, aligned to the minute or sliding by the millisecond's worth of the
    // calls' own times, holds at most the cap (91 less 5 %).
    for from in &went {
        let n = went
            .iter()
            .filter(|t| *t >= from && **t < *from + Duration::seconds(60))
            .count();
        assert!(n <= 86, "{n} creates in the minute from {from}");
    }
    let last = *went.iter().max().unwrap();
    // The pace over the run, counting the last call's minute as used.
    let minutes = (last - t0() + Duration::minutes(1)).num_milliseconds() as f64 / 60_000.0;
    let pace = 500.0 / minutes;
    assert!(pace >= 0.9 * 91.0, "{pace:.1} creates a minute");
    let waits: Vec<f64> = went
        .iter()
        .map(|t| (*t - t0()).num_seconds() as f64 / 60.0)
        .collect();
    let p99 = waits[(waits.len() * 99).div_ceil(100) - 1];
    assert!(p99 <= 7.0, "p99 wait {p99:.2} minutes");
}

#[test]
fn a_fresh_line_lets_its_cap_through_then_waits_for_the_window() {
    let mut limiter = limited(91);
    for i in 0..86 {
        assert_eq!(
            limiter.turn(&line(), asker(&format!("b-{i}"), "a"), t0()),
            Turn::Go
        );
    }
    let Turn::Wait(w) = limiter.turn(&line(), asker("late", "a"), t0()) else {
        panic!("an 87th create in the same minute must wait");
    };
    assert_eq!((w.position, w.of, w.per_minute), (1, 1, 86.0));
    assert_eq!(w.due, t0() + Duration::minutes(1));
    let just_before = w.due - Duration::milliseconds(1);
    assert!(matches!(
        limiter.turn(&line(), asker("late", "a"), just_before),
        Turn::Wait(_)
    ));
    assert_eq!(limiter.turn(&line(), asker("late", "a"), w.due), Turn::Go);
}

#[test]
fn another_team_s_create_goes_second_behind_a_flood_not_last() {
    let mut limiter = limited(91);
    let flood: Vec<String> = (0..200).map(|i| format!("a-{i:03}")).collect();
    for who in &flood {
        limiter.turn(&line(), asker(who, "team-a"), t0());
    }
    let later = t0() + Duration::milliseconds(10);
    let Turn::Wait(w) = limiter.turn(&line(), asker("b-0", "team-b"), later) else {
        panic!("the window is full");
    };
    assert_eq!(w.position, 2, "{w:?}");
    assert_eq!(w.of, 115, "86 of the flood went at once");
    assert_eq!(w.due, t0() + Duration::minutes(1), "in the next minute's calls");
}

#[test]
fn a_waiter_that_never_returns_holds_nobody_back_past_its_grace() {
    // Quota 3: a cap of 2 calls a minute.
    let mut limiter = limited(3);
    let at = |s: i64| t0() + Duration::seconds(s);
    assert_eq!(limiter.turn(&line(), asker("c-0", "a"), at(0)), Turn::Go);
    assert_eq!(limiter.turn(&line(), asker("c-1", "a"), at(30)), Turn::Go);
    let Turn::Wait(gone) = limiter.turn(&line(), asker("gone", "a"), at(31)) else {
        panic!()
    };
    let Turn::Wait(next) = limiter.turn(&line(), asker("next", "a"), at(31)) else {
        panic!()
    };
    assert_eq!((gone.due, next.position, next.due), (at(60), 2, at(90)));
    // One call ages out at 60 s: `gone`'s, while it may still come.
    assert!(matches!(
        limiter.turn(&line(), asker("next", "a"), at(61)),
        Turn::Wait(_)
    ));
    // Past `gone`'s grace, `next` takes it.
    let after = gone.due + GRACE + Duration::seconds(1);
    assert_eq!(limiter.turn(&line(), asker("next", "a"), after), Turn::Go);
    // `gone` kept its place: back now, it is first in line.
    let Turn::Wait(back) = limiter.turn(&line(), asker("gone", "a"), after) else {
        panic!("the window is full again")
    };
    assert_eq!((back.position, back.due), (1, at(90)));
}

#[test]
fn a_refusal_pauses_until_google_s_next_window_and_lowers_the_cap() {
    let mut limiter = limited(91);
    let at = t0() + Duration::seconds(20);
    assert_eq!(limiter.turn(&line(), asker("x", "a"), at), Turn::Go);
    limiter.refused(&line(), at + Duration::seconds(1));
    let Turn::Wait(w) = limiter.turn(&line(), asker("y", "a"), at + Duration::seconds(2)) else {
        panic!("a refused line must pause")
    };
    let window = t0() + Duration::minutes(1);
    assert_eq!(
        (w.paused_until, w.due, w.per_minute),
        (Some(window), window, 64.0)
    );
    let before = window - Duration::seconds(1);
    assert!(matches!(
        limiter.turn(&line(), asker("y", "a"), before),
        Turn::Wait(_)
    ));
    assert_eq!(limiter.turn(&line(), asker("y", "a"), window), Turn::Go);
    // Ten minutes without a refusal: the full cap again.
    let later = window + Duration::minutes(10);
    for i in 0..86 {
        assert_eq!(
            limiter.turn(&line(), asker(&format!("r-{i}"), "a"), later),
            Turn::Go
        );
    }
    assert!(matches!(
        limiter.turn(&line(), asker("z", "a"), later),
        Turn::Wait(_)
    ));
}

#[test]
fn lines_are_separate_and_an_unlimited_group_never_waits() {
    let mut limits = Limits::default();
    limits.set("vertexJobCreate=0").unwrap();
    let mut limiter = Limiter::new(limits);
    let vertex = Line::in_region(Group::VertexJobCreate, "demo", "us-central1");
    for i in 0..1000 {
        assert_eq!(
            limiter.turn(&vertex, asker(&format!("v-{i}"), "a"), t0()),
            Turn::Go
        );
    }
    let demo = Line::new(Group::TpuCreate, "demo");
    let other = Line::new(Group::TpuCreate, "other");
    for i in 0..86 {
        assert_eq!(limiter.turn(&demo, asker(&format!("d-{i}"), "a"), t0()), Turn::Go);
    }
    assert!(matches!(
        limiter.turn(&demo, asker("d-86", "a"), t0()),
        Turn::Wait(_)
    ));
    assert_eq!(
        limiter.turn(&other, asker("o-0", "a"), t0()),
        Turn::Go,
        "another project's quota"
    );
}

#[test]
fn a_bad_setting_names_the_flag_and_what_it_takes() {
    let mut limits = Limits::default();
    for bad in ["tpu-create", "tpu=5", "tpuCreate=x", "tpuCreate=1"] {
        let err = limits.set(bad).unwrap_err();
        assert!(
            err.contains("--create-limit") && err.contains("tpuCreate"),
            "{err}"
        );
    }
    limits.set("dataprocBatchCreate=400").unwrap();
    assert_eq!(limits.0[&Group::DataprocBatchCreate], 400);
}

#[test]
fn a_waiter_is_woken_once_when_its_turn_comes_and_again_only_after_asking() {
    let mut limiter = limited(3);
    let at = |s: i64| t0() + Duration::seconds(s);
    limiter.turn(&line(), asker("c-0", "a"), at(0));
    limiter.turn(&line(), asker("c-1", "a"), at(0));
    let Turn::Wait(w) = limiter.turn(&line(), asker("w", "team-a"), at(1)) else {
        panic!()
    };
    assert!(limiter.due("TpuSlice", at(59)).is_empty(), "not before its turn");
    assert!(
        limiter.due("PreprocessBatch", w.due).is_empty(),
        "only its own kind's"
    );
    let woken = limiter.due("TpuSlice", w.due);
    assert_eq!(
        woken,
        vec![Due {
            uid: "w".into(),
            namespace: "team-a".into(),
            name: "w".into()
        }]
    );
    assert!(limiter.due("TpuSlice", at(120)).is_empty(), "once per turn");
    // Back before the window has room (a slow clock): told a new turn, woken at that one.
    let early = w.due - Duration::seconds(1);
    let Turn::Wait(again) = limiter.turn(&line(), asker("w", "team-a"), early) else {
        panic!()
    };
    assert_eq!(limiter.due("TpuSlice", again.due).len(), 1);
}
