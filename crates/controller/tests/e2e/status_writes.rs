//! Status writes against the API server (kube-emulator, or the real control plane in CI): a
//! reconcile's status is computed from the object as the watch cache gave it, and the write is
//! conditional on that object's resourceVersion, so a status computed from an object older than
//! the server's is refused (409 Conflict, retried) instead of undoing a newer status.

use kube::ResourceExt;
use test_kit::TestEnv;
use tpu_operator_api::tpu_slice::{TpuSlice, TpuSliceStatus};
use tpu_operator_controller::{
    kinds::tpu_slice::FIELD_MANAGER, reconcile::report::apply_status, runtime::error::Retry,
};

fn status(recreations: i32, message: &str) -> TpuSliceStatus {
    TpuSliceStatus {
        recreations,
        message: Some(message.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_status_computed_from_a_stale_object_is_refused_not_written() {
    let env = TestEnv::start().await;
    let slice: TpuSlice = test_kit::from_yaml(include_str!("../../../../examples/spot-queued-slice.yaml"));
    // The object as two reconciles read it from the cache.
    let read = env.create(&slice).await;
    let name = read.name_any();
    let written = apply_status(
        &env.ctx,
        &read,
        read.resource_version().as_deref(),
        FIELD_MANAGER,
        &status(2, "newer"),
    )
    .await
    .expect("the first write, from the current object");
    // The write reports the version it produced: the object's version now.
    let now = env.api::<TpuSlice>().get(&name).await.unwrap();
    assert!(written.is_some());
    assert_eq!(written, now.resource_version());
    // The second still holds `read`, older than what the first wrote.
    let err = apply_status(
        &env.ctx,
        &read,
        read.resource_version().as_deref(),
        FIELD_MANAGER,
        &status(1, "older"),
    )
    .await
    .expect_err("a status computed from a stale object must not be written");
    assert_eq!(err.retry(), Retry::Transient, "{err}");
    let now = env.api::<TpuSlice>().get(&name).await.unwrap();
    assert_eq!(now.status, Some(status(2, "newer")));
    // Read again (as the retry will be), the same write goes through.
    apply_status(
        &env.ctx,
        &read,
        written.as_deref(),
        FIELD_MANAGER,
        &status(3, "current"),
    )
    .await
    .expect("a write from the current object");
    let now = env.api::<TpuSlice>().get(&name).await.unwrap();
    assert_eq!(now.status, Some(status(3, "current")));
}
