//! Checks the end-to-end harness itself: both emulators up, CRDs installed, the GCP clients reach
//! the cloud emulator, and the manual clock is shared with the controllers' context.

use std::time::Duration;

use test_kit::TestEnv;
use tpu_operator_api::tpu_slice::TpuSlice;

#[tokio::test]
async fn harness_wires_both_emulators_and_the_clock() {
    let env = TestEnv::start().await;
    let slice: TpuSlice = test_kit::from_yaml(include_str!("../../../../examples/spot-queued-slice.yaml"));
    let created = env.create(&slice).await;
    assert!(created.metadata.uid.is_some());

    let nodes = env
        .ctx
        .gcp
        .tpu
        .list_nodes("projects/demo-project/locations/us-central2-b")
        .await
        .unwrap();
    assert!(nodes.is_empty());
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.list"),
        1,
        "{:?}",
        env.gcp.call_counts()
    );

    let before = env.ctx.clock.now();
    env.gcp.clock().advance(Duration::from_secs(60));
    assert_eq!(env.ctx.clock.now() - before, chrono::Duration::seconds(60));
}
