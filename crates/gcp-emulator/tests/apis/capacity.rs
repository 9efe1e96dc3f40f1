//! Capacity errors in both shapes real Cloud TPU uses (issue 21 item 4): `nodes.create` refused
//! with 429, or accepted and its operation failed with code 8; quota and stockout told apart by
//! `google.rpc` details. Through Google's official Rust client.

use crate::common;

use common::*;
use gcp_emulator::{CapacityCause, ErrorShape, Fault};
use google_cloud_gax::error::rpc::{Code as RpcCode, StatusDetails};
use google_cloud_longrunning::model::operation;
use google_cloud_tpu_v2::model::Node;

const PARENT: &str = "projects/p/locations/us-central2-b";
const ZONE: &str = "us-central2-b";

fn node_spec(accel: &str) -> Node {
    Node::new()
        .set_accelerator_type(accel)
        .set_runtime_version("tpu-ubuntu2204-base")
}

fn capacity_error(cause: CapacityCause, shape: ErrorShape) -> Fault {
    Fault::CapacityError {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
        cause,
        shape,
        quota_metric: None,
    }
}

#[tokio::test]
async fn quota_refused_on_the_call_carries_error_info_and_quota_failure() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    emu.inject(capacity_error(CapacityCause::Quota, ErrorShape::Call))
        .unwrap();
    let err = tpu
        .create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(node_spec("v6e-8"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&err), 429);
    let status = err.status().unwrap();
    assert_eq!(status.code, RpcCode::ResourceExhausted);
    assert!(status.message.starts_with("Quota limit '"), "{}", status.message);
    let reason = status.details.iter().find_map(|d| match d {
        StatusDetails::ErrorInfo(i) => Some(i.reason.clone()),
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some("RESOURCE_QUOTA_EXCEEDED"));
    let metric = status.details.iter().find_map(|d| match d {
        StatusDetails::QuotaFailure(q) => q.violations.first().map(|v| v.quota_metric.clone()),
        _ => None,
    });
    assert_eq!(metric.as_deref(), Some("tpu.googleapis.com/v6e_pod_chips"));
    assert!(emu.nodes().is_empty());
    // Other families are unaffected; lifting ends it.
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("n2")
        .set_node(node_spec("v5p-8"))
        .send()
        .await
        .expect("other families have quota");
    emu.inject(Fault::LiftStockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(node_spec("v6e-8"))
        .send()
        .await
        .expect("lifted");
}

#[tokio::test]
async fn stockout_in_the_create_operation_fails_it_with_code_8_and_leaves_no_node() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    emu.inject(capacity_error(CapacityCause::Stockout, ErrorShape::Operation))
        .unwrap();
    let op = tpu
        .create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(node_spec("v6e-8"))
        .send()
        .await
        .expect("the call itself is accepted");
    assert!(!op.done);
    assert_eq!(emu.nodes().len(), 1, "CREATING until the operation fails");
    emu.clock().advance(secs(600));
    let done = tpu.get_operation().set_name(&op.name).send().await.unwrap();
    assert!(done.done);
    let Some(operation::Result::Error(status)) = &done.result else {
        panic!("the operation failed: {done:?}");
    };
    assert_eq!(status.code, 8, "RESOURCE_EXHAUSTED");
    let status = google_cloud_gax::error::rpc::Status::from(&**status);
    let reason = status.details.iter().find_map(|d| match d {
        StatusDetails::ErrorInfo(i) => Some(i.reason.clone()),
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some("STOCKOUT"));
    assert!(emu.nodes().is_empty(), "the failed create leaves no node");
    let err = tpu
        .get_node()
        .set_name(format!("{PARENT}/nodes/n1"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(http_status(&err), 404);
}

#[tokio::test]
async fn capacity_error_fault_has_a_json_form() {
    let f: Fault = serde_json::from_value(serde_json::json!({
        "kind": "capacityError", "zone": ZONE, "accelerator": "v6e-8", "cause": "quota",
        "shape": "operation", "quotaMetric": "tpu.googleapis.com/v6e"
    }))
    .unwrap();
    assert_eq!(
        f,
        Fault::CapacityError {
            zone: ZONE.into(),
            accelerator: "v6e-8".into(),
            cause: CapacityCause::Quota,
            shape: ErrorShape::Operation,
            quota_metric: Some("tpu.googleapis.com/v6e".into()),
        }
    );
}
