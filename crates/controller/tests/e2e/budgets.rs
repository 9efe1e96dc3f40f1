//! A period budget through the path a platform team takes: a TpuPolicy with `spec.budgets`, the
//! controllers and the usage report, a slice burning the namespace's budget on the emulated
//! clock. Each threshold's action comes into force within 60 emulated seconds of being crossed,
//! with one Event on the policy and one on the slice; SpotOnly refuses an on-demand slice and
//! admits a Spot one; RefuseNewWork refuses even Spot; the next day re-admits the refused slice.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    TpuSlice,
    conditions::reasons,
    tpu_policy::{BudgetActionKind, BudgetUsage, CapacityKind, TpuPolicy},
};
use tpu_operator_controller::governance::tenancy;

use crate::tenant::{self, is_ready, slice_stalled};

/// Emulated time per tick of the test; each tick then waits for the report (every 50 ms real in
/// the harness) to have metered up to it, so the figures do not depend on the machine's speed.
const TICK: Duration = Duration::from_secs(10);
/// The bound: an action in force within 60 emulated seconds of its threshold.
const WITHIN: f64 = 60.0;

pub(crate) async fn tick(env: &TestEnv) {
    env.gcp.clock().advance(TICK);
    let now = env.gcp.clock().now().timestamp();
    for _ in 0..500 {
        if record(env)
            .await
            .is_some_and(|r| r.accounted_through.0.as_second() >= now)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the report did not meter up to {now}: {:?}", record(env).await);
}

pub(crate) async fn record(env: &TestEnv) -> Option<BudgetUsage> {
    let p: TpuPolicy = Api::<TpuPolicy>::all(env.client.clone())
        .get(&tenant::policy_name(&env.ns))
        .await
        .unwrap();
    p.status?.budgets.into_iter().find(|b| b.namespace == env.ns)
}

/// Ticks until `action` is in force; returns the record then and how many emulated seconds of
/// burn past the threshold it took (`rate`: the namespace's US dollars per hour).
async fn until_in_force(
    env: &TestEnv,
    action: BudgetActionKind,
    at_usd: f64,
    rate: f64,
) -> (BudgetUsage, f64) {
    for _ in 0..2_000 {
        tick(env).await;
        if let Some(r) = record(env).await
            && r.enforces(action)
        {
            let late = (r.spent_usd - at_usd) / rate * 3600.0;
            return (r, late);
        }
    }
    panic!("{action:?} never came into force: {:?}", record(env).await);
}

/// A v6e-8's US dollars per hour, as the price table behind `estimatedCost` has it.
fn v6e_8_per_hour(ctx: &tpu_operator_controller::Context, capacity: CapacityKind) -> f64 {
    let shape = tpu_operator_api::accelerator::parse_accelerator_type("v6e-8").unwrap();
    ctx.tenancy.prices.slice_per_hour(&shape, capacity).0
}

async fn slice_events(env: &TestEnv, name: &str) -> Vec<String> {
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), &env.ns)
        .list(&Default::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reasons::BUDGET_THRESHOLD_REACHED))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn a_day_budget_notifies_then_allows_spot_only_then_refuses_and_the_next_day_readmits() {
    let mut env = TestEnv::start().await;
    let ctx = tenant::start(
        &mut env,
        Some(json!({"budgets": [{"period": "Day", "limitUsd": 4.0, "actions": [
            {"atPercent": 25, "action": "Notify"},
            {"atPercent": 40, "action": "SpotOnly"},
            {"atPercent": 100, "action": "RefuseNewWork"},
        ]}]})),
    )
    .await;
    env.spawn(tenancy::report::run(
        ctx.tenancy.clone(),
        ctx.clock.clone(),
        ctx.config.clone(),
        tpu_operator_controller::never_shutdown(),
    ));
    let first = env
        .create(&tenant::slice("first", json!({"capacity": {"onDemand": {}}})))
        .await;
    let first_name = first.metadata.name.clone().unwrap();
    env.wait_for::<TpuSlice, _>(&first_name, "Ready", Duration::from_secs(1), is_ready)
        .await;
    let rate = v6e_8_per_hour(&ctx, CapacityKind::OnDemand);

    let (notify, late_notify) = until_in_force(&env, BudgetActionKind::Notify, 1.0, rate).await;
    assert_eq!(
        notify.next_action.as_ref().unwrap().action,
        BudgetActionKind::SpotOnly
    );
    assert!(notify.next_action.as_ref().unwrap().expected_time.is_some());
    let (_, late_spot) = until_in_force(&env, BudgetActionKind::SpotOnly, 1.6, rate).await;
    // The namespace's own view, which its `view` role reads (the RBAC suite reads it as one).
    let view = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), &env.ns)
        .get(tenancy::budget_view::CONFIGMAP)
        .await
        .unwrap();
    let line = &view.data.unwrap()[&format!("{}.Day", tenant::policy_name(&env.ns))];
    assert!(
        line.contains("of $4.00") && line.contains("in force: Notify, SpotOnly"),
        "{line}"
    );
    assert!(
        line.contains("next: RefuseNewWork at $4.00 (100 %), expected "),
        "{line}"
    );
    let notes = slice_events(&env, "first").await;
    assert_eq!(notes.len(), 2, "Notify then SpotOnly, once each: {notes:?}");
    assert!(notes.iter().any(|n| n.contains("25 % reached")), "{notes:?}");

    env.create(&tenant::slice("on-demand", json!({"capacity": {"onDemand": {}}})))
        .await;
    let refused = env
        .wait_for::<TpuSlice, _>("on-demand", "refused", Duration::ZERO, |s| {
            slice_stalled(s).is_some()
        })
        .await;
    let (reason, message) = slice_stalled(&refused).unwrap();
    assert_eq!(reason, reasons::POLICY_DENIED);
    assert!(
        message.contains(&tenant::denied_by(&env.ns, "budgets")),
        "{message}"
    );
    assert!(message.contains("SpotOnly is in force"), "{message}");
    env.create(&tenant::slice("spot", json!({}))).await;
    env.wait_for::<TpuSlice, _>("spot", "Ready", Duration::from_secs(1), is_ready)
        .await;
    assert!(
        !record(&env)
            .await
            .unwrap()
            .enforces(BudgetActionKind::RefuseNewWork),
        "the spot slice took too long to start for the measurement"
    );

    let spot_rate = rate + v6e_8_per_hour(&ctx, CapacityKind::Spot);
    let (over, late_refuse) = until_in_force(&env, BudgetActionKind::RefuseNewWork, 4.0, spot_rate).await;
    env.create(&tenant::slice("late", json!({}))).await;
    let late = env
        .wait_for::<TpuSlice, _>("late", "refused", Duration::ZERO, |s| slice_stalled(s).is_some())
        .await;
    assert!(slice_stalled(&late).unwrap().1.contains("RefuseNewWork"));
    println!(
        "budget actions in force after their threshold (emulated s): Notify {late_notify:.0}, \
         SpotOnly {late_spot:.0}, RefuseNewWork {late_refuse:.0}"
    );
    for late in [late_notify, late_spot, late_refuse] {
        assert!((0.0..=WITHIN).contains(&late), "{late} s");
    }

    the_next_day_readmits_the_refused(&env, &over).await;
}

/// A minute past midnight UTC after `over`: the new day's record starts from its first minute
/// and the refused slices are admitted.
async fn the_next_day_readmits_the_refused(env: &TestEnv, over: &BudgetUsage) {
    let now: Timestamp = over.accounted_through.0;
    let day = tpu_operator_api::tpu_policy::BudgetPeriod::Day;
    let midnight = day.next_start(day.start_of(now));
    let to_next_day = (midnight.as_second() - now.as_second() + 60) as u64;
    env.gcp.clock().advance(Duration::from_secs(to_next_day));
    for name in ["on-demand", "late"] {
        env.wait_for::<TpuSlice, _>(name, "admitted", Duration::ZERO, |s| slice_stalled(s).is_none())
            .await;
    }
    let day = record(env).await.unwrap();
    assert_eq!(day.period_start.0, midnight);
    assert!(day.in_force.is_empty(), "{day:?}");
    assert!(day.spent_usd < 1.0, "{day:?}");
}
