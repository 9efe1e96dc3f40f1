use super::*;
use tpu_operator_api::tpu_policy::{Budget, BudgetAction, TpuPolicySpec, TpuPolicyStatus};

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn policy(record: Vec<BudgetUsage>) -> TpuPolicy {
    use BudgetActionKind::*;
    let budget = Budget {
        period: BudgetPeriod::Day,
        limit_usd: 100.0,
        actions: [(50, Notify), (80, Notify), (90, SpotOnly), (100, RefuseNewWork)]
            .into_iter()
            .map(|(at_percent, action)| BudgetAction { at_percent, action })
            .collect(),
    };
    let mut p = TpuPolicy::new(
        "teams",
        TpuPolicySpec {
            budgets: Some(vec![budget]),
            ..Default::default()
        },
    );
    p.status = Some(TpuPolicyStatus {
        budgets: record,
        ..Default::default()
    });
    p
}

fn rates(pairs: &[(&str, f64)]) -> HashMap<String, f64> {
    pairs.iter().map(|(n, r)| (n.to_string(), *r)).collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn each_threshold_is_reached_once_per_period_and_per_namespace() {
    let ns = names(&["a", "b"]);
    let burn = rates(&[("a", 60.0), ("b", 1.0)]);
    let (first, reached) = meter(&policy(vec![]), &ns, &burn, &[], at("2026-11-26T08:00:00Z"));
    assert!(reached.is_empty());
    // 85 minutes at $60/h: $85, past the two Notify thresholds at once.
    let p = policy(first);
    let (second, reached) = meter(&p, &ns, &burn, &[], at("2026-11-26T09:25:00Z"));
    let got: Vec<(&str, u32)> = reached
        .iter()
        .map(|r| (r.usage.namespace.as_str(), r.at_percent))
        .collect();
    assert_eq!(got, [("a", 50), ("a", 80)]);
    // The write was lost (the cache still shows `first`) but this process metered `second`: it
    // meters on from there, crediting nothing twice and announcing nothing twice.
    let (third, reached) = meter(&p, &ns, &burn, &second, at("2026-11-26T09:31:00Z"));
    let got: Vec<(BudgetActionKind, u32)> = reached.iter().map(|r| (r.action, r.at_percent)).collect();
    assert_eq!(got, [(BudgetActionKind::SpotOnly, 90)], "$91 spent");
    assert!((third[0].spent_usd - 91.0).abs() < 1e-9, "{third:?}");
    // Next day: a new period, nothing in force, the thresholds can be reached again.
    let (next_day, reached) = meter(&policy(third), &ns, &burn, &[], at("2026-11-27T00:10:00Z"));
    assert!(next_day[0].in_force.is_empty() && reached.is_empty());
    assert!((next_day[0].spent_usd - 10.0).abs() < 1e-9);
}

#[test]
fn a_namespace_no_longer_selected_is_dropped_and_a_new_one_starts_at_zero() {
    let (first, _) = meter(
        &policy(vec![]),
        &names(&["a"]),
        &rates(&[("a", 60.0)]),
        &[],
        at("2026-11-26T08:00:00Z"),
    );
    let (later, _) = meter(
        &policy(first),
        &names(&["c"]),
        &rates(&[("a", 60.0), ("c", 60.0)]),
        &[],
        at("2026-11-26T09:00:00Z"),
    );
    assert_eq!(later.len(), 1);
    assert_eq!((later[0].namespace.as_str(), later[0].spent_usd), ("c", 0.0));
}
