//! A period budget crossed while the operator is killed at random points (`crash-bench
//! --budget`, and the `budget_crossing` test). One on-demand slice burns a day budget with four
//! thresholds on the emulated clock, 10 s a tick; in about one tick in four the in-process
//! operator (controllers and usage report) is killed 0–80 ms after the clock moved, inside the
//! refresh that meters the tick (one every 50 ms), and a fresh one takes over from what the API
//! server holds. One write in four to the API server (statuses, Events) fails with a 500
//! throughout.
//!
//! What it checks:
//! - **No double counting and no lost interval.** One slice burns at one rate, so every record
//!   the report writes must say `spent = rate × (accountedThrough − start)`, `start` being the
//!   moment the first record implies. The largest difference either way is reported; more than
//!   one cent plus one tick of burn is a violation.
//! - **No missed action.** Every threshold's action is in force by the end, each no later than
//!   [`WITHIN`] emulated seconds after its crossing.
//! - **Each announcement once.** One `BudgetThresholdReached` Event per threshold on the policy:
//!   none missing, none twice.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::events::v1::Event;
use kube::{Api, api::ListParams};
use rand::Rng;
use serde_json::json;
use tpu_operator_api::{
    TpuSlice,
    conditions::reasons,
    tpu_policy::{BudgetActionKind, BudgetUsage, CapacityKind, TpuPolicy},
};

use crate::world::{NAMESPACE, World};

/// Emulated time per tick.
const TICK: Duration = Duration::from_secs(10);
/// The bound on an action's delay after its threshold, in emulated seconds.
pub const WITHIN: f64 = 60.0;
const POLICY: &str = "budget-crossing";
/// The thresholds and their actions (percent of the limit).
const THRESHOLDS: [(u32, BudgetActionKind); 4] = [
    (25, BudgetActionKind::Notify),
    (50, BudgetActionKind::SpotOnly),
    (75, BudgetActionKind::SuspendAtCheckpoint),
    (100, BudgetActionKind::RefuseNewWork),
];

/// What one run saw.
#[derive(Clone, Debug, Default)]
pub struct BudgetCrossing {
    pub seed: u64,
    pub kills: u32,
    /// API server writes refused by injection.
    pub refused_writes: u64,
    /// The largest `spent − rate × (accountedThrough − start)` seen, US dollars (positive: counted
    /// twice; negative: an interval lost).
    pub max_over_usd: f64,
    pub max_under_usd: f64,
    /// Emulated seconds from each threshold's crossing to its action in force (`None`: never).
    pub delays: BTreeMap<u32, Option<f64>>,
    /// `BudgetThresholdReached` Events on the policy per threshold.
    pub announced: BTreeMap<u32, usize>,
    pub violations: Vec<String>,
}

