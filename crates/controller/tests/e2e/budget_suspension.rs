//! A period budget's `SuspendAtCheckpoint` through the path a platform team takes: a TpuPolicy
//! with the action, the controllers and the usage report, a TPU VM pipeline training on the
//! emulated clock while its workload writes a checkpoint every 2 minutes. The run trains on past
//! the threshold until a checkpoint written after the pipeline saw the action is listed, is then
//! suspended (its slice and node deleted, nothing recreated for the rest of the day), and the
//! next day resumes from that checkpoint with an attempt that spends no retry.

use std::time::Duration;

use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::reasons,
    tpu_policy::{BudgetActionKind, CapacityKind},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::governance::tenancy;

use crate::{
    budgets::{record, tick},
    tenant,
};

const NAME: &str = "over-budget";

fn pipeline() -> TrainingPipeline {
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.metadata.name = Some(NAME.into());
    tp.spec.preprocess = None;
    tp
}

fn status(tp: &TrainingPipeline) -> tpu_operator_api::training_pipeline::TrainingPipelineStatus {
    tp.status.clone().unwrap_or_default()
}

fn reason(tp: &TrainingPipeline) -> String {
    tpu_operator_api::conditions::describing(&status(tp).conditions)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn counted_attempts(tp: &TrainingPipeline) -> i32 {
    status(tp)
        .stages
        .iter()
        .find(|s| s.name == StageName::Train)
        .map_or(0, |s| s.attempts)
}

async fn get(env: &TestEnv) -> TrainingPipeline {
    env.api::<TrainingPipeline>().get(NAME).await.unwrap()
}

/// The step a checkpoint URI (`…/checkpoints/<step>/`) names.
fn step_of(uri: &str) -> i64 {
    uri.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn suspend_at_checkpoint_stops_a_run_after_its_next_checkpoint_and_the_next_day_resumes_it() {
    let mut env = TestEnv::start().await;
    let mut config = env.gcp.config();
    config.durations.tpu_workload = Duration::from_secs(6 * 3600);
    env.gcp.set_config(config);
    let ctx = tenant::start(&mut env, None).await;
    let shape = tpu_operator_api::accelerator::parse_accelerator_type("v4-16").unwrap();
    let rate = ctx.tenancy.prices.slice_per_hour(&shape, CapacityKind::Spot).0;
    // About ten minutes of the slice: the threshold falls while it trains.
    let limit = (rate / 6.0 * 100.0).round() / 100.0;
    let rules = json!({"budgets": [{"period": "Day", "limitUsd": limit, "actions": [
        {"atPercent": 100, "action": "SuspendAtCheckpoint"},
    ]}]});
    tenant::create_policy(&env.client, &tenant::policy(&env.ns, rules)).await;
    env.spawn(tenancy::report::run(
        ctx.tenancy.clone(),
        ctx.clock.clone(),
        ctx.config.clone(),
        tpu_operator_controller::never_shutdown(),
    ));
    env.create(&pipeline()).await;
    env.wait_for::<TrainingPipeline, _>(NAME, "Training", Duration::from_secs(1), |tp| {
        status(tp).phase == Phase::Training
    })
    .await;

    // Each tick is seen by a whole pass of the pipeline before the next: the bound below is in
    // cloud time, and ticks racing ahead of a busy machine's passes would count its lateness.
    let passes = || test_kit::passes(&ctx, "TrainingPipeline");
    let mut threshold = None;
    let suspended = loop {
        tick(&env).await;
        let from = passes();
        env.until("two passes of the pipeline", Duration::ZERO, async || {
            passes() >= from + 2
        })
        .await;
        let r = record(&env).await.unwrap();
        if threshold.is_none() && r.enforces(BudgetActionKind::SuspendAtCheckpoint) {
            let past = (r.spent_usd - limit) / rate * 3600.0;
            threshold = Some(r.accounted_through.0.as_second() - past as i64);
        }
        let tp = get(&env).await;
        if status(&tp).phase == Phase::Suspended {
            break tp;
        }
        let now = env.gcp.clock().now().timestamp();
        assert!(
            threshold.is_none_or(|t| now - t < 3600),
            "not suspended within an hour of the threshold: {:?}",
            status(&tp)
        );
    };
    let threshold = threshold.expect("suspended before the action was in force");
    let st = status(&suspended);
    assert_eq!(reason(&suspended), reasons::BUDGET_SUSPENDED, "{:?}", st.message);
    let held = st.budget_suspension.clone().unwrap();
    let checkpoint = st.checkpoint.clone().unwrap();
    let written = checkpoint.latest_time.clone().unwrap();
    assert!(
        written.0 > held.noticed_time.0,
        "stopped only after a checkpoint newer than the action: {held:?} {checkpoint:?}"
    );
    assert_eq!(held.checkpoint, checkpoint.latest_uri);
    assert!(held.noticed_time.0.as_second() >= threshold);
    let stopped_step = step_of(held.checkpoint.as_deref().unwrap());
    let after = held.suspended_time.clone().unwrap().0.as_second() - threshold;
    println!(
        "SuspendAtCheckpoint: seen {} s after the threshold, checkpoint {} s after that, \
         suspended {after} s after the threshold (emulated)",
        held.noticed_time.0.as_second() - threshold,
        written.0.as_second() - held.noticed_time.0.as_second(),
    );
    // One checkpoint interval (120 s) plus one listing interval (180 s) plus the pass's wake.
    assert!(after <= 360, "{after} s");
    let events = env
        .wait_for_event(NAME, reasons::BUDGET_SUSPENDED, Duration::ZERO)
        .await;
    let ours: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reasons::BUDGET_SUSPENDED))
        .filter_map(|e| e.note.clone())
        .collect();
    assert_eq!(ours.len(), 1, "{ours:#?}");
    assert!(
        ours[0].contains("suspended after the committed checkpoint"),
        "{}",
        ours[0]
    );

    the_rest_of_the_day_creates_nothing(&env).await;
    the_next_day_resumes_from_the_checkpoint(&env, &held.until, stopped_step).await;
}

