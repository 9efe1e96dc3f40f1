use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn budget(period: BudgetPeriod, limit: f64, actions: &[(u32, BudgetActionKind)]) -> Budget {
    Budget {
        period,
        limit_usd: limit,
        actions: actions
            .iter()
            .map(|&(at_percent, action)| BudgetAction { at_percent, action })
            .collect(),
    }
}

#[test]
fn periods_start_at_utc_midnight_monday_and_the_first() {
    let t = at("2026-11-26T15:04:05Z"); // a Thursday
    assert_eq!(BudgetPeriod::Day.start_of(t), at("2026-11-26T00:00:00Z"));
    assert_eq!(BudgetPeriod::Week.start_of(t), at("2026-11-23T00:00:00Z"));
    assert_eq!(BudgetPeriod::Month.start_of(t), at("2026-11-01T00:00:00Z"));
    let monday = at("2026-11-23T00:00:00Z");
    assert_eq!(BudgetPeriod::Week.start_of(monday), monday);
    assert_eq!(
        BudgetPeriod::Month.next_start(at("2026-12-01T00:00:00Z")),
        at("2027-01-01T00:00:00Z")
    );
    assert_eq!(
        BudgetPeriod::Month.next_start(at("2027-02-01T00:00:00Z")),
        at("2027-03-01T00:00:00Z")
    );
}

#[test]
fn spend_is_credited_once_per_interval_and_survives_a_lost_write() {
    let b = budget(BudgetPeriod::Day, 100.0, &[]);
    let first = BudgetUsage::metered(None, "team-a", &b, 36.0, at("2026-11-26T10:00:00Z"));
    assert_eq!(first.spent_usd, 0.0, "nothing before the first refresh is known");
    let later = BudgetUsage::metered(Some(&first), "team-a", &b, 36.0, at("2026-11-26T10:30:00Z"));
    assert!((later.spent_usd - 18.0).abs() < 1e-9, "{later:?}");
    // The write of `later` was lost: the next refresh starts from `first` and credits the whole
    // hour once, not the half hour twice.
    let lost = BudgetUsage::metered(Some(&first), "team-a", &b, 36.0, at("2026-11-26T11:00:00Z"));
    let kept = BudgetUsage::metered(Some(&later), "team-a", &b, 36.0, at("2026-11-26T11:00:00Z"));
    assert!((lost.spent_usd - 36.0).abs() < 1e-9);
    assert!((kept.spent_usd - 36.0).abs() < 1e-9);
    // The same refresh twice credits nothing the second time.
    let again = BudgetUsage::metered(Some(&kept), "team-a", &b, 36.0, at("2026-11-26T11:00:00Z"));
    assert_eq!(again, kept);
}

#[test]
fn actions_come_into_force_at_their_thresholds_and_a_new_period_lifts_them() {
    use BudgetActionKind::*;
    let b = budget(
        BudgetPeriod::Day,
        100.0,
        &[(100, RefuseNewWork), (50, Notify), (80, SpotOnly)],
    );
    let start = BudgetUsage::metered(None, "ns", &b, 40.0, at("2026-11-26T20:00:00Z"));
    let next = start.next_action.clone().unwrap();
    assert_eq!((next.action, next.at_percent, next.at_usd), (Notify, 50, 50.0));
    assert_eq!(
        next.expected_time,
        Some(time(at("2026-11-26T21:15:00Z").as_second()))
    );
    let t = BudgetUsage::metered(Some(&start), "ns", &b, 40.0, at("2026-11-26T22:00:00Z"));
    assert_eq!(t.in_force, [Notify, SpotOnly], "$80 spent");
    assert!(t.enforces(SpotOnly) && !t.enforces(RefuseNewWork));
    let next = t.next_action.clone().unwrap();
    assert_eq!(next.action, RefuseNewWork);
    assert_eq!(
        next.expected_time,
        Some(time(at("2026-11-26T22:30:00Z").as_second()))
    );
    let over = BudgetUsage::metered(Some(&t), "ns", &b, 40.0, at("2026-11-26T23:30:00Z"));
    assert_eq!(over.in_force, [Notify, SpotOnly, RefuseNewWork]);
    assert_eq!(over.next_action, None);
    // Midnight: only the 30 minutes of the new day count.
    let new_day = BudgetUsage::metered(Some(&over), "ns", &b, 40.0, at("2026-11-27T00:30:00Z"));
    assert!((new_day.spent_usd - 20.0).abs() < 1e-9, "{new_day:?}");
    assert!(new_day.in_force.is_empty());
    assert_eq!(new_day.period_start, time(at("2026-11-27T00:00:00Z").as_second()));
    assert_eq!(new_day.period_end, time(at("2026-11-28T00:00:00Z").as_second()));
}

#[test]
fn a_threshold_the_period_ends_before_has_no_expected_time_and_idle_spends_nothing() {
    let b = budget(BudgetPeriod::Day, 100.0, &[]);
    let late = BudgetUsage::metered(None, "ns", &b, 10.0, at("2026-11-26T23:00:00Z"));
    assert_eq!(late.next_action.unwrap().expected_time, None);
    let idle = BudgetUsage::metered(None, "ns", &b, 0.0, at("2026-11-26T01:00:00Z"));
    let still = BudgetUsage::metered(Some(&idle), "ns", &b, 0.0, at("2026-11-26T09:00:00Z"));
    assert_eq!(still.spent_usd, 0.0);
    assert_eq!(still.next_action.unwrap().expected_time, None);
}
