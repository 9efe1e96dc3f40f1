//! The create limiter through the real path: objects → controllers → gcp-emulator with Google's
//! per-minute rate quotas switched on. With the production defaults, 200 slices created at once
//! make their creates at the quota's pace (86 a minute, under Google's 91) with no refusal and
//! each exactly once, the ones that wait saying their place and turn; a quota lower than
//! configured is refused once and then paused for, not retried blindly; Dataproc batches and
//! Vertex jobs wait their turn in their own lines.
//!
//! The clock is moved by the test alone, a minute at a time, so what is sent in a minute is
//! decided by emulated time, not by how fast the machine is.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use gcp_emulator::{CallRecord, QuotaGroup, RateQuota};
use kube::ResourceExt;
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    preprocess_batch::PreprocessBatch,
    tpu_slice::{TpuSlice, TpuSlicePhase},
    training_pipeline::{StageName, TrainingPipeline},
};
use tpu_operator_controller::{
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
    runtime::capacity::Limits,
};

/// A spot v6e-8 slice in us-east5-b (the tenancy suites' fixture).
fn slice(name: &str) -> TpuSlice {
    crate::tenant::slice(name, json!({}))
}

fn calls(env: &TestEnv, service: &str, method: &str) -> Vec<CallRecord> {
    env.gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == service && c.method == method)
        .collect()
}

/// Waits in real time, without moving the clock, until `done` holds (the suite's wait limit
/// bounds it: a hang, not a slow machine).
async fn settle(env: &TestEnv, what: &str, done: impl Fn() -> bool) {
    env.until(what, Duration::ZERO, async || done()).await
}

/// Real time in which a wait must see progress. Only a hang takes this long: it bounds a stall,
/// never the whole wait.
const STALL: Duration = Duration::from_secs(120);

/// Waits in real time, without moving the clock, until `count()` reaches `n`; the count then.
/// Load-proof: a few hundred slices' passes take as long as the machine makes them (151 of 214
/// had said they wait after a fixed 180 s beside five builds), so the only limit is [`STALL`]
/// without the count moving. A count that stops short of `n`, the behaviour under test failing,
/// still fails, saying how far it got.
async fn settle_count<F: Future<Output = usize>>(what: &str, n: usize, count: impl FnMut() -> F) -> usize {
    settle_count_or(what, n, count, String::new).await
}

