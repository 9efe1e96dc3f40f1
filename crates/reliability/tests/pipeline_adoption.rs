//! Found by the crash suite (seeds 4 and 14, about one run in five): a TPU VM pipeline whose
//! operator died after creating the training TpuSlice and before writing the pipeline's status
//! never finishes. The next operator adopts the slice, but the Train stage has no `startTime`,
//! and the completion-marker check (`observe::marker`) only looks for markers written after that
//! time: it never looks, so the pipeline stays `Training` and the slice keeps billing.
//!
//! Made deterministic here: the pipeline's first status write after the slice is created fails
//! (as if the process had died there); nothing else is disturbed.

use tpu_operator_api::training_pipeline::{StageName, TrainingPipelinePhase};
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
    // Until it succeeds; the suite's wait limit bounds a hang only (a busy machine takes longer).
    test_kit::until(
        "the pipeline Succeeded",
        test_kit::wait_limit(false),
        || world.advance(STEP),
        async || {
            let snap = world.snapshot().await;
            let status = snap.pipelines[0].status.as_ref();
            let phase = status.map(|s| s.phase).unwrap_or_default();
            if phase == TrainingPipelinePhase::Succeeded {
                return Ok(());
            }
            let marker = world.gcp.object(fixtures::BUCKET, "models/p/_SUCCESS").is_some();
            let train = status.and_then(|s| s.stages.iter().find(|st| st.name == StageName::Train));
            Err(format!(
                "{phase:?}; the training container's marker gs://{}/models/p/_SUCCESS present: \
                 {marker} (written but never seen, before the fix); Train stage: {train:?}",
                fixtures::BUCKET
            ))
        },
    )
    .await;
    assert_eq!(
        world.kube_faults.injected(),
        1,
        "the status write was failed once"
    );
}
