//! Where a run's time and money went (`status.timeSpent`), end to end: a Spot TPU VM pipeline
//! preempted between two checkpoints, through TrainingPipeline → controllers → gcp-emulator →
//! status; and a standalone TpuSlice preempted, recreated and suspended.

use std::{sync::Arc, time::Duration};

use gcp_emulator::Fault;
use kube::api::{Patch, PatchParams};
use test_kit::TestEnv;
use tpu_operator_api::{
    tpu_slice::{TpuSlice, TpuSlicePhase},
    training_pipeline::{StageName, TimeSpent, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    Context,
    kinds::{tpu_slice, training_pipeline, training_pipeline::status::to_chrono},
    never_shutdown,
};

const STEP: Duration = Duration::from_secs(15);

fn spot_run(name: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.metadata.name = Some(name.into());
    tp.spec.preprocess = None;
    tp
}

fn spent(tp: &TrainingPipeline) -> TimeSpent {
    tp.status
        .as_ref()
        .and_then(|s| s.time_spent.clone())
        .unwrap_or_default()
}

fn preemptions(tp: &TrainingPipeline) -> i32 {
    let st = tp.status.as_ref();
    let train = st.and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train));
    train
        .and_then(|s| s.interruptions.as_ref())
        .map_or(0, |i| i.preemptions)
}

/// The parts sum to the run's wall time; what the preemption threw away is priced as the steps
/// since the last committed checkpoint times the step time; the dollars sum to the estimate up to what bills after the run.
#[tokio::test]
async fn a_preempted_runs_time_splits_into_parts_that_sum_to_its_wall_time() {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env.create(&spot_run("gp")).await;
    let checkpointed = env
        .wait_for::<TrainingPipeline, _>("gp", "a first checkpoint", STEP, |tp| {
            tp.status
                .as_ref()
                .and_then(|s| s.checkpoint.as_ref())
                .is_some_and(|c| c.latest_step.is_some())
        })
        .await;
    assert_eq!(checkpointed.status.as_ref().unwrap().phase, Phase::Training);
    // Half-way to the next checkpoint (one per 120 s of cloud time, 100 steps).
    env.gcp.clock().advance(Duration::from_secs(60));
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp.inject(Fault::PreemptNode { name: node }).unwrap();
    // The cloud clock stands still until the pipeline has noticed: the loss is measured at the
    // notice, and every second the clock moved meanwhile would count as lost.
    env.wait_for::<TrainingPipeline, _>("gp", "the preemption noticed", Duration::ZERO, |tp| {
        preemptions(tp) == 1
    })
    .await;
    let done = env
        .wait_for::<TrainingPipeline, _>("gp", "Succeeded", STEP, |tp| {
            tp.status.as_ref().is_some_and(|s| s.phase == Phase::Succeeded)
        })
        .await;
    let st = done.status.clone().unwrap();
    let t = spent(&done);
    let wall = (to_chrono(st.completion_time.as_ref().unwrap()) - to_chrono(st.start_time.as_ref().unwrap()))
        .num_milliseconds() as f64
        / 1000.0;
    let sum = t.wall_seconds() as f64;
    let interruption = env.gcp.workload_interruptions()[0].clone();
    let cfg = env.gcp.config().durations;
    let step_seconds = cfg.workload_checkpoint.as_secs_f64() / 100.0;
    let expected_lost = interruption.steps_lost as f64 * step_seconds;
    let lost = t.lost_to_interruptions.seconds as f64;
    eprintln!(
        "time spent: wall {wall:.0}s, parts {sum:.0}s ({:?}), lost {lost:.0}s against {} steps × {step_seconds}s = {expected_lost:.0}s, goodput {:?}%",
        t.parts()
            .iter()
            .map(|(n, s)| format!("{n} {}s ${:.2}", s.seconds, s.usd))
            .collect::<Vec<_>>(),
        interruption.steps_lost,
        t.goodput_percent
    );
    assert!(
        (sum - wall).abs() <= wall * 0.01,
        "parts {sum} against wall {wall}: {t:?}"
    );
    assert!(expected_lost > 0.0, "{interruption:?}");
    assert!(
        (lost - expected_lost).abs() <= expected_lost * 0.1,
        "lost {lost} against {expected_lost}: {t:?}"
    );
    assert!(t.productive.seconds > 0 && t.provisioning.seconds > 0, "{t:?}");
    assert_eq!(t.failed_attempts.seconds, 0, "a preemption spends no attempt");
    let usd: f64 = t.parts().iter().map(|(_, s)| s.usd).sum();
    let estimate = st.estimated_cost.as_ref().unwrap().so_far_usd;
    assert!(
        // What bills after the run ended (its slice being deleted) is in the estimate only,
        // and the status may be read after some of it (real API server: $1.91 against $1.94).
        usd <= estimate + 1e-6 && usd >= estimate * 0.95,
        "parts ${usd} against estimate ${estimate}"
    );
    assert!(t.goodput_percent.is_some_and(|g| g > 0 && g < 100), "{t:?}");
}