/// [`settle_count`] whose failure adds what `stalled()` describes.
async fn settle_count_or<F: Future<Output = usize>>(
    what: &str,
    n: usize,
    mut count: impl FnMut() -> F,
    stalled: impl FnOnce() -> String,
) -> usize {
    let mut seen = count().await;
    let mut moved = tokio::time::Instant::now();
    while seen < n {
        if moved.elapsed() >= STALL {
            panic!("{what}: {seen} of {n}, and no more for {STALL:?}{}", stalled());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = count().await;
        if now != seen {
            (seen, moved) = (now, tokio::time::Instant::now());
        }
    }
    seen
}

/// Gives the controllers `real` of real time with the clock still: every waiter polls, and
/// any call the limiter would wrongly let through is made.
async fn hold(real: Duration) {
    tokio::time::sleep(real).await;
}

fn waiting_for_its_turn(s: &TpuSlice) -> Option<String> {
    let st = s.status.as_ref()?;
    let c = find_condition(&st.conditions, types::RECONCILING)?;
    (st.phase == TpuSlicePhase::Pending && c.status == "True" && c.reason == "WaitingForCreateRate")
        .then(|| c.message.clone())
}

fn minute_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

/// Successful creates per emulated minute.
fn per_minute(creates: &[CallRecord]) -> BTreeMap<i64, usize> {
    let mut m = BTreeMap::new();
    for c in creates.iter().filter(|c| c.status == 200) {
        *m.entry(minute_of(c.time)).or_default() += 1;
    }
    m
}

const SLICES: usize = 200;

/// A context for hundreds of waiters: they look again at their turn or at `stable`, and with the
/// clock standing that is every `stable`. The suites' 500 ms would have 200 waiters take ~400
/// passes a second, more than a debug build on two cores runs, and starve the slices not yet
/// seen once (production looks every 5 minutes, and at each turn). 5 s starved them too beside
/// CPU-bound loops (134 of 214 had said they wait, none more in 120 s): at 30 s the waiters ask
/// for a few passes a second, whatever the machine. `namespace`: `None` watches every namespace.
async fn context_for_many(env: &TestEnv, namespace: Option<&str>) -> Arc<tpu_operator_controller::Context> {
    let spec = test_kit::ContextSpec {
        cluster_id: "test-cluster".into(),
        default_project: "demo-project".into(),
        namespace: namespace.map(str::to_owned),
        concurrency: 8,
        polls: test_kit::Polls {
            stable: Duration::from_secs(30),
            ..test_kit::Polls::fast()
        },
        tenancy: Some(tpu_operator_controller::governance::tenancy::WithoutPolicy::Allow),
    };
    Arc::new(
        spec.build(&env.client, &env.gcp)
            .await
            .expect("controller context"),
    )
}

#[tokio::test]
async fn two_hundred_slices_create_at_the_quota_s_pace_each_once_and_none_refused() {
    let mut env = TestEnv::start().await;
    env.gcp.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: None,
    });
    let ctx = context_for_many(&env, Some(&env.ns)).await;
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    for i in 0..SLICES {
        env.create(&slice(&format!("s-{i:03}"))).await;
    }
    let creates = || calls(&env, "tpu", "nodes.create");
    // Minute by minute: 86 (91 less 5 %), then the rest.
    let mut expected = 0;
    let mut minutes = 0;
    while expected < SLICES {
        expected = (expected + 86).min(SLICES);
        let what = format!("{expected} creates");
        settle_count(&what, expected, || std::future::ready(creates().len())).await;
        hold(Duration::from_secs(2)).await;
        assert_eq!(creates().len(), expected, "no more than the minute's share");
        if expected < SLICES {
            // Every slice not yet created says it waits, with its place and its turn.
            let m = settle_waiting(&env, SLICES - expected).await;
            for part in [" of ", "in project demo-project's line of TPU creates", "due at "] {
                assert!(m.contains(part), "{part:?} in {m:?}");
            }
            env.gcp.clock().advance(Duration::from_secs(60));
            minutes += 1;
        }
    }
    let creates = creates();
    let refused = creates.iter().filter(|c| c.status != 200).count();
    let minutes_used = per_minute(&creates);
    println!(
        "create limiter: {SLICES} slices, creates per emulated minute {:?}, {refused} refused",
        minutes_used.values().collect::<Vec<_>>()
    );
    assert_eq!(refused, 0, "{creates:#?}");
    assert_eq!(env.gcp.rate_quota_refusals(QuotaGroup::TpuCreate), 0);
    assert!(minutes_used.values().all(|n| *n <= 86), "{minutes_used:?}");
    assert_eq!(minutes, SLICES.div_ceil(86) - 1);
    // Each slice's node created once: as many nodes as slices, as many creates as nodes.
    assert_eq!(env.gcp.nodes().len(), SLICES);
    assert_eq!(creates.len(), SLICES);
}

/// Waits until at least all but 2 % of `n` slices say they wait their turn (bounded by a stall
/// only, as [`settle_count`]); how many do.
async fn settle_nearly_all_waiting(env: &TestEnv, n: usize) -> usize {
    settle_waiting_at_least(env, n - n / 50).await.0
}

/// Waits until `n` slices say they wait their turn; one of their messages.
async fn settle_waiting(env: &TestEnv, n: usize) -> String {
    settle_waiting_at_least(env, n).await.1
}

