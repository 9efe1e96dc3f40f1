//! Spot preemption of Vertex custom jobs (issue 21 item 7), through Google's official client:
//! without `restartJobOnWorkerRestart` the job ends FAILED with a STOCKOUT error (code 8); with
//! it the service starts the whole job over and it still succeeds; non-Spot jobs cannot be
//! preempted.

use crate::common;

use common::*;
use gcp_emulator::Fault;
use google_cloud_aiplatform_v1::model::{
    ContainerSpec, CustomJob, CustomJobSpec, GcsDestination, JobState, MachineSpec, Scheduling,
    WorkerPoolSpec, scheduling::Strategy,
};

const PARENT: &str = "projects/p/locations/us-central1";

fn job(strategy: Strategy, restart: bool) -> CustomJob {
    CustomJob::new().set_display_name("spot").set_job_spec(
        CustomJobSpec::new()
            .set_worker_pool_specs([WorkerPoolSpec::new()
                .set_machine_spec(
                    MachineSpec::new()
                        .set_machine_type("ct6e-standard-4t")
                        .set_tpu_topology("2x2"),
                )
                .set_replica_count(1)
                .set_container_spec(ContainerSpec::new().set_image_uri("us-docker.pkg.dev/p/r/t:1"))])
            .set_scheduling(
                Scheduling::new()
                    .set_strategy(strategy)
                    .set_restart_job_on_worker_restart(restart),
            )
            .set_base_output_directory(GcsDestination::new().set_output_uri_prefix("gs://m/spot/")),
    )
}

async fn running(
    emu: &gcp_emulator::Emulator,
    strategy: Strategy,
    restart: bool,
) -> (google_cloud_aiplatform_v1::client::JobService, CustomJob) {
    let vx = vertex(emu).await;
    let j = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(job(strategy, restart))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(61));
    let j = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(j.state, JobState::Running);
    (vx, j)
}

#[tokio::test]
async fn preempted_spot_job_fails_with_a_stockout_error() {
    let emu = emulator().await;
    let (vx, j) = running(&emu, Strategy::Spot, false).await;
    emu.inject(Fault::PreemptJob { name: j.name.clone() }).unwrap();
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Failed);
    let error = got.error.clone().unwrap();
    assert_eq!(error.code, 8, "RESOURCE_EXHAUSTED");
    assert!(error.message.contains("STOCKOUT"), "{}", error.message);
    assert!(got.end_time.is_some());
    // Nothing more happens to it later.
    emu.clock().advance(secs(3600));
    let later = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(later.state, JobState::Failed);
}

#[tokio::test]
async fn restart_job_on_worker_restart_starts_the_whole_job_over() {
    let emu = emulator().await;
    let (vx, j) = running(&emu, Strategy::Spot, true).await;
    emu.clock().advance(secs(200));
    emu.inject(Fault::PreemptJob { name: j.name.clone() }).unwrap();
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Pending, "provisioning again");
    assert!(got.error.is_none());
    // The run starts over: 60 s pending + a full 5 min run, not the 100 s that were left.
    emu.clock().advance(secs(61 + 200));
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Running);
    emu.clock().advance(secs(100));
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Succeeded);
}

#[tokio::test]
async fn standard_jobs_cannot_be_preempted() {
    let emu = emulator().await;
    let (_vx, j) = running(&emu, Strategy::Standard, false).await;
    assert!(emu.inject(Fault::PreemptJob { name: j.name.clone() }).is_err());
}

/// Issue 21 item 6: a run longer than `scheduling.timeout` ends FAILED at the timeout with
/// DEADLINE_EXCEEDED (code 4); a run within it succeeds as before.
#[tokio::test]
async fn a_job_running_past_its_timeout_fails_at_the_timeout() {
    let emu = emulator().await;
    let vx = vertex(&emu).await;
    let mut spec = job(Strategy::Standard, false);
    if let Some(s) = spec.job_spec.as_mut().and_then(|s| s.scheduling.as_mut()) {
        s.timeout = Some(google_cloud_wkt::Duration::clamp(120, 0));
    }
    let j = vx
        .create_custom_job()
        .set_parent(PARENT)
        .set_custom_job(spec)
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(60 + 119));
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Running);
    emu.clock().advance(secs(2));
    let got = vx.get_custom_job().set_name(&j.name).send().await.unwrap();
    assert_eq!(got.state, JobState::Failed);
    let error = got.error.unwrap();
    assert_eq!(error.code, 4, "DEADLINE_EXCEEDED");
    assert!(error.message.contains("120s"), "{}", error.message);
}
