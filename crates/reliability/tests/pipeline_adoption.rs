//! Found by the crash suite (seeds 4 and 14, about one run in five): a TPU VM pipeline whose
//! operator died after creating the training TpuSlice and before writing the pipeline's status
//! never finishes. The next operator adopts the slice, but the Train stage has no `startTime`,
//! and the completion-marker check (`observe::marker`) only looks for markers written after that
//! time: it never looks, so the pipeline stays `Training` and the slice keeps billing.
//!
//! Made deterministic here: the pipeline's first status write after the slice is created fails
//! (as if the process had died there); nothing else is disturbed.

use std::time::Duration;

use tpu_operator_api::training_pipeline::TrainingPipelinePhase;
use tpu_operator_reliability::{
    World,
    crash::STEP,
    fixtures::{self, Capacity, Training},
    kube_faults::Rule,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpu_vm_pipeline_finishes_after_losing_the_status_write_that_followed_the_slice_create() {
    let mut world = World::start().await;
    world.kube_faults.add(Rule {
        method: "PATCH",
        path_contains: "/trainingpipelines/p/status".into(),
        count: 1,
        status: 500,
    });
    world.start_operator().await;
    world
        .create(&fixtures::pipeline("p", Training::TpuVm(Capacity::SpotNode)))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut phase = TrainingPipelinePhase::Pending;
    while tokio::time::Instant::now() < deadline {
        let snap = world.snapshot().await;
        phase = snap.pipelines[0]
            .status
            .as_ref()
            .map(|s| s.phase)
            .unwrap_or_default();
        if phase == TrainingPipelinePhase::Succeeded {
            break;
        }
        world.advance(STEP);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        world.kube_faults.injected(),
        1,
        "the status write was failed once"
    );
    let marker = world.gcp.object(fixtures::BUCKET, "models/p/_SUCCESS").is_some();
    let snap = world.snapshot().await;
    let train = snap.pipelines[0].status.as_ref().and_then(|s| {
        s.stages
            .iter()
            .find(|st| st.name == tpu_operator_api::training_pipeline::StageName::Train)
            .cloned()
    });
    assert_eq!(
        phase,
        TrainingPipelinePhase::Succeeded,
        "the training container wrote its marker (gs://{}/models/p/_SUCCESS present: {marker}) but \
         the pipeline never saw it; Train stage: {train:?}",
        fixtures::BUCKET
    );
}
