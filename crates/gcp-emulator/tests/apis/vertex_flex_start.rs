//! Issue 21 item 6: without capacity (`VertexStockout`) custom jobs stay PENDING; a FLEX_START
//! job still waiting after its `maxWaitDuration` ends JOB_STATE_EXPIRED; once capacity is back
//! a waiting job runs. Through Google's official Rust client.

use crate::common;

use common::*;
use gcp_emulator::Fault;
use google_cloud_aiplatform_v1::model::{
    ContainerSpec, CustomJob, CustomJobSpec, JobState, MachineSpec, Scheduling, WorkerPoolSpec,
    scheduling::Strategy,
};

const PARENT: &str = "projects/p/locations/us-east5";

fn job(strategy: Strategy, max_wait: Option<i64>) -> CustomJob {
    let mut scheduling = Scheduling::new().set_strategy(strategy);
    if let Some(secs) = max_wait {
        scheduling = scheduling.set_max_wait_duration(google_cloud_wkt::Duration::clamp(secs, 0));
    }
    CustomJob::new().set_display_name("flex").set_job_spec(
        CustomJobSpec::new()
            .set_worker_pool_specs([WorkerPoolSpec::new()
                .set_machine_spec(
                    MachineSpec::new()
                        .set_machine_type("ct6e-standard-4t")
                        .set_tpu_topology("2x2"),
                )
                .set_replica_count(1)
                .set_container_spec(ContainerSpec::new().set_image_uri("us-docker.pkg.dev/p/r/t:1"))])
            .set_scheduling(scheduling),
    )
}

#[tokio::test]
async fn flex_start_expires_after_max_wait_and_standard_keeps_waiting() {
    let emu = emulator().await;
    let vx = vertex(&emu).await;
    emu.inject(Fault::VertexStockout {
        location: "us-east5".into(),
    })
    .unwrap();
    let mut names = Vec::new();
    for j in [
        job(Strategy::FlexStart, Some(3600)),
        job(Strategy::FlexStart, None),
        job(Strategy::Standard, None),
    ] {
        let j = vx
            .create_custom_job()
            .set_parent(PARENT)
            .set_custom_job(j)
            .send()
            .await
            .unwrap();
        names.push(j.name);
    }
    let state = |i: usize| {
        let vx = vx.clone();
        let name = names[i].clone();
        async move { vx.get_custom_job().set_name(name).send().await.unwrap().state }
    };
    emu.clock().advance(secs(3599));
    assert_eq!(state(0).await, JobState::Pending);
    emu.clock().advance(secs(2));
    assert_eq!(state(0).await, JobState::Expired, "maxWaitDuration 1h passed");
    assert_eq!(state(1).await, JobState::Pending, "default max wait is 24 h");
    emu.clock().advance(secs(23 * 3600));
    assert_eq!(state(1).await, JobState::Expired);
    assert_eq!(state(2).await, JobState::Pending, "STANDARD jobs just wait");
    emu.inject(Fault::LiftVertexStockout {
        location: "us-east5".into(),
    })
    .unwrap();
    emu.clock().advance(secs(61));
    assert_eq!(state(2).await, JobState::Running);
    assert_eq!(state(0).await, JobState::Expired, "an expired job stays expired");
}
