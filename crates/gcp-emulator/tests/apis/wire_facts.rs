//! Issue 21 items 5 and 8 on the wire: a `customJobs.create` whose reply is lost, a
//! `customJobs.list` that lags behind creates, `nodes.patch` refused while another operation runs
//! on the node, and the fixed chip count of the `ct5lp-hightpu-*` machine types.

use crate::common;

use common::*;
use gcp_emulator::Fault;
use reqwest::Method;
use serde_json::{Value, json};

const VERTEX_PARENT: &str = "projects/p/locations/us-central1";
const TPU_PARENT: &str = "projects/p/locations/us-central2-b";

fn job_body(machine: &str, count: Option<i64>) -> Value {
    let mut spec = json!({"machineType": machine, "acceleratorType": "TPU_V5_LITEPOD", "tpuTopology": "2x2"});
    if let Some(c) = count {
        spec["acceleratorCount"] = json!(c);
    }
    json!({
        "displayName": "dup-check",
        "labels": {"tpu-operator-uid": "u1", "tpu-operator-attempt": "1"},
        "jobSpec": {"workerPoolSpecs": [{
            "machineSpec": spec,
            "replicaCount": "1",
            "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
        }]},
    })
}

async fn list_names(emu: &gcp_emulator::Emulator) -> Vec<String> {
    let url = format!("{}/vertex/v1/{VERTEX_PARENT}/customJobs", emu.url());
    let (status, body) = raw(Method::GET, &url, None).await;
    assert_eq!(status, 200, "{body}");
    body["customJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|j| j["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_lost_create_reply_still_creates_the_job() {
    let emu = emulator().await;
    emu.inject(Fault::LoseReply {
        service: "vertex".into(),
        method: "customJobs.create".into(),
        count: 1,
        code: None,
    })
    .unwrap();
    let url = format!("{}/vertex/v1/{VERTEX_PARENT}/customJobs", emu.url());
    let (status, body) = raw(Method::POST, &url, Some(job_body("ct5lp-hightpu-4t", Some(4)))).await;
    assert_eq!(status, 503, "the client sees UNAVAILABLE: {body}");
    assert_eq!(body["error"]["status"], "UNAVAILABLE");
    assert_eq!(emu.custom_jobs().len(), 1, "yet the job exists");
    let (status, _) = raw(Method::POST, &url, Some(job_body("ct5lp-hightpu-4t", Some(4)))).await;
    assert_eq!(status, 200, "only `count` replies are lost");
    assert_eq!(emu.custom_jobs().len(), 2);
}

#[tokio::test]
async fn a_lagging_list_hides_new_jobs_that_get_already_sees() {
    let emu = emulator().await;
    emu.inject(Fault::VertexListLag { lists: 2, seconds: 0 }).unwrap();
    let url = format!("{}/vertex/v1/{VERTEX_PARENT}/customJobs", emu.url());
    let (_, job) = raw(Method::POST, &url, Some(job_body("ct5lp-hightpu-4t", None))).await;
    let name = job["name"].as_str().unwrap().to_string();
    let (status, _) = raw(Method::GET, &format!("{}/vertex/v1/{name}", emu.url()), None).await;
    assert_eq!(status, 200, "get is consistent at once");
    assert!(list_names(&emu).await.is_empty(), "first list");
    assert!(list_names(&emu).await.is_empty(), "second list");
    assert_eq!(list_names(&emu).await, vec![name.clone()], "third list");

    // By emulated time: hidden until `seconds` passed since the create.
    emu.inject(Fault::VertexListLag {
        lists: 0,
        seconds: 60,
    })
    .unwrap();
    let (_, late) = raw(Method::POST, &url, Some(job_body("ct5lp-hightpu-4t", None))).await;
    let late = late["name"].as_str().unwrap().to_string();
    assert_eq!(list_names(&emu).await, vec![name.clone()]);
    emu.clock().advance(secs(61));
    assert_eq!(list_names(&emu).await.len(), 2);

    emu.inject(Fault::LiftVertexListLag).unwrap();
    raw(Method::POST, &url, Some(job_body("ct5lp-hightpu-4t", None))).await;
    assert_eq!(list_names(&emu).await.len(), 3, "no lag once lifted");
    assert!(list_names(&emu).await.contains(&late));
}

#[tokio::test]
async fn ct5lp_machines_take_their_own_chip_count_only() {
    let emu = emulator().await;
    let url = format!("{}/vertex/v1/{VERTEX_PARENT}/customJobs", emu.url());
    for (machine, wrong, right) in [
        ("ct5lp-hightpu-1t", 8, 1),
        ("ct5lp-hightpu-4t", 8, 4),
        ("ct5lp-hightpu-8t", 4, 8),
    ] {
        let (status, body) = raw(Method::POST, &url, Some(job_body(machine, Some(wrong)))).await;
        assert_eq!(status, 400, "{machine} with {wrong}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("worker_pool_specs[0].machine_spec.accelerator_count"),
            "{message}"
        );
        let (status, body) = raw(Method::POST, &url, Some(job_body(machine, Some(right)))).await;
        assert_eq!(status, 200, "{machine} with {right}: {body}");
    }
}

#[tokio::test]
async fn a_patch_while_another_operation_runs_on_the_node_is_409_aborted() {
    let emu = emulator().await;
    let base = format!("{}/tpu/v2/{TPU_PARENT}/nodes", emu.url());
    let node = json!({"acceleratorType": "v5litepod-4", "runtimeVersion": "v2-alpha-tpuv5-lite"});
    let (status, body) = raw(Method::POST, &format!("{base}?nodeId=n1"), Some(node)).await;
    assert_eq!(status, 200, "{body}");
    let patch_url = format!("{base}/n1?updateMask=labels");
    let patch = json!({"labels": {"team": "ml"}});
    let (status, body) = raw(Method::PATCH, &patch_url, Some(patch.clone())).await;
    assert_eq!(status, 409, "the create is still running: {body}");
    assert_eq!(body["error"]["status"], "ABORTED");
    emu.clock().advance(secs(3600));
    let (status, body) = raw(Method::PATCH, &patch_url, Some(patch.clone())).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = raw(Method::PATCH, &patch_url, Some(patch.clone())).await;
    assert_eq!(
        status, 409,
        "the first patch's operation is still running: {body}"
    );
    emu.clock().advance(secs(3600));
    let (status, _) = raw(Method::PATCH, &patch_url, Some(patch)).await;
    assert_eq!(status, 200);
}