/// The slice and its node go, and ten more minutes of the day create nothing. (The report
/// writes nothing while the spend stands still, so the clock moves without waiting for it.)
async fn the_rest_of_the_day_creates_nothing(env: &TestEnv) {
    let idle = async || {
        env.gcp.clock().advance(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for _ in 0..2_000 {
        if env.gcp.nodes().is_empty() {
            break;
        }
        idle().await;
    }
    assert!(env.gcp.nodes().is_empty(), "the node was not deleted");
    let creates = env.gcp.call_count("tpu", "nodes.create");
    for _ in 0..60 {
        idle().await;
    }
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), creates);
    let tp = get(env).await;
    assert_eq!(status(&tp).phase, Phase::Suspended, "{:?}", status(&tp).message);
}

async fn the_next_day_resumes_from_the_checkpoint(
    env: &TestEnv,
    until: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    stopped_step: i64,
) {
    let now = env.gcp.clock().now().timestamp();
    env.gcp
        .clock()
        .advance(Duration::from_secs((until.0.as_second() - now + 60) as u64));
    let resumed = env
        .wait_for::<TrainingPipeline, _>(NAME, "training again", Duration::from_secs(1), |tp| {
            status(tp).phase == Phase::Training && status(tp).attempts == 2
        })
        .await;
    assert_eq!(counted_attempts(&resumed), 1, "the resumption spends no retry");
    let held = status(&resumed).budget_suspension.unwrap();
    assert!(held.resumed_time.is_some(), "{held:?}");
    let further = env
        .wait_for::<TrainingPipeline, _>(
            NAME,
            "a checkpoint past the stop",
            Duration::from_secs(15),
            |tp| {
                status(tp)
                    .checkpoint
                    .and_then(|c| c.latest_step)
                    .is_some_and(|s| s > stopped_step)
            },
        )
        .await;
    let dir = status(&further).checkpoint.unwrap().dir.unwrap();
    assert!(dir.ends_with("/models/tpu-vm-run-1/checkpoints/"), "{dir}");
}
