use super::*;

const S: i64 = 1000;

fn step(was: Option<Part>, is: Option<Part>, now_s: i64) -> Step {
    Step {
        was,
        is,
        now_ms: now_s * S,
        spent_usd: 0.0,
        interrupted: None,
        attempt_failed: false,
    }
}

/// Runs `steps` from an empty breakdown, each pass's `was` being the previous pass's `is`.
/// Training is billed $0.01 a second.
fn run(passes: &[(Option<Part>, i64)]) -> TimeSpent {
    let mut t = TimeSpent::default();
    let mut was = None;
    let mut last = 0;
    for (is, at) in passes {
        let billed = if was == Some(Part::Productive) {
            (at - last) as f64 * 0.01
        } else {
            0.0
        };
        t = t.account(Step {
            spent_usd: billed,
            ..step(was, *is, *at)
        });
        (was, last) = (*is, *at);
    }
    t
}

#[test]
fn the_parts_sum_to_the_wall_time_and_sub_second_remainders_are_carried() {
    use Part::*;
    // Passes 0.7 s apart: whole seconds only are credited, the rest waits for the next pass.
    let mut t = TimeSpent::default();
    let mut was = None;
    for k in 0..=100 {
        let is = if k < 40 { Some(Queued) } else { Some(Productive) };
        t = t.account(Step {
            now_ms: k * 700,
            ..step(was, is, 0)
        });
        was = is;
    }
    assert_eq!(t.wall_seconds(), 70, "{t:?}");
    assert_eq!(t.queued.seconds, 28);
    assert_eq!(t.productive.seconds, 42);
    assert_eq!(t.goodput_percent, Some(60));
}

#[test]
fn a_write_that_is_lost_is_credited_once_by_the_next() {
    use Part::*;
    let base = run(&[(Some(Queued), 0), (Some(Productive), 10)]);
    // A pass at 20 s computed its breakdown but its write failed: the stored status is still
    // `base`, and the pass at 30 s credits 10..30 once.
    let _lost = base.account(step(Some(Productive), Some(Productive), 20));
    let next = base.account(step(Some(Productive), Some(Productive), 30));
    assert_eq!(
        (next.queued.seconds, next.productive.seconds, next.wall_seconds()),
        (10, 20, 30)
    );
}

#[test]
fn an_interruption_moves_what_was_trained_since_the_last_checkpoint_to_lost() {
    use Part::*;
    let t = run(&[
        (Some(Provisioning), 0),
        (Some(Productive), 60),
        (Some(Productive), 300),
    ]);
    assert_eq!(t.productive.seconds, 240);
    // Interrupted at 400 s, the last checkpoint committed at 330 s: 70 s are trained again.
    let t = t.account(Step {
        interrupted: Some(Some(330 * S)),
        spent_usd: 1.0,
        ..step(Some(Productive), Some(Provisioning), 400)
    });
    assert_eq!((t.productive.seconds, t.lost_to_interruptions.seconds), (270, 70));
    assert!((t.lost_to_interruptions.usd - 0.7).abs() < 1e-9, "{t:?}");
    assert!(
        (t.productive.usd + t.lost_to_interruptions.usd - 3.4).abs() < 1e-9,
        "{t:?}"
    );
    assert_eq!(t.wall_seconds(), 400);
    // No checkpoint since training started (at 60 s): all of it is lost, never more.
    let t = run(&[(Some(Productive), 0), (Some(Productive), 50)]).account(Step {
        interrupted: Some(None),
        ..step(Some(Productive), Some(Provisioning), 80)
    });
    assert_eq!((t.productive.seconds, t.lost_to_interruptions.seconds), (0, 80));
}

#[test]
fn a_failed_attempt_moves_all_it_spent_to_failed_attempts() {
    use Part::*;
    let mut t = run(&[
        (Some(Queued), 0),
        (Some(Provisioning), 10),
        (Some(Productive), 40),
    ]);
    t = t.account(Step {
        spent_usd: 2.0,
        attempt_failed: true,
        ..step(Some(Productive), Some(Provisioning), 100)
    });
    assert_eq!(t.failed_attempts.seconds, 90, "{t:?}");
    assert_eq!(t.failed_attempts.usd, 2.0);
    assert_eq!((t.provisioning.seconds, t.productive.seconds), (0, 0));
    assert_eq!(
        t.queued.seconds, 10,
        "queued before the attempt is not the attempt's"
    );
    t = t.account(step(Some(Provisioning), Some(Productive), 130));
    t = t.account(step(Some(Productive), None, 200));
    assert_eq!((t.provisioning.seconds, t.productive.seconds), (30, 70));
    assert_eq!(t.wall_seconds(), 200);
    // The clock stops once the run is over.
    let after = t.account(step(None, None, 900));
    assert_eq!(after.wall_seconds(), 200);
}

#[test]
fn the_part_follows_the_phase_and_the_train_stage() {
    use StageState as S;
    assert_eq!(Part::of(Phase::Waiting, S::Pending), Some(Part::Queued));
    assert_eq!(Part::of(Phase::Training, S::Running), Some(Part::Productive));
    assert_eq!(Part::of(Phase::Training, S::Queued), Some(Part::Provisioning));
    assert_eq!(Part::of(Phase::Succeeded, S::Succeeded), None);
}