impl BudgetCrossing {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One seeded run in a fresh world.
pub async fn run(seed: u64) -> BudgetCrossing {
    let mut rng = crate::rng(seed);
    let (mut world, rate, limit) = set_up(seed).await;

    let mut seen = BudgetCrossing {
        seed,
        ..Default::default()
    };
    let mut start: Option<f64> = None;
    let mut in_force_at: BTreeMap<u32, f64> = BTreeMap::new();
    let tolerance = 0.01 + rate * TICK.as_secs_f64() / 3600.0;
    for _ in 0..400 {
        world.advance(TICK);
        if rng.random_ratio(1, 4) {
            // Within the refresh that meters this tick (one every 50 ms of real time).
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
            world.kill_operator().await;
            seen.kills += 1;
            world.start_operator().await;
        }
        let record = metered_to_now(&world).await;
        // Judged from the first record with spend: the slice bills once its status says so.
        let Some(r) = record.filter(|r| r.spent_usd > 0.0) else {
            continue;
        };
        let through = r.accounted_through.0.as_second() as f64;
        let start = *start.get_or_insert(through - r.spent_usd / rate * 3600.0);
        let drift = r.spent_usd - rate * (through - start) / 3600.0;
        seen.max_over_usd = seen.max_over_usd.max(drift);
        seen.max_under_usd = seen.max_under_usd.min(drift);
        if drift.abs() > tolerance {
            seen.violations.push(format!(
                "spent ${:.4} at {through}, ${drift:+.4} off the burn since {start}",
                r.spent_usd
            ));
        }
        for (percent, action) in THRESHOLDS {
            if r.enforces(action) {
                in_force_at.entry(percent).or_insert(through);
            }
        }
        if in_force_at.len() == THRESHOLDS.len() {
            break;
        }
    }
    let start = start.unwrap_or_default();
    let crossed = |percent: u32| start + limit * f64::from(percent) / 100.0 / rate * 3600.0;
    judge_delays(&mut seen, crossed, &in_force_at);
    seen.refused_writes = world.kube_faults.injected();
    world.kube_faults.clear();
    // The last announcements may still be on their way.
    tokio::time::sleep(Duration::from_millis(300)).await;
    seen.announced = announcements(&world).await;
    judge_announcements(&mut seen);
    world.kill_operator().await;
    seen
}

/// A fresh world with the operator running, the day budget's policy, the slice that burns it
/// and the refused writes in place; with the slice's rate and the budget's limit, US dollars.
async fn set_up(seed: u64) -> (World, f64, f64) {
    let mut world = World::start().await;
    world.tenancy = true;
    world.start_operator().await;
    let shape = tpu_operator_api::accelerator::parse_accelerator_type("v6e-8").expect("shape");
    let rate = tpu_operator_controller::governance::pricing::PriceTable::default()
        .slice_per_hour(&shape, CapacityKind::OnDemand)
        .0;
    // About 12 minutes of the slice: 72 ticks.
    let limit = (rate * 0.19 * 100.0).round() / 100.0;
    create_policy(&world, limit).await;
    world.create(&slice()).await;
    // And one write in four refused with a 500, the budget's Events and records included.
    world.kube_faults.random_writes(seed, 0.25, 500);
    (world, rate, limit)
}

/// Each threshold's delay, from its crossing (`crossed`, emulated seconds) to its action in
/// force: a violation when later than [`WITHIN`], or never.
fn judge_delays(seen: &mut BudgetCrossing, crossed: impl Fn(u32) -> f64, in_force_at: &BTreeMap<u32, f64>) {
    for (percent, _) in THRESHOLDS {
        let delay = in_force_at.get(&percent).map(|t| t - crossed(percent));
        match delay {
            Some(d) if d <= WITHIN => {}
            Some(d) => seen
                .violations
                .push(format!("the {percent} % action came into force {d:.0} s late")),
            None => seen
                .violations
                .push(format!("the {percent} % action never came into force")),
        }
        seen.delays.insert(percent, delay);
    }
}

/// Each threshold announced once: a violation for every threshold with no
/// `BudgetThresholdReached` Event, or more than one.
fn judge_announcements(seen: &mut BudgetCrossing) {
    for (percent, _) in THRESHOLDS {
        let n = seen.announced.get(&percent).copied().unwrap_or(0);
        if n != 1 {
            seen.violations
                .push(format!("{n} BudgetThresholdReached Events for {percent} %"));
        }
    }
}

/// The namespace's record once the report has metered up to the emulated now (or after 10 s of
/// real time, the last one read).
async fn metered_to_now(world: &World) -> Option<BudgetUsage> {
    let now = world.gcp.clock().now().timestamp();
    let mut last = None;
    for _ in 0..1_000 {
        last = record(world).await;
        if last
            .as_ref()
            .is_some_and(|r| r.accounted_through.0.as_second() >= now)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    last
}

async fn record(world: &World) -> Option<BudgetUsage> {
    let policy = Api::<TpuPolicy>::all(world.client.clone())
        .get(POLICY)
        .await
        .ok()?;
    policy
        .status?
        .budgets
        .into_iter()
        .find(|b| b.namespace == NAMESPACE)
}

/// `BudgetThresholdReached` Events on the policy, by the threshold their note names.
async fn announcements(world: &World) -> BTreeMap<u32, usize> {
    let events = Api::<Event>::namespaced(world.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("list Events");
    let mut by_percent = BTreeMap::new();
    for e in events.items {
        let on_policy = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(POLICY);
        if !on_policy || e.reason.as_deref() != Some(reasons::BUDGET_THRESHOLD_REACHED) {
            continue;
        }
        let note = e.note.unwrap_or_default();
        if let Some(percent) = THRESHOLDS
            .iter()
            .map(|(p, _)| *p)
            .find(|p| note.contains(&format!("({p} % reached)")))
        {
            *by_percent.entry(percent).or_insert(0) += 1;
        }
    }
    by_percent
}

async fn create_policy(world: &World, limit: f64) {
    let actions: Vec<_> = THRESHOLDS
        .iter()
        .map(|(p, a)| json!({"atPercent": p, "action": a.as_str()}))
        .collect();
    let policy: TpuPolicy = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "namespaces": [NAMESPACE],
            "allowedBuckets": ["*"],
            "budgets": [{"period": "Day", "limitUsd": limit, "actions": actions}],
        },
    }))
    .expect("policy");
    Api::<TpuPolicy>::all(world.client.clone())
        .create(&Default::default(), &policy)
        .await
        .expect("create the policy");
}

/// An on-demand v6e-8: one constant rate from its create call on.
fn slice() -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": "burner"},
        "spec": {
            "zone": "us-east5-b",
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"onDemand": {}},
        },
    }))
    .expect("slice")
}

/// `crash-bench --budget N`: `runs` seeded runs from `first_seed`; prints one line per run with
/// a broken promise and a summary. Whether every run kept every promise.
pub async fn bench(runs: u64, first_seed: u64) -> bool {
    let (mut kills, mut refused, mut failed) = (0u64, 0u64, 0u64);
    let (mut over, mut under, mut slowest) = (0f64, 0f64, 0f64);
    let (mut missed, mut twice) = (0usize, 0usize);
    for seed in first_seed..first_seed + runs {
        let seen = run(seed).await;
        kills += u64::from(seen.kills);
        refused += seen.refused_writes;
        over = over.max(seen.max_over_usd);
        under = under.min(seen.max_under_usd);
        slowest = seen.delays.values().flatten().fold(slowest, |a, d| a.max(*d));
        missed += seen.delays.values().filter(|d| d.is_none()).count();
        missed += THRESHOLDS.len() - seen.announced.len();
        twice += seen
            .announced
            .values()
            .map(|n| n.saturating_sub(1))
            .sum::<usize>();
        if !seen.ok() {
            failed += 1;
            println!("seed {seed}: {:?}", seen.violations);
        }
    }
    println!(
        "budget crossings: {runs} runs, {kills} kills, {refused} API writes refused; spend off the \
         burn by ${under:+.4} to ${over:+.4}; slowest action {slowest:.0} s after its threshold \
         (bound {WITHIN:.0}); {missed} actions or announcements missed, {twice} announced twice; \
         {failed} runs failed"
    );
    failed == 0
}
