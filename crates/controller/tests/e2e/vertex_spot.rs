//! Issue 21 item 7: a Vertex Spot job whose VMs are reclaimed is not a failed attempt. With
//! `maxRetries: 0` the quickstart (Vertex Spot) still finishes after gcp-emulator preempts its
//! first job: a second job, a Warning `Preempted` event, the Train stage's counted attempts 1.

use std::time::Duration;

use gcp_emulator::Fault;
use test_kit::TestEnv;
use tpu_operator_api::training_pipeline::{
    SchedulingStrategy, StageName, TrainingPipeline, TrainingPipelinePhase as Phase,
};
use tpu_operator_controller::{kinds::training_pipeline, never_shutdown};

const STEP: Duration = Duration::from_secs(15);

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

#[tokio::test]
async fn preempted_spot_job_is_recreated_without_spending_a_retry() {
    let mut env = TestEnv::start().await;
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("spot".into());
    tp.spec.preprocess = None;
    tp.spec.max_retries = 0;
    let scheduling = tp
        .spec
        .training
        .vertex
        .as_ref()
        .and_then(|v| v.scheduling.as_ref());
    assert_eq!(scheduling.map(|s| s.strategy), Some(SchedulingStrategy::Spot));
    env.create(&tp).await;
    let first = env
        .until("the first job", Duration::from_secs(1), async || {
            let job = env.gcp.custom_jobs().into_iter().next();
            job.map(|j| j["name"].as_str().unwrap().to_string())
        })
        .await;
    env.gcp.inject(Fault::PreemptJob { name: first.clone() }).unwrap();
    let events = env.wait_for_event("spot", "Preempted", STEP).await;
    let preempted = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Preempted"))
        .unwrap();
    assert_eq!(preempted.type_.as_deref(), Some("Warning"));
    let tp = env
        .wait_for::<TrainingPipeline, _>("spot", "Succeeded", STEP, |tp| {
            phase(tp) == Phase::Succeeded || phase(tp) == Phase::Failed
        })
        .await;
    let st = tp.status.clone().unwrap();
    assert_eq!(st.phase, Phase::Succeeded, "{:?}", st.message);
    assert_eq!(st.attempts, 2);
    let train = st.stages.iter().find(|s| s.name == StageName::Train).unwrap();
    assert_eq!(train.attempts, 1, "the preemption is not a counted attempt");
    // Counted apart from retries, as a TPU VM slice's preemptions are.
    let preemptions = train.interruptions.as_ref().map(|i| i.preemptions);
    assert_eq!(preemptions, Some(1), "{train:?}");
    assert_ne!(st.custom_job_name.as_deref(), Some(first.as_str()));
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
}

/// Issue 21 item 6: a FLEX_START job that waited out its `maxWaitDuration` (gcp-emulator:
/// JOB_STATE_EXPIRED) is replaced by a new job without spending a retry.
#[tokio::test]
async fn expired_flex_start_job_is_replaced_without_spending_a_retry() {
    let mut env = TestEnv::start().await;
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("flex".into());
    tp.spec.preprocess = None;
    tp.spec.max_retries = 0;
    let s = tp
        .spec
        .training
        .vertex
        .as_mut()
        .unwrap()
        .scheduling
        .as_mut()
        .unwrap();
    s.strategy = SchedulingStrategy::FlexStart;
    s.max_wait_duration = Some("1h".into());
    env.gcp
        .inject(Fault::VertexStockout {
            location: "us-east5".into(),
        })
        .unwrap();
    env.create(&tp).await;
    env.until("a second job", Duration::from_secs(120), async || {
        let jobs = env.gcp.custom_jobs();
        if jobs.len() >= 2 {
            return Ok(());
        }
        let tp: TrainingPipeline = env.api().get("flex").await.unwrap();
        Err(format!(
            "{jobs:?}\ngets {} lists {}\npipeline: {:#?}",
            env.gcp.call_count("vertex", "customJobs.get"),
            env.gcp.call_count("vertex", "customJobs.list"),
            tp.status
        ))
    })
    .await;
    assert!(
        env.gcp
            .custom_jobs()
            .iter()
            .any(|j| j["state"] == "JOB_STATE_EXPIRED")
    );
    env.gcp
        .inject(Fault::LiftVertexStockout {
            location: "us-east5".into(),
        })
        .unwrap();
    let tp = env
        .wait_for::<TrainingPipeline, _>("flex", "Succeeded", STEP, |tp| {
            phase(tp) == Phase::Succeeded || phase(tp) == Phase::Failed
        })
        .await;
    let st = tp.status.clone().unwrap();
    assert_eq!(st.phase, Phase::Succeeded, "{:?}", st.message);
    let train = st.stages.iter().find(|s| s.name == StageName::Train).unwrap();
    assert_eq!(train.attempts, 1, "the expired wait is not a counted attempt");
    assert!(st.attempts >= 2);
}