/// Waits until at least `n` slices say they wait their turn; how many do, and one of their
/// messages. A liveness bound, not a figure: the first passes of a few hundred slices take as long
/// as the machine makes them (more than 90 s once with the whole suite on two cores), so the limit
/// is a stall ([`settle_count`]), not the whole wait. A stall names what the slices that are
/// neither created nor waiting say, so a starved waiter and a wrong status tell apart.
async fn settle_waiting_at_least(env: &TestEnv, n: usize) -> (usize, String) {
    let api = env.api::<TpuSlice>();
    let last = std::cell::RefCell::new(Vec::new());
    let count = || async {
        let list = api.list(&Default::default()).await.unwrap().items;
        let waiting = list.iter().filter_map(waiting_for_its_turn).count();
        *last.borrow_mut() = list;
        waiting
    };
    let stalled = || {
        let list = last.borrow();
        let others: Vec<_> = list
            .iter()
            .filter(|s| waiting_for_its_turn(s).is_none())
            .filter(|s| s.status.as_ref().is_none_or(|st| st.node_name.is_none()))
            .collect();
        let shown: Vec<_> = others
            .iter()
            .take(5)
            .map(|s| (s.metadata.name.as_deref().unwrap_or_default(), &s.status))
            .collect();
        format!(
            "; {} neither created nor waiting, the first of them: {shown:#?}",
            others.len()
        )
    };
    let what = "slices saying they wait their turn";
    let seen = settle_count_or(what, n, count, stalled).await;
    let first = last.borrow().iter().find_map(waiting_for_its_turn);
    (seen, first.unwrap_or_default())
}

#[tokio::test]
async fn a_quota_below_the_configured_one_is_refused_once_a_minute_not_retried_blindly() {
    let mut env = TestEnv::start().await;
    // Someone set the project's real quota to 20 a minute; the operator still believes 91.
    env.gcp.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: Some(20),
    });
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let n = 60;
    for i in 0..n {
        env.create(&slice(&format!("r-{i:02}"))).await;
    }
    let creates = || calls(&env, "tpu", "nodes.create");
    let ok = |c: &Vec<CallRecord>| c.iter().filter(|c| c.status == 200).count();
    settle(&env, "the first refusal", || {
        creates().iter().any(|c| c.status != 200)
    })
    .await;
    minute_spent(&env).await;
    // The line is paused to the next minute: no call while the clock stands.
    let first = creates();
    assert_eq!(ok(&first), 20, "the real quota's share");
    let refused_first = first.len() - 20;
    let concurrency = env.ctx.config.concurrency as usize;
    assert!(
        (1..=concurrency).contains(&refused_first),
        "{refused_first} refused: at most the calls already on their way"
    );
    let api = env.api::<TpuSlice>();
    let paused = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(waiting_for_its_turn)
        .find(|m| m.contains("Google refused one for its rate quota"));
    assert!(paused.is_some(), "a waiting slice says the line is paused");
    // Minute by minute until all are created: at most the calls in flight refused per minute.
    let mut guard = 0;
    while ok(&creates()) < n {
        env.gcp.clock().advance(Duration::from_secs(60));
        minute_spent(&env).await;
        guard += 1;
        assert!(guard < 12, "{} created after {guard} minutes", ok(&creates()));
    }
    let all = creates();
    let mut refused_per_minute: BTreeMap<i64, usize> = BTreeMap::new();
    for c in all.iter().filter(|c| c.status != 200) {
        *refused_per_minute.entry(minute_of(c.time)).or_default() += 1;
    }
    println!(
        "create limiter, quota 20/min: {n} slices in {guard} minutes, refused per minute {:?}, created per minute {:?}",
        refused_per_minute.values().collect::<Vec<_>>(),
        per_minute(&all).values().collect::<Vec<_>>()
    );
    assert!(
        refused_per_minute.values().all(|r| *r <= concurrency),
        "{refused_per_minute:?}"
    );
    assert_eq!(env.gcp.nodes().len(), n, "each slice's node once");
}