fn slice_spent(s: &TpuSlice) -> TimeSpent {
    s.status
        .as_ref()
        .and_then(|st| st.time_spent.clone())
        .unwrap_or_default()
}

fn through(t: &TimeSpent) -> i64 {
    t.accounted_through.as_ref().map_or(0, |t| t.0.as_second())
}

fn slice_ready(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
}

/// A standalone Spot slice: Ready 600 s, preempted and recreated, Ready 300 s more, suspended.
/// Its parts sum to the time from its first status to its suspension, and its dollars to its
/// estimate; the node's Ready time is productive, its replacement provisioning.
#[tokio::test]
async fn a_standalone_slices_time_splits_by_phase_and_sums_to_its_wall_time() {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let slice: TpuSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": "solo"},
        "spec": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                 "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}}
    }))
    .expect("TpuSlice fixture");
    env.create(&slice).await;
    let first = env
        .wait_for::<TpuSlice, _>("solo", "a first timeSpent", Duration::ZERO, |s| {
            slice_spent(s).accounted_through.is_some()
        })
        .await;
    let start = through(&slice_spent(&first));
    let mut productive = 0;
    for (ready_for, preempt) in [(600, true), (300, false)] {
        // The clock moves until the node is READY, then stands still until the slice says so:
        // its Ready time starts at that pass, and a clock moving on while a busy machine ran
        // it late would credit the wait as training.
        env.until("a READY node", STEP, async || {
            env.gcp.nodes().iter().any(|n| n["state"] == "READY")
        })
        .await;
        let s: TpuSlice = env.wait_for("solo", "Ready", Duration::ZERO, slice_ready).await;
        env.gcp.clock().advance(Duration::from_secs(ready_for));
        productive += ready_for as i64;
        env.wait_for::<TpuSlice, _>("solo", "the Ready time credited", Duration::ZERO, |s| {
            slice_spent(s).productive.seconds >= productive
        })
        .await;
        if preempt {
            let node = s.status.unwrap().node_name.unwrap();
            env.gcp.inject(Fault::PreemptNode { name: node }).unwrap();
            env.wait_for::<TpuSlice, _>("solo", "the preemption noticed", Duration::ZERO, |s| {
                s.status.as_ref().is_some_and(|st| st.recreations == 1)
            })
            .await;
        }
    }
    env.api::<TpuSlice>()
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    // The clock stands still until the suspension is noticed (the node's Ready time ends
    // there), then moves on while the node is deleted.
    env.wait_for::<TpuSlice, _>("solo", "the suspension noticed", Duration::ZERO, |s| {
        s.status
            .as_ref()
            .is_some_and(|st| st.phase != TpuSlicePhase::Ready)
    })
    .await;
    let suspended = env
        .wait_for::<TpuSlice, _>("solo", "Suspended", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.phase == TpuSlicePhase::Suspended)
        })
        .await;
    let t = slice_spent(&suspended);
    let usd: f64 = t.parts().iter().map(|(_, s)| s.usd).sum();
    let estimate = suspended
        .status
        .as_ref()
        .unwrap()
        .estimated_cost
        .as_ref()
        .unwrap()
        .so_far_usd;
    eprintln!("standalone slice: {} (estimate ${estimate:.2})", t.summary());
    assert_eq!(t.wall_seconds(), through(&t) - start, "{t:?}");
    // The clock stands still from the node's READY to the slice's Ready and from the suspend to
    // its notice; the allowance covers a pass that falls between, should one.
    assert!(
        (productive..=productive + 60).contains(&t.productive.seconds),
        "productive {} against {productive} s Ready: {t:?}",
        t.productive.seconds
    );
    assert!(
        t.provisioning.seconds > 0 && t.lost_to_interruptions.seconds == 0,
        "{t:?}"
    );
    assert!(
        usd <= estimate + 1e-6 && usd >= estimate * 0.95,
        "parts ${usd} against ${estimate}"
    );
    let goodput = t.goodput_percent.expect("goodput");
    assert!((1..100).contains(&goodput), "{t:?}");
}
