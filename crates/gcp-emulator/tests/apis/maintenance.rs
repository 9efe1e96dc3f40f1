//! TPU node maintenance over HTTP: the notice in v2 `nodes.list`, the window, v2alpha1
//! `performMaintenance` / `simulateMaintenanceEvent`, checkpoint requests through v2
//! `nodes.patch`, and the admin records of the steps lost.
//!
//! Default durations: the node is READY at 180 s, its workload checkpoints every 120 s (100
//! steps), so it is at step 100 at 300 s, 200 at 420 s and 250 at 480 s.

use crate::common;

use common::*;
use gcp_emulator::{Emulator, Fault};
use google_cloud_tpu_v2::model::node::Health;
use reqwest::Method;
use serde_json::{Value, json};

const PARENT: &str = "projects/p/locations/us-central2-b";
const SCRIPT: &str = "#!/bin/bash\n# watches tpu-operator-checkpoint-request\ndocker run --rm -e 'CHECKPOINT_DIR=gs://ckpt/run/' 'trainer:1' 'train.py'\n";

fn node_name(id: &str) -> String {
    format!("{PARENT}/nodes/{id}")
}

fn metadata(request: Option<&str>) -> Value {
    let mut m = json!({"startup-script": SCRIPT, "tpu-operator-done-uri": "gs://out/run/"});
    if let Some(r) = request {
        m["tpu-operator-checkpoint-request"] = json!(r);
    }
    m
}

/// Creates node `id` through v2 and lets it become READY (180 s); its workload starts.
async fn ready_node(emu: &Emulator, id: &str) {
    let url = format!("{}/tpu/v2/{PARENT}/nodes?nodeId={id}", emu.url());
    let node = json!({"acceleratorType": "v5p-8", "runtimeVersion": "tpu-ubuntu2204-base",
                      "metadata": metadata(None)});
    let (status, _) = raw(Method::POST, &url, Some(node)).await;
    assert_eq!(status, 200);
    emu.clock().advance(secs(180));
}

async fn list_nodes(emu: &Emulator) -> Vec<Value> {
    let (status, body) = raw(Method::GET, &format!("{}/tpu/v2/{PARENT}/nodes", emu.url()), None).await;
    assert_eq!(status, 200, "{body}");
    body["nodes"].as_array().cloned().unwrap_or_default()
}

async fn alpha(emu: &Emulator, id: &str, verb: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/tpu/v2alpha1/{}:{verb}", emu.url(), node_name(id));
    raw(Method::POST, &url, Some(body)).await
}

