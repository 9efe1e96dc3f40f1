//! Issue 50 item 2: every create failure is told apart, in status (`CapacityAvailable` and the
//! kstatus reason), in an Event of its own reason and in `tpu_operator_create_failures_total`
//! by reason. One test per reason, each through the real path: a TpuSlice, the controller,
//! gcp-emulator over HTTP through Google's client, and back into status. Stockout and rate limit
//! come from the emulator's stock and rate quotas, the quota from its `CapacityError` fault; an
//! invalid request and a refused permission from its `FailCalls` fault (the emulator checks no
//! IAM on TPU calls).

use std::time::Duration;

use gcp_emulator::{CapacityCause, CapacityKind, Code, ErrorShape, Fault, QuotaGroup, RateQuota, StockSpec};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};
use tpu_operator_gcp::CreateFailure;

const ZONE: &str = "us-east5-b";
const STEP: Duration = Duration::from_secs(20);

/// An on-demand v6e-8 TpuSlice in [`ZONE`].
fn slice(name: &str) -> TpuSlice {
    super::tenant::slice(name, json!({"zone": ZONE, "capacity": {"onDemand": {}}}))
}

async fn start() -> TestEnv {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env
}

/// The `CapacityAvailable=False` reason of `s`.
fn capacity(s: &TpuSlice) -> Option<String> {
    let st = s.status.as_ref()?;
    find_condition(&st.conditions, types::CAPACITY_AVAILABLE)
        .filter(|c| c.status == "False")
        .map(|c| c.reason.clone())
}

fn kstatus(s: &TpuSlice) -> Option<(Progress, String)> {
    let st = s.status.as_ref()?;
    let progress = progress_of(&st.conditions)?;
    let reason = find_condition(&st.conditions, types::READY)?.reason.clone();
    Some((progress, reason))
}

/// Waits for the slice to say `reason` (CapacityAvailable), its Event, and the metric; checks
/// that no other reason was counted and returns the slice.
async fn told(env: &TestEnv, name: &str, reason: &str, class: CreateFailure) -> TpuSlice {
    let s = env
        .wait_for::<TpuSlice, _>(name, reason, STEP, |s| capacity(s).as_deref() == Some(reason))
        .await;
    env.wait_for_event(name, reason, STEP).await;
    let metrics = &env.ctx.metrics.capacity;
    assert!(metrics.create_failures("TpuSlice", "tpu", class) >= 1);
    for other in CreateFailure::ALL.into_iter().filter(|c| *c != class) {
        assert_eq!(
            metrics.create_failures("TpuSlice", "tpu", other),
            0,
            "{other:?} counted for a {class:?}"
        );
    }
    s
}

#[tokio::test]
async fn a_stockout_says_stockout() {
    let env = start().await;
    env.gcp.set_stock(StockSpec {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
        kind: CapacityKind::OnDemand,
        chips: 0,
        steps: Vec::new(),
        refill: None,
    });
    env.create(&slice("stockout")).await;
    let s = told(&env, "stockout", "Stockout", CreateFailure::Stockout).await;
    assert_eq!(
        kstatus(&s),
        Some((Progress::Reconciling, "WaitingForCapacity".into())),
        "a stockout is a wait"
    );
    assert!(env.gcp.nodes().is_empty());
}

#[tokio::test]
async fn an_exhausted_quota_says_quota_exceeded_and_names_the_metric_and_limit() {
    let env = start().await;
    env.gcp
        .inject(Fault::CapacityError {
            zone: ZONE.into(),
            accelerator: "v6e".into(),
            cause: CapacityCause::Quota,
            shape: ErrorShape::Call,
            quota_metric: Some("tpu.googleapis.com/v6e_pod_chips".into()),
        })
        .unwrap();
    env.create(&slice("quota")).await;
    let s = told(&env, "quota", "QuotaExceeded", CreateFailure::QuotaExhausted).await;
    assert_eq!(kstatus(&s), Some((Progress::Stalled, "QuotaExceeded".into())));
    let message = s.status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("tpu.googleapis.com/v6e_pod_chips (TPUV6EPodPerProjectPerZoneForTPUAPI)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_rate_limit_says_rate_limited_and_creates_once_the_window_refills() {
    let env = start().await;
    env.gcp.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: Some(0),
    });
    env.create(&slice("rate")).await;
    let s = told(&env, "rate", "RateLimited", CreateFailure::RateLimited).await;
    assert_eq!(kstatus(&s), Some((Progress::Reconciling, "RateLimited".into())));
    let message = s.status.unwrap().message.unwrap_or_default();
    assert!(message.contains("tpu.googleapis.com/qps/create"), "{message}");
    // The quota raised: the next window lets the create through, without a spec change.
    env.gcp.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: None,
    });
    env.wait_for::<TpuSlice, _>("rate", "Ready", STEP, |s| {
        kstatus(s).is_some_and(|(p, _)| p == Progress::Ready)
    })
    .await;
}

/// Every create refused with `code` (as long as the test runs).
async fn refused(env: &TestEnv, code: Code) {
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.create".into(),
            count: 1000,
            code,
            message: None,
        })
        .unwrap();
}

#[tokio::test]
async fn an_invalid_request_says_invalid_spec() {
    let env = start().await;
    refused(&env, Code::InvalidArgument).await;
    env.create(&slice("invalid")).await;
    let s = told(&env, "invalid", "InvalidSpec", CreateFailure::InvalidRequest).await;
    assert_eq!(kstatus(&s), Some((Progress::Stalled, "InvalidSpec".into())));
}

#[tokio::test]
async fn a_refused_permission_says_permission_denied() {
    let env = start().await;
    refused(&env, Code::PermissionDenied).await;
    env.create(&slice("denied")).await;
    let s = told(
        &env,
        "denied",
        "PermissionDenied",
        CreateFailure::PermissionDenied,
    )
    .await;
    assert_eq!(kstatus(&s), Some((Progress::Stalled, "PermissionDenied".into())));
}