/// Waits, the clock still, until every slice without a node says its turn is later than now:
/// each has looked again since the clock last moved, the calls on their way have come back,
/// and the minute's share is spent. Load-proof: two seconds of real time per minute left a
/// busy machine's waiters short of their minute (48 of 60 created after 12 minutes beside
/// eight CPU-bound loops), so minutes piled up.
async fn minute_spent(env: &TestEnv) {
    let now = env.gcp.clock().now();
    let due_at = |message: &str| {
        let at = message.split(", due at ").nth(1)?.split(' ').next()?;
        DateTime::parse_from_rfc3339(at).ok()
    };
    let api = env.api::<TpuSlice>();
    env.until("every waiter told a later turn", Duration::ZERO, async || {
        // A list of every slice: every 100 ms, not 10, to leave the controllers the machine.
        tokio::time::sleep(Duration::from_millis(90)).await;
        let list = api.list(&Default::default()).await.unwrap().items;
        let early: Vec<_> = list
            .iter()
            .filter(|s| s.status.as_ref().is_none_or(|st| st.node_name.is_none()))
            .filter(|s| {
                waiting_for_its_turn(s)
                    .as_deref()
                    .and_then(due_at)
                    .is_none_or(|due| due <= now)
            })
            .map(|s| {
                let st = s.status.as_ref();
                let c = st.and_then(|st| find_condition(&st.conditions, types::RECONCILING));
                (
                    s.name_any(),
                    st.map(|st| st.phase),
                    c.map(|c| (c.reason.clone(), c.message.clone())),
                )
            })
            .collect();
        if early.is_empty() { Ok(()) } else { Err(early) }
    })
    .await
}

fn limits(setting: &str) -> Limits {
    let mut limits = Limits::default();
    limits.set(setting).unwrap();
    limits
}

#[tokio::test]
async fn dataproc_batches_wait_their_turn_in_their_region_s_line() {
    let mut env = TestEnv::start().await;
    // Quota 3: a cap of 2 a minute.
    let ctx = Arc::new(
        env.context()
            .await
            .with_create_limits(limits("dataprocBatchCreate=3")),
    );
    env.spawn(preprocess_batch::run(ctx, never_shutdown()));
    for i in 0..3 {
        let b: PreprocessBatch = serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "PreprocessBatch",
            "metadata": {"name": format!("b-{i}")},
            "spec": {
                "region": "us-central1",
                "pyspark": {"mainPythonFileUri": "gs://demo-data/scripts/tokenize.py"},
                "outputUri": format!("gs://demo-data/out-{i}/"),
            }
        }))
        .unwrap();
        env.create(&b).await;
    }
    let creates = || calls(&env, "dataproc", "batches.create").len();
    settle(&env, "two batch creates", || creates() == 2).await;
    hold(Duration::from_secs(2)).await;
    assert_eq!(creates(), 2);
    let api = env.api::<PreprocessBatch>();
    let waiting: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|b| {
            let c = find_condition(&b.status.as_ref()?.conditions, types::RECONCILING)?;
            (c.reason == "WaitingForCreateRate").then(|| c.message.clone())
        })
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(
        waiting[0].contains("1 of 1 in project demo-project (us-central1)'s line of Dataproc batch creates"),
        "{}",
        waiting[0]
    );
    env.gcp.clock().advance(Duration::from_secs(60));
    settle(&env, "the third batch create", || creates() == 3).await;
}

