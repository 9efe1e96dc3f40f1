//! Waiting for a Vertex pipeline to train without letting its job end first, for the suites that
//! then act on the running job (suspend, delete, refuse its reads, claim its model directory).

use std::time::Duration;

use kube::ResourceExt;
use test_kit::TestEnv;
use tpu_operator_api::training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase};

/// Waits until pipeline `name` says Training, moving the clock a second a poll only while none of
/// its Vertex jobs runs. A job ends 300 s of cloud time after it starts: a clock moving on at
/// every poll, whether or not the controller had run, could let it end before the pipeline (or
/// the test after it) saw it run on a busy machine. The pipeline as it said so.
pub async fn training(env: &TestEnv, name: &str) -> TrainingPipeline {
    let api = env.api::<TrainingPipeline>();
    let uid = api.get(name).await.expect("the pipeline").uid().expect("its uid");
    let runs = || {
        env.gcp
            .custom_jobs()
            .iter()
            .any(|j| j["labels"]["tpu-operator-uid"] == uid.as_str() && j["state"] == "JOB_STATE_RUNNING")
    };
    let clock = env.gcp.clock();
    let what = format!("{name} to say Training");
    test_kit::until(
        &what,
        env.wait_limit(),
        || {
            if !runs() {
                clock.advance(Duration::from_secs(1));
            }
        },
        async || match api.get_opt(name).await.expect("get the pipeline") {
            Some(tp) if tp.status.as_ref().is_some_and(|s| s.phase == Phase::Training) => Ok(tp),
            last => Err(last.and_then(|tp| tp.status)),
        },
    )
    .await
}
