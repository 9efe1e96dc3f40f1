//! Issue 50 item 3: a stockout is remembered per (project, zone, accelerator, capacity kind)
//! across objects. A hundred slices on a zone out of stock make at most one create per backoff
//! window (5, 10, 20, 30 minutes), measured in the emulator's call log; every one of them shows
//! until when the zone is not asked again; and once the zone is restocked the next probe's node
//! coming up lets them all through, each created exactly once.
//!
//! The clock is moved by the test alone (never while waiting for the controller), so what
//! happens inside a window and when the others follow the probe is decided by emulated time, not
//! by how fast the machine is.

use std::time::Duration;

use chrono::{DateTime, Utc};
use gcp_emulator::{CallRecord, CapacityCause, CapacityKind, Code, ErrorShape, Fault, StockSpec};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::{TpuSlice, TpuSlicePhase},
};
use tpu_operator_controller::{
    kinds::tpu_slice,
    never_shutdown,
    runtime::capacity::{
        memory,
        metrics::{PlaceLabels, WithheldLabels},
    },
};

const ZONE: &str = "us-east5-b";
const SLICES: usize = 100;

fn slice(name: &str) -> TpuSlice {
    slice_in(name, "demo-project")
}

fn slice_in(name: &str, project: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "project": project,
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"onDemand": {}},
        }
    }))
    .expect("TpuSlice fixture")
}

fn stock(chips: u64) -> StockSpec {
    StockSpec {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
        kind: CapacityKind::OnDemand,
        chips,
        steps: Vec::new(),
        refill: None,
    }
}

fn creates(env: &TestEnv) -> Vec<CallRecord> {
    env.gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "tpu" && c.method == "nodes.create")
        .collect()
}

/// Until when the memory blocks the place (its gauge), as Unix seconds; 0: no block recorded.
fn blocked_until(env: &TestEnv) -> i64 {
    blocked_until_in(env, "demo-project")
}

fn blocked_until_in(env: &TestEnv, project: &str) -> i64 {
    let labels = PlaceLabels {
        project: project.into(),
        zone: ZONE.into(),
        accelerator: "v6e-8".into(),
        kind: "onDemand",
    };
    env.ctx
        .metrics
        .capacity
        .blocked_until
        .get_or_create(&labels)
        .get()
}

fn unix(t: DateTime<Utc>) -> i64 {
    t.timestamp()
}

