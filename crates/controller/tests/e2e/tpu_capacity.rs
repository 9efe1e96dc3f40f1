//! Issue 21 item 4: an exhausted TPU quota is not a stockout. Against gcp-emulator's
//! `CapacityError` fault in both shapes (a refused `nodes.create`, a create operation failed with
//! code 8), a slice over quota says `Stalled/QuotaExceeded` with a Warning event and retries
//! slowly; a stockout still waits as `Reconciling/WaitingForCapacity`. Issue 35 item 6: either
//! wait is phase `Waiting`, with one Warning when it starts and one `WaitEnded` when it ends.

use std::time::Duration;

use gcp_emulator::{CapacityCause, ErrorShape, Fault};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    tpu_slice::{TpuSlice, TpuSlicePhase},
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};

const ZONE: &str = "us-east5-b";
const STEP: Duration = Duration::from_secs(20);

fn slice(name: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"onDemand": {}},
        }
    }))
    .expect("TpuSlice fixture")
}

fn reason(s: &TpuSlice, type_: &str) -> Option<String> {
    let st = s.status.as_ref()?;
    find_condition(&st.conditions, type_)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

fn is_ready(s: &TpuSlice) -> bool {
    s.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
}

async fn start() -> TestEnv {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env
}

fn fault(cause: CapacityCause, shape: ErrorShape) -> Fault {
    Fault::CapacityError {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
        cause,
        shape,
        quota_metric: Some("tpu.googleapis.com/v6e_pod_chips".into()),
    }
}

fn lift() -> Fault {
    Fault::LiftStockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    }
}

#[tokio::test]
async fn quota_refused_on_create_stalls_with_a_warning_and_retries_slowly() {
    let env = start().await;
    env.gcp
        .inject(fault(CapacityCause::Quota, ErrorShape::Call))
        .unwrap();
    env.create(&slice("quota")).await;
    let s: TpuSlice = env
        .wait_for("quota", "Stalled/QuotaExceeded", STEP, |s| {
            reason(s, types::STALLED).as_deref() == Some("QuotaExceeded")
        })
        .await;
    let st = s.status.clone().unwrap();
    assert!(
        st.message
            .as_deref()
            .unwrap_or_default()
            .contains("tpu.googleapis.com/v6e_pod_chips"),
        "{st:?}"
    );
    let capacity = find_condition(&st.conditions, types::CAPACITY_AVAILABLE).cloned();
    assert_eq!(
        capacity.map(|c| (c.status, c.reason)),
        Some(("False".into(), "QuotaExceeded".into()))
    );
    let events = env.wait_for_event("quota", "QuotaExceeded", STEP).await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("QuotaExceeded"))
        .unwrap();
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    // A stockout polls every poll-capacity (50 ms here); a quota refusal waits the permanent
    // retry (5 min): the first create and at most the one the status write's echo triggers,
    // not dozens.
    env.idle(Duration::from_millis(1500), STEP).await;
    let creates = env.gcp.call_count("tpu", "nodes.create");
    assert!(creates <= 2, "{creates}: {:?}", env.gcp.call_counts());
    assert!(env.gcp.nodes().is_empty());

    // Somebody raised the quota (and touched the object): it starts without a spec change.
    env.gcp.inject(lift()).unwrap();
    let touch = json!({"metadata": {"annotations": {"quota": "raised"}}});
    env.api::<TpuSlice>()
        .patch("quota", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    env.wait_for::<TpuSlice, _>("quota", "Ready", STEP, is_ready)
        .await;
}