#[tokio::test]
async fn vertex_jobs_wait_their_turn_and_the_train_stage_says_so() {
    let mut env = TestEnv::start().await;
    let ctx = Arc::new(
        env.context()
            .await
            .with_create_limits(limits("vertexJobCreate=3")),
    );
    env.spawn(training_pipeline::run(ctx, never_shutdown()));
    for i in 0..3 {
        let mut tp: TrainingPipeline =
            test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
        tp.metadata.name = Some(format!("tp-{i}"));
        tp.spec.preprocess = None;
        // Each its own model directory: one directory is one pipeline's at a time.
        tp.spec.artifacts.model_dir = format!("gs://demo-project-tpu-data/models/tp-{i}/");
        env.create(&tp).await;
    }
    // The clock stands still until both creates are in: all three pipelines ask at the same
    // instant, so the line's minute starts there however late a busy machine runs a pass (a
    // clock moving while they came had crossed the minute before the test saw two creates).
    let creates = || calls(&env, "vertex", "customJobs.create");
    settle(&env, "two job creates", || creates().len() >= 2).await;
    let first = creates()[0].time;
    let api = env.api::<TrainingPipeline>();
    // The clock moves on a second a step up to 50 s past the first create, and stands still
    // there until the third pipeline has said it waits: however late a busy machine runs its
    // pass, it is told inside the minute, and no third create comes in it.
    let second = Duration::from_secs(1);
    let (clock, inside) = (env.gcp.clock(), first + chrono::Duration::seconds(50));
    let message = test_kit::until(
        "the third pipeline to say it waits its turn, on its train stage too",
        env.wait_limit(),
        || {
            if clock.now() < inside {
                clock.advance(second);
            }
        },
        async || {
            assert_eq!(creates().len(), 2, "a third create inside the minute");
            let told = api
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find_map(|tp| {
                    let st = tp.status?;
                    let c = find_condition(&st.conditions, types::RECONCILING)?.clone();
                    let train = st.stages.iter().find(|s| s.name == StageName::Train)?;
                    (c.reason == "WaitingForCreateRate"
                        && train.message.as_deref() == Some(c.message.as_str()))
                    .then_some(c.message)
                });
            match told {
                Some(message) if clock.now() >= inside => Ok(message),
                told => Err((clock.now(), told)),
            }
        },
    )
    .await;
    assert!(message.contains("line of Vertex AI job creates"), "{message}");
    env.until("the third job create", second, async || creates().len() >= 3)
        .await;
    // Both first creates were stamped at the instant the clock stood still at; the third turn
    // comes a full minute later, and a call is stamped when it arrives, never before its turn.
    let third = creates()[2].time;
    assert!(
        third >= first + chrono::Duration::seconds(60),
        "{first} then {third}"
    );
}

/// One operator watching two teams that create in the same project: team-a applies 300 slices at
/// once (86 go, 214 wait), then team-b one. Ranked among its own team's waiters, team-b's slice
/// is second in line and is created in the next minute, not after team-a's whole flood (the
/// fourth minute).
#[tokio::test]
async fn another_team_s_slice_is_created_in_the_next_minute_behind_a_flood_not_after_it() {
    let mut env = TestEnv::start().await;
    let Some(_) = env.kube() else {
        // On the real API server the suite's namespaces are its own; the second team's
        // namespace and an operator watching both are set up on kube-emulator only.
        println!("skipped: needs kube-emulator (two namespaces under one operator)");
        return;
    };
    let team_b = "team-b";
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": team_b}})).unwrap();
    namespaces
        .create(&Default::default(), &ns)
        .await
        .expect("team-b's namespace");
    let ctx = context_for_many(&env, None).await;
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    for i in 0..300 {
        env.create(&slice(&format!("a-{i:03}"))).await;
    }
    let creates = || calls(&env, "tpu", "nodes.create");
    settle_count("team-a's first minute", 86, || {
        std::future::ready(creates().len())
    })
    .await;
    // Team-a's 214 others are in line before team-b asks (on a loaded machine one may still be
    // waiting for its first pass: nearly all is enough for the order under test).
    let in_line = settle_nearly_all_waiting(&env, 214).await;
    test_kit::objects::create_in(&env.client, team_b, &slice("b-0")).await;
    // The clock still (step zero): the suite's wait limit bounds a hang only.
    let b: TpuSlice = env
        .wait_for_in(
            team_b,
            "b-0",
            "team-b's slice says it waits",
            Duration::ZERO,
            |s| waiting_for_its_turn(s).is_some(),
        )
        .await;
    let told = waiting_for_its_turn(&b).unwrap();
    // Second, behind team-a's first waiter only: first come would make it last.
    assert!(
        told.contains("waiting for its turn to create: 2 of ")
            && !told.contains(&format!(": {} of ", in_line + 1)),
        "{told}"
    );
    assert_eq!(creates().len(), 86);
    env.gcp.clock().advance(Duration::from_secs(60));
    settle_count("the second minute's creates", 172, || {
        std::future::ready(creates().len())
    })
    .await;
    hold(Duration::from_secs(2)).await;
    assert_eq!(creates().len(), 172);
    let b_api = kube::Api::<TpuSlice>::namespaced(env.client.clone(), team_b);
    let b = b_api.get("b-0").await.unwrap();
    assert!(
        b.status.as_ref().is_some_and(|s| s.node_name.is_some()),
        "team-b's slice is among the second minute's creates: {:#?}",
        b.status
    );
}