/// Waits in real time, without moving the clock, until `done` holds. The clock stands still, so
/// the limit bounds only how long a failing test hangs: a hundred slices' passes took over a
/// minute beside two other builds on two cores.
async fn settle(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Moves the clock to just before `until` in steps, giving every slice time to poll (and be
/// held back) at each.
async fn walk_to(env: &TestEnv, until: i64) {
    let step = chrono::Duration::seconds(30);
    while unix(env.gcp.clock().now() + step) < until {
        env.gcp.clock().advance(step.to_std().unwrap());
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
}

fn advance_to(env: &TestEnv, until: i64) {
    let now = unix(env.gcp.clock().now());
    if until > now {
        env.gcp.clock().advance(Duration::from_secs((until - now) as u64));
    }
}

fn blocked_with_expiry(s: &TpuSlice, until: &str) -> bool {
    let Some(st) = s.status.as_ref() else {
        return false;
    };
    let reconciling = find_condition(&st.conditions, types::RECONCILING);
    let stalled = find_condition(&st.conditions, types::STALLED);
    let capacity = find_condition(&st.conditions, types::CAPACITY_AVAILABLE);
    st.phase == TpuSlicePhase::Waiting
        && reconciling.is_some_and(|c| {
            c.status == "True"
                && c.reason == "WaitingForCapacity"
                && c.message.contains(&format!("v6e-8 onDemand capacity in {ZONE}"))
                && c.message.contains(&format!("not asked again until {until}"))
        })
        && stalled.is_none_or(|c| c.status == "False")
        && capacity.is_some_and(|c| c.status == "False" && c.reason == "Stockout")
}

#[tokio::test]
async fn a_hundred_slices_probe_a_stocked_out_zone_once_per_backoff_window() {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env.gcp.set_stock(stock(0));
    for i in 0..SLICES {
        env.create(&slice(&format!("s-{i:03}"))).await;
    }
    let burst = first_answer(&env).await;
    let start = burst[0].time;
    let probes = four_windows(&env).await;
    let minutes: Vec<i64> = probes.iter().map(|p| (*p - start).num_minutes()).collect();
    println!(
        "stockout memory: {SLICES} slices, {} creates before the first answer, then one probe at minutes {minutes:?}",
        burst.len()
    );
    assert!(env.gcp.nodes().is_empty());
    let withheld = env
        .ctx
        .metrics
        .capacity
        .withheld
        .get_or_create(&WithheldLabels { kind: "onDemand" })
        .get();
    assert!(withheld >= SLICES as u64, "{withheld} creates held back");
    refilled(&env, start).await;
}

/// The first answer blocks the place, and every slice comes to show until when. Creates
/// already on their way (at most one per worker) are not held back.
async fn first_answer(env: &TestEnv) -> Vec<CallRecord> {
    settle("the first stockout", || blocked_until(env) > 0).await;
    let until = blocked_until(env);
    let shown = DateTime::from_timestamp(until, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for i in 0..SLICES {
        env.wait_for::<TpuSlice, _>(
            &format!("s-{i:03}"),
            "Waiting with the block's expiry",
            Duration::ZERO,
            |s| blocked_with_expiry(s, &shown),
        )
        .await;
    }
    let burst = creates(env);
    assert!(
        (1..=8).contains(&burst.len()),
        "{} creates before the first answer",
        burst.len()
    );
    assert!(burst.iter().all(|c| c.status == 429), "{burst:#?}");
    burst
}

/// Four windows: 5, 10, 20, 30 minutes. None is asked inside one; one probe at its end. Returns
/// when each probe asked.
async fn four_windows(env: &TestEnv) -> Vec<DateTime<Utc>> {
    let mut probes = Vec::new();
    for strikes in 1..=4u32 {
        let until = blocked_until(env);
        let before = creates(env).len();
        walk_to(env, until).await;
        assert_eq!(
            creates(env).len(),
            before,
            "a create inside window {strikes} (until {until})"
        );
        advance_to(env, until);
        settle("the probe's stockout", || blocked_until(env) > until).await;
        let after = creates(env);
        assert_eq!(
            after.len(),
            before + 1,
            "one probe at the end of window {strikes}"
        );
        let probe = after.last().unwrap().time;
        assert_eq!(
            blocked_until(env),
            unix(probe + memory::backoff(strikes + 1)),
            "window {} is {}",
            strikes + 1,
            memory::backoff(strikes + 1)
        );
        probes.push(probe);
    }
    probes
}

/// Restocked during the 30-minute window: nobody asks before it ends; then one probe, the others
/// wait for its node rather than all asking at once, and then every slice is created once.
async fn refilled(env: &TestEnv, start: DateTime<Utc>) {
    let refilled = env.gcp.clock().now();
    env.gcp.set_stock(stock(8 * SLICES as u64));
    let until = blocked_until(env);
    let before = creates(env).len();
    walk_to(env, until).await;
    assert_eq!(
        creates(env).len(),
        before,
        "asked inside the window after the refill"
    );
    advance_to(env, until);
    settle("the probe after the refill", || creates(env).len() > before).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        creates(env).len(),
        before + 1,
        "others asked before the probe's node came up"
    );
    // The probe's node comes up: everyone may ask, and the create limiter lets the project's
    // creates through at 86 a minute (91 less 5 %), so the last ones go a minute later.
    let made = || creates(env).iter().filter(|c| c.status == 200).count();
    let probes = made();
    env.gcp.clock().advance(env.gcp.config().durations.tpu_create);
    settle("the first minute's creates", || made() >= probes + 86).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(made(), probes + 86, "one minute's creates");
    env.gcp.clock().advance(Duration::from_secs(60));
    settle("every slice created", || made() >= SLICES).await;
    for i in 0..SLICES {
        env.wait_for::<TpuSlice, _>(&format!("s-{i:03}"), "a node", Duration::ZERO, |s| {
            s.status.as_ref().is_some_and(|st| st.node_name.is_some())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let granted: Vec<CallRecord> = creates(env).into_iter().skip(before).collect();
    assert!(granted.iter().all(|c| c.status == 200), "{granted:#?}");
    let mut ids: Vec<&str> = granted
        .iter()
        .filter_map(|c| c.query.split('&').find(|kv| kv.starts_with("nodeId=")))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        (granted.len(), ids.len()),
        (SLICES, SLICES),
        "each slice created exactly once"
    );
    assert_eq!(env.gcp.nodes().len(), SLICES);
    let last = granted.last().unwrap().time;
    let create = chrono::Duration::from_std(env.gcp.config().durations.tpu_create).unwrap();
    println!(
        "stockout memory: refilled at +{} min; probe at the window's end (+{} min); all {SLICES} created {} s after the refill, {} s after the window's end",
        (refilled - start).num_minutes(),
        (granted[0].time - start).num_minutes(),
        (last - refilled).num_seconds(),
        (last - granted[0].time).num_seconds(),
    );
    let first_share = granted
        .iter()
        .filter(|c| c.time - granted[0].time <= create)
        .count();
    assert_eq!(
        first_share, 87,
        "the probe, then a minute's share of the create limiter as soon as its node is up"
    );
    assert!(
        last - granted[0].time <= create + chrono::Duration::minutes(1),
        "the rest a minute later"
    );
}

fn has_node(s: &TpuSlice) -> bool {
    s.status.as_ref().is_some_and(|st| st.node_name.is_some())
}

fn shown(until: i64) -> String {
    DateTime::from_timestamp(until, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Tenancy: the key carries the project, and only a stockout blocks. An invalid request blocks
/// nobody; team A's stockout does not hold back team B's create in the same zone once stock is
/// back, while team A's next slice still waits out its own place's window.
#[tokio::test]
async fn another_teams_stockout_or_an_invalid_request_blocks_nobody_else() {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.create".into(),
            count: 1,
            code: Code::InvalidArgument,
            message: None,
        })
        .unwrap();
    env.create(&slice("invalid")).await;
    env.wait_for::<TpuSlice, _>("invalid", "InvalidSpec", Duration::ZERO, |s| {
        s.status.as_ref().is_some_and(|st| {
            find_condition(&st.conditions, types::STALLED)
                .is_some_and(|c| c.status == "True" && c.reason == "InvalidSpec")
        })
    })
    .await;
    assert_eq!(blocked_until(&env), 0, "an invalid request blocked the place");
    env.create(&slice("valid")).await;
    env.wait_for::<TpuSlice, _>("valid", "a node", Duration::ZERO, has_node)
        .await;

    // Team A (demo-project) stocks out.
    env.gcp.set_stock(stock(0));
    env.create(&slice("a-1")).await;
    settle("team A's stockout", || blocked_until(&env) > 0).await;
    let until = shown(blocked_until(&env));
    env.wait_for::<TpuSlice, _>("a-1", "blocked", Duration::ZERO, |s| {
        blocked_with_expiry(s, &until)
    })
    .await;

    // Stock is back inside team A's window: team B (its own project) asks and gets its node.
    env.gcp.set_stock(stock(8 * 10));
    env.create(&slice_in("b-1", "team-b")).await;
    env.wait_for::<TpuSlice, _>("b-1", "team B's node", Duration::ZERO, has_node)
        .await;
    assert_eq!(blocked_until_in(&env, "team-b"), 0);

    // Team A's next slice still waits out its project's window, without a call.
    let before = creates(&env).len();
    env.create(&slice("a-2")).await;
    env.wait_for::<TpuSlice, _>("a-2", "blocked", Duration::ZERO, |s| {
        blocked_with_expiry(s, &until)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(creates(&env).len(), before, "team A asked inside its window");
}

/// A stockout that comes back in the create's operation (the call accepted, the operation ending
/// RESOURCE_EXHAUSTED when the node would have been READY): an accepted probe is not a grant, so
/// the others keep waiting for it, and its failed operation blocks the place for the next window.
#[tokio::test]
async fn an_accepted_probe_is_not_a_grant_until_its_node_is_up() {
    const N: usize = 10;
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env.gcp
        .inject(Fault::CapacityError {
            zone: ZONE.into(),
            accelerator: "v6e".into(),
            cause: CapacityCause::Stockout,
            shape: ErrorShape::Operation,
            quota_metric: None,
        })
        .unwrap();
    for i in 0..N {
        env.create(&slice(&format!("op-{i}"))).await;
    }
    // Nobody has heard of a stockout yet: every create is made, and accepted.
    settle("the first creates", || creates(&env).len() >= N).await;
    assert_eq!(creates(&env).len(), N, "{:#?}", creates(&env));
    let create = env.gcp.config().durations.tpu_create;
    env.gcp.clock().advance(create);
    settle("the operations' stockout", || blocked_until(&env) > 0).await;
    let until = blocked_until(&env);
    assert_eq!(until, unix(env.gcp.clock().now() + memory::backoff(1)));

    // The window ends: one probe, accepted; while its operation runs nobody else asks.
    walk_to(&env, until).await;
    assert_eq!(creates(&env).len(), N, "a create inside the window");
    advance_to(&env, until);
    settle("the probe", || creates(&env).len() > N).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        creates(&env).len(),
        N + 1,
        "others asked while the accepted probe's operation ran"
    );
    // Its operation stocks out: the next window is 10 minutes, and still nobody asks.
    env.gcp.clock().advance(create);
    settle("the probe's stockout", || blocked_until(&env) > until).await;
    assert_eq!(
        blocked_until(&env),
        unix(env.gcp.clock().now() + memory::backoff(2))
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(creates(&env).len(), N + 1);
    assert!(env.gcp.nodes().is_empty());
}
