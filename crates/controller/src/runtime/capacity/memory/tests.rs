use super::*;

fn place() -> Place {
    Place {
        project: "p".into(),
        zone: "us-east5-b".into(),
        accelerator: "v6e-8".into(),
        kind: "onDemand",
    }
}

fn at(min: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::minutes(min)
}

fn secs(s: i64) -> DateTime<Utc> {
    at(0) + Duration::seconds(s)
}

#[test]
fn the_backoff_doubles_from_five_to_thirty_minutes() {
    let got: Vec<i64> = (1..=6).map(|n| backoff(n).num_minutes()).collect();
    assert_eq!(got, vec![5, 10, 20, 30, 30, 30]);
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF, "no overflow");
}

#[test]
fn a_place_nobody_stocked_out_is_asked_freely() {
    let mut m = Memory::default();
    let p = place();
    for who in ["a", "b", "c"] {
        assert_eq!(m.ask(&p, who, at(0)), Verdict::Go);
    }
    assert_eq!(m.blocked_until(&p, at(0)), None);
}

#[test]
fn one_probe_per_window_and_the_window_grows() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "a", at(0));
    m.stockout(&p, "b", at(0));
    for who in ["a", "b", "c"] {
        assert_eq!(
            m.ask(&p, who, at(4)),
            Verdict::Blocked {
                until: at(5),
                since: at(0),
                strikes: 1
            },
            "creates on their way when the block began add no strike"
        );
    }
    assert_eq!(
        m.ask(&p, "c", at(5)),
        Verdict::Go,
        "the window is over: one probe"
    );
    assert_eq!(m.ask(&p, "a", at(5)), Verdict::Probing { until: at(6) });
    assert_eq!(m.ask(&p, "c", at(5)), Verdict::Go, "the probe asks again");
    m.stockout(&p, "c", at(5));
    assert_eq!(m.blocked_until(&p, at(6)), Some(at(15)));
    for t in [15, 35, 65] {
        assert_eq!(m.ask(&p, "d", at(t)), Verdict::Go);
        m.stockout(&p, "d", at(t));
    }
    assert_eq!(m.blocked_until(&p, at(65)), Some(at(95)), "at most 30 minutes");
}

#[test]
fn a_node_up_after_the_stockout_opens_the_place_to_all_and_an_older_one_does_not() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "x", at(0));
    assert_eq!(m.ask(&p, "a", at(5)), Verdict::Go);
    m.accepted(&p, "a", at(5));
    assert_eq!(
        m.ask(&p, "b", at(8)),
        Verdict::Probing {
            until: at(5) + CREATE_TIMEOUT
        },
        "an accepted create still answers for the place while its node comes up"
    );
    assert!(!m.granted(&p, at(-60)));
    assert!(
        matches!(m.ask(&p, "b", at(8)), Verdict::Probing { .. }),
        "a node from before the stockout proves nothing"
    );
    assert!(m.granted(&p, at(5)));
    for who in ["b", "c", "d"] {
        assert_eq!(m.ask(&p, who, at(8)), Verdict::Go);
    }
    m.stockout(&p, "b", at(9));
    assert_eq!(
        m.blocked_until(&p, at(9)),
        Some(at(14)),
        "a grant resets the strikes"
    );
}

#[test]
fn a_probe_that_never_answers_or_gives_up_does_not_hold_the_place() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "x", at(-5));
    assert_eq!(m.ask(&p, "a", at(0)), Verdict::Go);
    assert!(matches!(m.ask(&p, "b", secs(59)), Verdict::Probing { .. }));
    assert_eq!(
        m.ask(&p, "b", secs(60)),
        Verdict::Go,
        "a's probe (deleted, crashed) lapsed"
    );
    m.release(&p, "a");
    assert!(
        matches!(m.ask(&p, "c", secs(61)), Verdict::Probing { .. }),
        "a no longer holds it, so a cannot give it up"
    );
    m.release(&p, "b");
    assert_eq!(
        m.ask(&p, "c", secs(61)),
        Verdict::Go,
        "b gave it up (an invalid request)"
    );
    m.accepted(&p, "c", secs(61));
    let lapse = secs(61) + CREATE_TIMEOUT;
    assert!(matches!(
        m.ask(&p, "d", lapse - Duration::seconds(1)),
        Verdict::Probing { .. }
    ));
    assert_eq!(
        m.ask(&p, "d", lapse),
        Verdict::Go,
        "a node that never comes up lapses too"
    );
}

#[test]
fn old_strikes_and_places_are_forgotten() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "a", at(0));
    m.ask(&p, "a", at(5));
    m.stockout(&p, "a", at(5));
    let late = at(5 + RESET_AFTER.num_minutes() + 1);
    m.ask(&p, "a", late);
    m.stockout(&p, "a", late);
    assert_eq!(
        m.blocked_until(&p, at(5 + RESET_AFTER.num_minutes() + 1)),
        Some(at(5 + RESET_AFTER.num_minutes() + 6)),
        "strikes older than 3 h are forgotten"
    );
    let later = at(10 + 2 * RESET_AFTER.num_minutes());
    assert_eq!(m.ask(&p, "a", later), Verdict::Go);
    assert!(m.forget_stale(later).is_empty(), "a live probe keeps its place");
    assert_eq!(m.forget_stale(later + PROBE_TIMEOUT), vec![p.clone()]);
    assert_eq!(m.ask(&p, "b", later + PROBE_TIMEOUT), Verdict::Go);
    assert_eq!(
        m.ask(&p, "c", later + PROBE_TIMEOUT),
        Verdict::Go,
        "asked freely again"
    );
}

#[test]
fn places_are_apart_by_project_zone_accelerator_and_kind() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "a", at(0));
    let others = [
        Place {
            project: "other-team".into(),
            ..place()
        },
        Place {
            zone: "us-east5-a".into(),
            ..place()
        },
        Place {
            accelerator: "v6e-16".into(),
            ..place()
        },
        Place {
            kind: "spot",
            ..place()
        },
    ];
    for o in &others {
        assert_eq!(m.ask(o, "a", at(1)), Verdict::Go, "{o:?}");
    }
    assert!(matches!(m.ask(&p, "a", at(1)), Verdict::Blocked { .. }));
}

#[test]
fn a_late_answer_from_a_create_made_before_the_window_ended_adds_no_strike() {
    let mut m = Memory::default();
    let p = place();
    m.stockout(&p, "a", at(0));
    // The window is over; "b"'s operation, started before the block, fails and is read only
    // now. Nobody probes yet: it proves nothing new.
    m.stockout(&p, "b", at(6));
    assert_eq!(m.blocked_until(&p, at(6)), None, "no new window");
    assert_eq!(m.ask(&p, "c", at(6)), Verdict::Go, "c probes");
    let half = at(6) + Duration::seconds(30);
    m.stockout(&p, "b", half);
    assert!(
        matches!(m.ask(&p, "d", half), Verdict::Probing { .. }),
        "the probe is c's; b's old answer neither blocks nor frees the place"
    );
    m.stockout(&p, "c", half);
    assert_eq!(
        m.blocked_until(&p, half),
        Some(half + Duration::minutes(10)),
        "c's answer: the second strike"
    );
}