#[tokio::test]
async fn quota_failing_the_create_operation_stalls_then_recovers_once_lifted() {
    let env = start().await;
    env.gcp
        .inject(fault(CapacityCause::Quota, ErrorShape::Operation))
        .unwrap();
    env.create(&slice("quota-op")).await;
    env.wait_for::<TpuSlice, _>("quota-op", "Stalled/QuotaExceeded", STEP, |s| {
        reason(s, types::STALLED).as_deref() == Some("QuotaExceeded")
    })
    .await;
    env.wait_for_event("quota-op", "QuotaExceeded", STEP).await;
    // Retried, but at poll-stable (500 ms here), not poll-capacity (50 ms).
    env.gcp.clear_calls();
    env.idle(Duration::from_millis(1500), Duration::from_secs(1))
        .await;
    let creates = env.gcp.call_count("tpu", "nodes.create");
    assert!(
        creates <= 5,
        "{creates} creates in 1.5 s: {:?}",
        env.gcp.call_counts()
    );
    env.gcp.inject(lift()).unwrap();
    env.wait_for::<TpuSlice, _>("quota-op", "Ready", STEP, is_ready)
        .await;
    assert_eq!(env.gcp.nodes().len(), 1);
}

#[tokio::test]
async fn stockout_failing_the_create_operation_waits_for_capacity() {
    let env = start().await;
    env.gcp
        .inject(fault(CapacityCause::Stockout, ErrorShape::Operation))
        .unwrap();
    env.create(&slice("stockout-op")).await;
    env.wait_for::<TpuSlice, _>("stockout-op", "WaitingForCapacity", STEP, |s| {
        reason(s, types::RECONCILING).as_deref() == Some("WaitingForCapacity")
    })
    .await;
    env.gcp.inject(lift()).unwrap();
    env.wait_for::<TpuSlice, _>("stockout-op", "Ready", STEP, is_ready)
        .await;
    assert_eq!(env.gcp.nodes().len(), 1);
}

/// Each Event about `name` with `reason`, and how often it was published (its series count).
async fn published(env: &TestEnv, name: &str, reason: &str) -> Vec<(String, i32)> {
    let api = env.api::<k8s_openapi::api::events::v1::Event>();
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.type_.unwrap_or_default(), count)
        })
        .collect()
}

/// Issue 35 item 6: a stockout read as `Provisioning` with no Event, and `describe` showed its
/// message three times. Now the slice is `Waiting` (the Reason column: `WaitingForCapacity`),
/// the message sits on one condition, one Warning says the wait started however many passes
/// re-check it, and one Normal `WaitEnded` says it ended.
#[tokio::test]
async fn a_stockout_is_a_wait_with_one_warning_when_it_starts_and_one_event_when_it_ends() {
    let env = start().await;
    env.gcp
        .inject(fault(CapacityCause::Stockout, ErrorShape::Call))
        .unwrap();
    env.create(&slice("waits")).await;
    let waiting = env
        .wait_for::<TpuSlice, _>("waits", "phase Waiting", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.phase == TpuSlicePhase::Waiting)
        })
        .await;
    let st = waiting.status.clone().unwrap();
    let ready = find_condition(&st.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "WaitingForCapacity", "the Reason column");
    let message = st.message.clone().unwrap();
    let carrying = st.conditions.iter().filter(|c| c.message == message).count();
    assert_eq!(
        carrying, 1,
        "the message on {carrying} conditions: {:#?}",
        st.conditions
    );
    env.wait_for_event("waits", "WaitingForCapacity", STEP).await;
    // Re-checked at least three times (each probe after the stockout memory's window, moved on
    // by the emulated clock): however long that takes in real time, still the one Warning.
    env.until("the wait re-checked three times", STEP, async || {
        let creates = env.gcp.call_count("tpu", "nodes.create");
        if creates >= 3 { Ok(()) } else { Err(creates) }
    })
    .await;
    assert_eq!(
        published(&env, "waits", "WaitingForCapacity").await,
        vec![("Warning".to_string(), 1)]
    );
    assert!(published(&env, "waits", "WaitEnded").await.is_empty());

    env.gcp.inject(lift()).unwrap();
    env.wait_for::<TpuSlice, _>("waits", "Ready", STEP, is_ready)
        .await;
    env.wait_for_event("waits", "WaitEnded", STEP).await;
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(
        published(&env, "waits", "WaitEnded").await,
        vec![("Normal".to_string(), 1)]
    );
}