async fn admin(emu: &Emulator, path: &str) -> Value {
    let (status, body) = raw(Method::GET, &format!("{}/emulator/v1/{path}", emu.url()), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn schedule(id: &str, start_in_secs: u64, can_reschedule: bool) -> Fault {
    Fault::ScheduleMaintenance {
        name: node_name(id),
        start_in_secs,
        duration_secs: 600,
        can_reschedule,
        unscheduled: false,
    }
}

#[tokio::test]
async fn notice_window_and_end_are_seen_through_v2() {
    let emu = emulator().await;
    ready_node(&emu, "n").await;
    // Through the admin API, as JSON.
    let fault = json!({"kind": "scheduleMaintenance", "name": node_name("n"), "startInSecs": 300,
                       "durationSecs": 600, "canReschedule": true});
    let (status, _) = raw(
        Method::POST,
        &format!("{}/emulator/v1/faults", emu.url()),
        Some(fault),
    )
    .await;
    assert_eq!(status, 200);
    let nodes = list_nodes(&emu).await;
    let notice = json!({"type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": "PENDING",
        "windowStartTime": "2026-01-01T00:08:00.000000Z", "windowEndTime": "2026-01-01T00:18:00.000000Z",
        "latestWindowStartTime": "2026-01-01T00:08:00.000000Z"});
    assert_eq!(nodes[0]["upcomingMaintenance"], notice);
    assert_eq!(nodes[0]["health"], "HEALTHY");
    emu.clock().advance(secs(300));
    let n = &list_nodes(&emu).await[0];
    assert_eq!(n["upcomingMaintenance"]["maintenanceStatus"], "ONGOING");
    assert_eq!(
        (n["state"].as_str(), n["health"].as_str()),
        (Some("READY"), Some("UNHEALTHY_MAINTENANCE"))
    );
    // The official v2 client reads the health (it has no `upcomingMaintenance` field).
    let tpu = tpu(&emu).await;
    let got = tpu.get_node().set_name(node_name("n")).send().await.unwrap();
    assert_eq!(got.health, Health::UnhealthyMaintenance);
    emu.clock().advance(secs(600));
    let n = &list_nodes(&emu).await[0];
    assert_eq!(n["health"], "HEALTHY");
    assert!(n.get("upcomingMaintenance").is_none(), "{n}");
    let interruptions = admin(&emu, "workloads/interruptions").await;
    let expected = json!({"interruptions": [{"node": node_name("n"), "at": "2026-01-01T00:08:00Z",
        "cause": "maintenance", "stepAtInterruption": 250, "committedStep": 200, "stepsLost": 50}]});
    assert_eq!(interruptions, expected);
}

#[tokio::test]
async fn perform_maintenance_is_refused_without_can_reschedule_and_accepted_with_it() {
    let emu = emulator().await;
    ready_node(&emu, "n").await;
    let (status, body) = alpha(&emu, "n", "performMaintenance", json!({})).await;
    assert_eq!(
        (status, body["error"]["status"].as_str()),
        (400, Some("FAILED_PRECONDITION"))
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no pending maintenance")
    );
    emu.inject(schedule("n", 3600, false)).unwrap();
    let (status, body) = alpha(&emu, "n", "performMaintenance", json!({})).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be rescheduled"),
        "{body}"
    );
    // Not a v2 method.
    let v2 = format!("{}/tpu/v2/{}:performMaintenance", emu.url(), node_name("n"));
    assert_eq!(raw(Method::POST, &v2, Some(json!({}))).await.0, 404);
    emu.inject(schedule("n", 3600, true)).unwrap();
    let (status, op) = alpha(&emu, "n", "performMaintenance", json!({})).await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(op["metadata"]["apiVersion"], "v2alpha1");
    assert!(op.get("done").is_none());
    assert_eq!(list_nodes(&emu).await[0]["health"], "UNHEALTHY_MAINTENANCE");
    emu.clock().advance(secs(600));
    let op_url = format!("{}/tpu/v2alpha1/{}", emu.url(), op["name"].as_str().unwrap());
    let (_, done) = raw(Method::GET, &op_url, None).await;
    assert_eq!(done["done"], true, "{done}");
    assert_eq!(
        done["response"]["@type"],
        "type.googleapis.com/google.cloud.tpu.v2alpha1.Node"
    );
    assert_eq!(list_nodes(&emu).await[0]["health"], "HEALTHY");
    assert_eq!(emu.call_count("tpu", "nodes.performMaintenance"), 3);
}

#[tokio::test]
async fn simulate_maintenance_event_starts_unscheduled_maintenance_now() {
    let emu = emulator().await;
    ready_node(&emu, "n").await;
    let (status, body) = alpha(&emu, "n", "simulateMaintenanceEvent", json!({"workerIds": ["7"]})).await;
    assert_eq!(
        (status, body["error"]["status"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    let (status, body) = alpha(&emu, "n", "simulateMaintenanceEvent", json!({"bogus": 1})).await;
    assert_eq!(status, 400, "{body}");
    let (status, op) = alpha(&emu, "n", "simulateMaintenanceEvent", json!({"workerIds": ["0"]})).await;
    assert_eq!(status, 200, "{op}");
    let n = &list_nodes(&emu).await[0];
    let notice = json!({"type": "UNSCHEDULED", "maintenanceStatus": "ONGOING",
        "windowStartTime": "2026-01-01T00:03:00.000000Z", "windowEndTime": "2026-01-01T00:08:00.000000Z",
        "latestWindowStartTime": "2026-01-01T00:03:00.000000Z"});
    assert_eq!(n["upcomingMaintenance"], notice);
    // `durations.maintenance`: 5 min by default.
    emu.clock().advance(secs(299));
    assert_eq!(list_nodes(&emu).await[0]["health"], "UNHEALTHY_MAINTENANCE");
    emu.clock().advance(secs(1));
    assert_eq!(list_nodes(&emu).await[0]["health"], "HEALTHY");
    assert_eq!(emu.call_count("tpu", "nodes.simulateMaintenanceEvent"), 3);
}

/// The operator's sequence: a checkpoint request through `nodes.patch` (metadata), then
/// `performMaintenance` once the checkpoint is committed: nothing lost. Without the request the
/// maintenance loses the steps since the last periodic checkpoint.
#[tokio::test]
async fn checkpoint_request_before_maintenance_loses_no_steps() {
    let emu = emulator().await;
    ready_node(&emu, "a").await;
    emu.inject(schedule("a", 3600, true)).unwrap();
    emu.clock().advance(secs(299));
    let patch = json!({"metadata": metadata(Some("2026-01-01T00:07:59Z"))});
    let url = format!("{}/tpu/v2/{}?updateMask=metadata", emu.url(), node_name("a"));
    let (status, body) = raw(Method::PATCH, &url, Some(patch)).await;
    assert_eq!(status, 200, "{body}");
    // 299 s of training: step 249, written at once.
    assert!(emu.object("ckpt", "run/249/_CHECKPOINT_METADATA").is_some());
    let requests = admin(&emu, "workloads/checkpoint-requests").await;
    let expected =
        json!({"checkpointRequests": [{"node": node_name("a"), "at": "2026-01-01T00:07:59Z", "step": 249}]});
    assert_eq!(requests, expected);
    emu.clock().advance(secs(5)); // the patch operation ends
    let (status, _) = alpha(&emu, "a", "performMaintenance", json!({})).await;
    assert_eq!(status, 200);
    let got = emu.workload_interruptions();
    assert_eq!(got.len(), 1);
    // 5 s after the checkpoint: 249 + floor(5 / 1.2) = 253, 4 steps lost.
    assert_eq!(
        (
            got[0].step_at_interruption,
            got[0].committed_step,
            got[0].steps_lost
        ),
        (253, 249, 4)
    );
    // Called right after the request, performMaintenance loses nothing.
    let emu = emulator().await;
    ready_node(&emu, "b").await;
    emu.inject(schedule("b", 3600, true)).unwrap();
    emu.clock().advance(secs(299));
    let patch = json!({"metadata": metadata(Some("2026-01-01T00:07:59Z"))});
    let url = format!("{}/tpu/v2/{}?updateMask=metadata", emu.url(), node_name("b"));
    assert_eq!(raw(Method::PATCH, &url, Some(patch)).await.0, 200);
    let (status, _) = alpha(&emu, "b", "performMaintenance", json!({})).await;
    assert_eq!(status, 200);
    let got = emu.workload_interruptions();
    assert_eq!(
        (
            got[0].step_at_interruption,
            got[0].committed_step,
            got[0].steps_lost
        ),
        (249, 249, 0)
    );
}

#[tokio::test]
async fn preemption_records_the_steps_lost_over_http() {
    let emu = emulator().await;
    let url = format!("{}/tpu/v2/{PARENT}/nodes?nodeId=s", emu.url());
    let node = json!({"acceleratorType": "v5p-8", "runtimeVersion": "tpu-ubuntu2204-base",
                      "schedulingConfig": {"spot": true}, "metadata": metadata(None)});
    assert_eq!(raw(Method::POST, &url, Some(node)).await.0, 200);
    emu.clock().advance(secs(180 + 310));
    emu.inject(Fault::PreemptNode { name: node_name("s") }).unwrap();
    // 310 s of training: step 258, committed 200.
    let interruptions = admin(&emu, "workloads/interruptions").await;
    let expected = json!({"interruptions": [{"node": node_name("s"), "at": "2026-01-01T00:08:10Z",
        "cause": "preemption", "stepAtInterruption": 258, "committedStep": 200, "stepsLost": 58}]});
    assert_eq!(interruptions, expected);
}

/// Creates queued resource `id` (one v5p-8 node of the same id, on demand) over v2 and lets the
/// clock run until it is ACTIVE and its node READY.
async fn active_queued_resource(emu: &Emulator, id: &str) {
    let url = format!(
        "{}/tpu/v2/{PARENT}/queuedResources?queuedResourceId={id}",
        emu.url()
    );
    let node = json!({"acceleratorType": "v5p-8", "runtimeVersion": "tpu-ubuntu2204-base",
                      "metadata": metadata(None)});
    let body = json!({"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": id, "node": node}]}});
    let (status, body) = raw(Method::POST, &url, Some(body)).await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..60 {
        emu.clock().advance(secs(60));
        let ready = list_nodes(emu)
            .await
            .iter()
            .any(|n| n["name"] == node_name(id).as_str() && n["state"] == "READY");
        if ready {
            return;
        }
    }
    panic!("queued resource {id} never got a READY node");
}

/// `queuedResources.performMaintenanceQueuedResource` starts the named nodes' reschedulable
/// maintenance, and refuses what `nodes.performMaintenance` refuses, or a node of another
/// queued resource, without starting anything.
#[tokio::test]
async fn perform_maintenance_queued_resource_starts_only_its_named_reschedulable_nodes() {
    let emu = emulator().await;
    active_queued_resource(&emu, "q1").await;
    active_queued_resource(&emu, "q2").await;
    let url = format!(
        "{}/tpu/v2alpha1/{PARENT}/queuedResources/q1:performMaintenanceQueuedResource",
        emu.url()
    );
    let call = |nodes: Value| raw(Method::POST, &url, Some(json!({"nodeNames": nodes})));
    let (status, none) = call(json!([node_name("q1")])).await;
    assert_eq!(status, 400, "no notice: {none}");
    emu.inject(schedule("q1", 3600, false)).unwrap();
    emu.inject(schedule("q2", 3600, true)).unwrap();
    let (status, fixed) = call(json!([node_name("q1")])).await;
    assert_eq!(
        (status, fixed["error"]["status"].as_str()),
        (400, Some("FAILED_PRECONDITION")),
        "{fixed}"
    );
    let (status, other) = call(json!([node_name("q2")])).await;
    assert_eq!(
        (status, other["error"]["status"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{other}"
    );
    let (status, empty) = call(json!([])).await;
    assert_eq!(status, 400, "{empty}");
    emu.inject(schedule("q1", 3600, true)).unwrap();
    let (status, op) = call(json!(["q1"])).await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(op["metadata"]["verb"], "performMaintenanceQueuedResource");
    let nodes = list_nodes(&emu).await;
    let status_of = |id: &str| {
        let n = nodes
            .iter()
            .find(|n| n["name"] == node_name(id).as_str())
            .unwrap();
        n["upcomingMaintenance"]["maintenanceStatus"].clone()
    };
    assert_eq!(
        (status_of("q1"), status_of("q2")),
        (json!("ONGOING"), json!("PENDING"))
    );
    let (status, again) = call(json!([node_name("q1")])).await;
    assert_eq!(status, 400, "already under way: {again}");
    // Over after its 600 s: the operation is done.
    emu.clock().advance(secs(601));
    let url = format!("{}/tpu/v2/{}", emu.url(), op["name"].as_str().unwrap());
    let (status, done) = raw(Method::GET, &url, None).await;
    assert_eq!((status, done["done"].as_bool()), (200, Some(true)), "{done}");
}
