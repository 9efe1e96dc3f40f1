//! The operator's Event recorder against the API server (kube-emulator, or the real control plane
//! in CI): a repeated event grows a series on one Event, a different one is a new Event, and an
//! Event deleted meanwhile is published anew.

use k8s_openapi::api::events::v1::Event;
use kube::{Resource, api::DeleteParams};
use test_kit::TestEnv;
use tpu_operator_api::tpu_slice::TpuSlice;
use tpu_operator_controller::runtime::events::{EventRecorder, EventType};

async fn events_about(env: &TestEnv, name: &str) -> Vec<Event> {
    let mut events: Vec<Event> = env
        .api::<Event>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    events.sort_by_key(|e| e.metadata.name.clone());
    events
}

fn count(e: &Event) -> i32 {
    e.series.as_ref().map_or(1, |s| s.count)
}

#[tokio::test]
async fn repeats_grow_a_series_and_a_deleted_event_is_published_anew() {
    let env = TestEnv::start().await;
    let slice: TpuSlice = test_kit::from_yaml(include_str!("../../../../examples/spot-queued-slice.yaml"));
    let slice = env.create(&slice).await;
    let name = slice.meta().name.clone().unwrap();
    let reference = slice.object_ref(&());
    let recorder = &EventRecorder::new(env.ctx.client.clone(), "tpu-operator", None);

    for _ in 0..3 {
        recorder
            .publish(&reference, EventType::Warning, "CreateFailed", "quota exceeded")
            .await
            .unwrap();
    }
    recorder
        .publish(&reference, EventType::Normal, "Ready", "node READY")
        .await
        .unwrap();
    let events = events_about(&env, &name).await;
    let mut seen: Vec<(String, i32)> = events
        .iter()
        .map(|e| (e.reason.clone().unwrap_or_default(), count(e)))
        .collect();
    seen.sort();
    assert_eq!(seen, [("CreateFailed".to_owned(), 3), ("Ready".to_owned(), 1)]);
    let failed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("CreateFailed"))
        .unwrap();
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.note.as_deref(), Some("quota exceeded"));
    assert_eq!(failed.reporting_controller.as_deref(), Some("tpu-operator"));
    assert_eq!(
        failed.regarding.as_ref().and_then(|r| r.uid.clone()),
        slice.meta().uid
    );
    assert_eq!(recorder.cached(), 2);

    // Someone deleted the Event (or its TTL ran out): the next repeat creates a new one.
    env.api::<Event>()
        .delete(failed.metadata.name.as_deref().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    recorder
        .publish(&reference, EventType::Warning, "CreateFailed", "quota exceeded")
        .await
        .unwrap();
    let failed: Vec<Event> = events_about(&env, &name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CreateFailed"))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(count(&failed[0]), 1);
}
