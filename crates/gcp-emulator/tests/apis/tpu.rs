//! Cloud TPU v2 against the emulator, through Google's official Rust client (REST transport).

use crate::common;

use common::*;
use gcp_emulator::{Code, Emulator, Fault};
use google_cloud_gax::options::RequestOptionsBuilder as _;
use google_cloud_gax::paginator::ItemPaginator as _;
use google_cloud_lro::Poller;
use google_cloud_tpu_v2::model::{
    AcceleratorConfig, Node, QueuedResource, SchedulingConfig, accelerator_config, node, queued_resource,
    queued_resource_state,
};
use reqwest::Method;
use serde_json::json;

const PARENT: &str = "projects/p/locations/us-central2-b";
const ZONE: &str = "us-central2-b";

fn node_spec(accel: &str) -> Node {
    Node::new()
        .set_accelerator_type(accel)
        .set_runtime_version("tpu-ubuntu2204-base")
}

type TpuClient = google_cloud_tpu_v2::client::Tpu;

/// Creates `n1` (v5p 2x2x1) through the LRO poller and checks the returned node: READY, named
/// type `v5p-8`, one endpoint, and the default service account and network.
async fn create_n1_with_poller(tpu: &TpuClient) -> Node {
    let created = tpu
        .create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(
            Node::new()
                .set_runtime_version("tpu-ubuntu2204-base")
                .set_accelerator_config(
                    AcceleratorConfig::new()
                        .set_type(accelerator_config::Type::V5P)
                        .set_topology("2x2x1"),
                )
                .set_labels([("owner", "op")])
                .set_metadata([("startup-script", "echo hi")]),
        )
        .poller()
        .until_done()
        .await
        .expect("create completes");
    assert_eq!(created.name, format!("{PARENT}/nodes/n1"));
    assert_eq!(created.state, node::State::Ready);
    assert_eq!(created.accelerator_type, "v5p-8");
    assert_eq!(
        created.health,
        node::Health::Unspecified,
        "the LRO copy has no health"
    );
    assert_eq!(created.network_endpoints.len(), 1);
    assert_eq!(created.network_endpoints[0].port, 8470);
    assert_eq!(created.api_version, node::ApiVersion::V2);
    let sa = created.service_account.clone().unwrap();
    assert!(sa.email.ends_with("-compute@developer.gserviceaccount.com"));
    assert_eq!(sa.scope.len(), 6);
    let net = created.network_config.clone().unwrap();
    assert_eq!(net.network, "projects/p/global/networks/default");
    assert_eq!(
        net.subnetwork,
        "projects/p/regions/us-central2/subnetworks/default"
    );
    created
}

/// `updateMask=labels` changes only the labels (a new description is ignored), and
/// `updateMask=metadata` replaces the whole metadata map.
async fn patch_labels_then_metadata(tpu: &TpuClient, got: &Node) {
    let patched = tpu
        .update_node()
        .set_node(
            got.clone()
                .set_labels([("owner", "op"), ("team", "ml")])
                .set_description("d"),
        )
        .set_update_mask(google_cloud_wkt::FieldMask::default().set_paths(["labels"]))
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(patched.labels.get("team").map(String::as_str), Some("ml"));
    assert_eq!(patched.description, "", "description was not in the mask");

    // `updateMask=metadata` replaces the whole map (AIP-134): a key left out is removed, which is
    // why writers (gcloud ssh, the operator) send the node's current metadata with their change.
    let patched = tpu
        .update_node()
        .set_node(
            got.clone()
                .set_metadata([("ssh-keys", "alice:ssh-ed25519 AAAA alice")]),
        )
        .set_update_mask(google_cloud_wkt::FieldMask::default().set_paths(["metadata"]))
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.keys().collect::<Vec<_>>(),
        ["ssh-keys"],
        "startup-script was not sent, so it is gone"
    );
}

/// Stopping through the poller ends STOPPED, starting again ends READY.
async fn stop_then_start(tpu: &TpuClient, name: &str) {
    let stopped = tpu
        .stop_node()
        .set_name(name)
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(stopped.state, node::State::Stopped);
    let started = tpu
        .start_node()
        .set_name(name)
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(started.state, node::State::Ready);
}

#[tokio::test]
async fn node_lifecycle_with_poller_get_list_patch_stop_start_delete() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let _t = ticker(emu.clock(), secs(10));

    let created = create_n1_with_poller(&tpu).await;

    let got = tpu.get_node().set_name(&created.name).send().await.unwrap();
    assert_eq!(got.health, node::Health::Healthy);

    patch_labels_then_metadata(&tpu, &got).await;

    stop_then_start(&tpu, &created.name).await;

    let attrs = tpu
        .get_guest_attributes()
        .set_name(&created.name)
        .send()
        .await
        .unwrap();
    assert_eq!(attrs.guest_attributes.len(), 1);

    tpu.delete_node()
        .set_name(&created.name)
        .poller()
        .until_done()
        .await
        .unwrap();
    let err = tpu.get_node().set_name(&created.name).send().await.unwrap_err();
    assert_eq!((code(&err).as_str(), http_status(&err)), ("NotFound", 404));
    emu.shutdown().await;
}

#[tokio::test]
async fn node_states_follow_the_clock_and_operations_api_works() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let op = tpu
        .create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(node_spec("v5litepod-8"))
        .send()
        .await
        .unwrap();
    assert!(!op.done);
    assert!(op.name.starts_with(&format!("{PARENT}/operations/operation-")));
    let n = tpu
        .get_node()
        .set_name(format!("{PARENT}/nodes/n1"))
        .send()
        .await
        .unwrap();
    assert_eq!(n.state, node::State::Creating);
    emu.clock().advance(secs(179));
    assert!(!tpu.get_operation().set_name(&op.name).send().await.unwrap().done);
    emu.clock().advance(secs(1));
    let done = tpu.get_operation().set_name(&op.name).send().await.unwrap();
    assert!(done.done, "operation completes exactly when the node is READY");

    let ops = tpu.list_operations().set_name(PARENT).send().await.unwrap();
    assert_eq!(ops.operations.len(), 1);
    tpu.cancel_operation().set_name(&op.name).send().await.unwrap();
    tpu.delete_operation().set_name(&op.name).send().await.unwrap();
    let err = tpu.get_operation().set_name(&op.name).send().await.unwrap_err();
    assert_eq!(code(&err), "NotFound");

    // stop -> STOPPING -> STOPPED, start -> STARTING -> READY, delete -> DELETING -> 404
    let name = format!("{PARENT}/nodes/n1");
    tpu.stop_node().set_name(&name).send().await.unwrap();
    assert_eq!(
        tpu.get_node().set_name(&name).send().await.unwrap().state,
        node::State::Stopping
    );
    let err = tpu.start_node().set_name(&name).send().await.unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("FailedPrecondition", 400)
    );
    emu.clock().advance(secs(60));
    assert_eq!(
        tpu.get_node().set_name(&name).send().await.unwrap().state,
        node::State::Stopped
    );
    tpu.start_node().set_name(&name).send().await.unwrap();
    assert_eq!(
        tpu.get_node().set_name(&name).send().await.unwrap().state,
        node::State::Starting
    );
    emu.clock().advance(secs(90));
    assert_eq!(
        tpu.get_node().set_name(&name).send().await.unwrap().state,
        node::State::Ready
    );
    tpu.delete_node().set_name(&name).send().await.unwrap();
    assert_eq!(
        tpu.get_node().set_name(&name).send().await.unwrap().state,
        node::State::Deleting
    );
    emu.clock().advance(secs(60));
    assert_eq!(
        code(&tpu.get_node().set_name(&name).send().await.unwrap_err()),
        "NotFound"
    );
    assert_eq!(emu.call_count("tpu", "nodes.get"), 7);
}

#[tokio::test]
async fn multi_host_nodes_get_one_endpoint_per_host_and_cannot_stop() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("big")
        .set_node(node_spec("v5p-32"))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(180));
    let n = tpu
        .get_node()
        .set_name(format!("{PARENT}/nodes/big"))
        .send()
        .await
        .unwrap();
    assert_eq!(n.network_endpoints.len(), 4);
    assert_eq!(n.accelerator_config.as_ref().unwrap().topology, "2x2x4");
    let err = tpu.stop_node().set_name(&n.name).send().await.unwrap_err();
    assert_eq!(code(&err), "FailedPrecondition");
}

#[tokio::test]
async fn list_pages_and_catalogs() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    for i in 0..5 {
        tpu.create_node()
            .set_parent(PARENT)
            .set_node_id(format!("n{i}"))
            .set_node(node_spec("v6e-8"))
            .send()
            .await
            .unwrap();
    }
    let page = tpu
        .list_nodes()
        .set_parent(PARENT)
        .set_page_size(2)
        .send()
        .await
        .unwrap();
    assert_eq!(page.nodes.len(), 2);
    assert!(!page.next_page_token.is_empty());
    let mut all = tpu.list_nodes().set_parent(PARENT).set_page_size(2).by_item();
    let mut names = vec![];
    while let Some(n) = all.next().await {
        names.push(n.unwrap().name);
    }
    assert_eq!(names.len(), 5);
    let empty = tpu
        .list_nodes()
        .set_parent("projects/p/locations/us-east1-d")
        .send()
        .await
        .unwrap();
    assert!(empty.nodes.is_empty());
    let (_, raw_empty) = raw(
        Method::GET,
        &format!("{}/tpu/v2/projects/p/locations/us-east1-d/nodes", emu.url()),
        None,
    )
    .await;
    assert_eq!(raw_empty, json!({}), "empty lists are {{}} on the wire");

    let types = tpu
        .list_accelerator_types()
        .set_parent(PARENT)
        .send()
        .await
        .unwrap();
    assert!(types.accelerator_types.iter().any(|t| t.r#type == "v5p-8"));
    let filtered = tpu
        .list_accelerator_types()
        .set_parent(PARENT)
        .set_filter("type=v6e-8")
        .send()
        .await
        .unwrap();
    assert_eq!(filtered.accelerator_types.len(), 1);
    let versions = tpu
        .list_runtime_versions()
        .set_parent(PARENT)
        .send()
        .await
        .unwrap();
    assert!(
        versions
            .runtime_versions
            .iter()
            .any(|v| v.version == "tpu-ubuntu2204-base")
    );
    let at = tpu
        .get_accelerator_type()
        .set_name(format!("{PARENT}/acceleratorTypes/v5p-8"))
        .send()
        .await
        .unwrap();
    assert_eq!(at.r#type, "v5p-8");
    let locs = tpu.list_locations().set_name("projects/p").send().await.unwrap();
    assert!(locs.locations.iter().any(|l| l.location_id == ZONE));
    let loc = tpu.get_location().set_name(PARENT).send().await.unwrap();
    assert_eq!(loc.name, PARENT);
    let id = tpu
        .generate_service_identity()
        .set_parent(PARENT)
        .send()
        .await
        .unwrap();
    assert!(
        id.identity
            .unwrap()
            .email
            .ends_with("@cloud-tpu.iam.gserviceaccount.com")
    );
    let rv = tpu
        .get_runtime_version()
        .set_name(format!("{PARENT}/runtimeVersions/tpu-vm-base"))
        .send()
        .await
        .unwrap();
    assert_eq!(rv.version, "tpu-vm-base");
}

#[tokio::test]
async fn enums_are_names_by_default_and_numbers_when_asked() {
    let emu = emulator().await;
    let base = format!("{}/tpu/v2/{PARENT}", emu.url());
    let body = json!({"runtimeVersion": "tpu-vm-cos-stable", "acceleratorConfig": {"type": 10, "topology": "2x2x1"}});
    let (s, op) = raw(
        Method::POST,
        &format!("{base}/nodes?nodeId=n1&%24alt=json%3Benum-encoding%3Dint"),
        Some(body),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        op["metadata"]["@type"],
        "type.googleapis.com/google.cloud.common.OperationMetadata"
    );
    assert_eq!(op["metadata"]["verb"], "create");
    emu.clock().advance(secs(180));
    let (_, named) = raw(Method::GET, &format!("{base}/nodes/n1"), None).await;
    assert_eq!(
        (named["state"].clone(), named["acceleratorConfig"]["type"].clone()),
        (json!("READY"), json!("V5P"))
    );
    assert_eq!(named["health"], "HEALTHY");
    assert!(named["id"].is_string(), "int64 as string");
    let (_, numbered) = raw(
        Method::GET,
        &format!("{base}/nodes/n1?$alt=json;enum-encoding=int"),
        None,
    )
    .await;
    assert_eq!(
        (
            numbered["state"].clone(),
            numbered["acceleratorConfig"]["type"].clone()
        ),
        (json!(2), json!(10))
    );
    assert_eq!(numbered["apiVersion"], 4);
    let opname = op["name"].as_str().unwrap();
    let (_, done) = raw(
        Method::GET,
        &format!("{}/tpu/v2/{opname}?%24alt=json%3Benum-encoding%3Dint", emu.url()),
        None,
    )
    .await;
    assert_eq!(
        done["response"]["@type"],
        "type.googleapis.com/google.cloud.tpu.v2.Node"
    );
    assert_eq!(done["response"]["state"], 2);
    assert!(done["response"].get("health").is_none());
    assert!(done["metadata"]["endTime"].is_string());
}

#[tokio::test]
async fn request_validation_names_the_field() {
    let emu = emulator().await;
    let base = format!("{}/tpu/v2/{PARENT}/nodes", emu.url());
    let cases = [
        (
            json!({"runtimeVersion": "x", "acceleratorType": "v5p-8", "bogus": 1}),
            "Unknown name \"bogus\"",
        ),
        (
            json!({"runtimeVersion": 7, "acceleratorType": "v5p-8"}),
            "node.runtime_version",
        ),
        (
            json!({"runtimeVersion": "x", "acceleratorConfig": {"type": "V99", "topology": "2x2x1"}}),
            "node.accelerator_config.type",
        ),
        (json!({"acceleratorType": "v5p-8"}), "node.runtime_version"),
        (
            json!({"runtimeVersion": "x", "acceleratorType": "v5p-7"}),
            "node.accelerator_type",
        ),
        (
            json!({"runtimeVersion": "x", "acceleratorType": "v5p-8", "labels": {"a": 1}}),
            "node.labels[a]",
        ),
    ];
    for (body, needle) in cases {
        let (s, e) = raw(Method::POST, &format!("{base}?nodeId=n1"), Some(body.clone())).await;
        assert_eq!(s, 400, "{body}");
        assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(needle),
            "{needle} not in {e}"
        );
    }
    let ok = json!({"runtimeVersion": "x", "acceleratorType": "v5p-8"});
    let (s, _) = raw(Method::POST, &format!("{base}?nodeId=Bad_Id"), Some(ok.clone())).await;
    assert_eq!(s, 400);
    let (s, _) = raw(Method::POST, &base, Some(ok.clone())).await;
    assert_eq!(s, 400, "nodeId is required");
    assert_eq!(
        raw(Method::POST, &format!("{base}?nodeId=n1"), Some(ok.clone()))
            .await
            .0,
        200
    );
    let (s, e) = raw(Method::POST, &format!("{base}?nodeId=n1"), Some(ok)).await;
    assert_eq!((s, e["error"]["status"].as_str()), (409, Some("ALREADY_EXISTS")));
    let (s, e) = raw(
        Method::PATCH,
        &format!("{base}/n1?updateMask=runtimeVersion"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (s, e["error"]["status"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
}

fn qr(node_id: &str, accel: &str) -> QueuedResource {
    QueuedResource::new()
        .set_tpu(
            queued_resource::Tpu::new().set_node_spec([queued_resource::tpu::NodeSpec::new()
                .set_parent(PARENT)
                .set_node_id(node_id)
                .set_node(node_spec(accel))]),
        )
        .set_spot(queued_resource::Spot::new())
}

async fn qr_state(tpu: &google_cloud_tpu_v2::client::Tpu, name: &str) -> queued_resource_state::State {
    tpu.get_queued_resource()
        .set_name(name)
        .send()
        .await
        .unwrap()
        .state
        .unwrap()
        .state
}

/// A request id as Cloud TPU documents it ("Idempotent request UUID").
const REQ_1: &str = "0f3c7c1e-5a55-5b39-9a0e-6d2f1a4b8c01";

/// `queuedResources.create?requestId` is an "Idempotent request UUID" (tpu.v2.json): anything
/// else is 400 INVALID_ARGUMENT naming `request_id`, before anything is created; delete too.
#[tokio::test]
async fn queued_resource_request_id_must_be_a_uuid() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    for bad in [
        "req-1",
        "tpuop-create-queued-resour-0123456789abcdef",
        "0f3c7c1e-5a55",
    ] {
        let err = tpu
            .create_queued_resource()
            .set_parent(PARENT)
            .set_queued_resource_id("qr-uuid")
            .set_request_id(bad)
            .set_queued_resource(qr("qn-uuid", "v5litepod-8"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(code(&err), "InvalidArgument", "{bad}: {err}");
        assert!(err.to_string().contains("request_id"), "{err}");
    }
    assert!(emu.queued_resources().is_empty());
    tpu.create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("qr-uuid")
        .set_request_id(REQ_1)
        .set_queued_resource(qr("qn-uuid", "v5litepod-8"))
        .send()
        .await
        .unwrap();
    let err = tpu
        .delete_queued_resource()
        .set_name(format!("{PARENT}/queuedResources/qr-uuid"))
        .set_request_id("not-a-uuid")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidArgument", "{err}");
}

async fn node_qn1(tpu: &TpuClient) -> google_cloud_tpu_v2::Result<Node> {
    tpu.get_node()
        .set_name(format!("{PARENT}/nodes/qn1"))
        .send()
        .await
}

/// Creates `qr1` with request id REQ_1: a replay with the same id returns the first operation, a
/// create of the same id without a request id is ALREADY_EXISTS. Returns the operation.
async fn create_qr1_replay_and_duplicate(tpu: &TpuClient) -> google_cloud_longrunning::model::Operation {
    let op = tpu
        .create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("qr1")
        .set_request_id(REQ_1)
        .set_queued_resource(qr("qn1", "v5litepod-8"))
        .send()
        .await
        .unwrap();
    let replay = tpu
        .create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("qr1")
        .set_request_id(REQ_1)
        .set_queued_resource(qr("qn1", "v5litepod-8"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        op.name, replay.name,
        "requestId replay returns the first operation"
    );
    let dup = tpu
        .create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("qr1")
        .set_queued_resource(qr("qn9", "v5litepod-8"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&dup), "AlreadyExists");
    op
}

/// `name` walks CREATING, ACCEPTED (operation done), WAITING_FOR_RESOURCES, PROVISIONING (its
/// node `qn1` CREATING and pointing back) to ACTIVE with `qn1` READY.
async fn walk_qr1_to_active(
    emu: &Emulator,
    tpu: &TpuClient,
    name: &str,
    op: &google_cloud_longrunning::model::Operation,
) {
    use queued_resource_state::State as S;
    assert_eq!(qr_state(tpu, name).await, S::Creating);
    emu.clock().advance(secs(10));
    assert_eq!(qr_state(tpu, name).await, S::Accepted);
    assert!(tpu.get_operation().set_name(&op.name).send().await.unwrap().done);
    emu.clock().advance(secs(20));
    assert_eq!(qr_state(tpu, name).await, S::WaitingForResources);
    emu.clock().advance(secs(60));
    assert_eq!(qr_state(tpu, name).await, S::Provisioning);
    let n = node_qn1(tpu).await.unwrap();
    assert_eq!(
        (n.state, n.queued_resource.as_str()),
        (node::State::Creating, name)
    );
    emu.clock().advance(secs(180));
    assert_eq!(qr_state(tpu, name).await, S::Active);
    assert_eq!(node_qn1(tpu).await.unwrap().state, node::State::Ready);
}

/// Preempting `name`: SUSPENDING (by SERVICE) with `qn1` PREEMPTED, then SUSPENDED with `qn1`
/// gone; a reset (through the poller) puts it back to ACCEPTED.
async fn preempt_suspend_and_reset(emu: &Emulator, tpu: &TpuClient, name: &str) {
    use queued_resource_state::State as S;
    emu.inject(Fault::PreemptQueuedResource {
        name: name.to_string(),
    })
    .unwrap();
    let q = tpu
        .get_queued_resource()
        .set_name(name)
        .send()
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(
        (q.state, q.state_initiator),
        (S::Suspending, queued_resource_state::StateInitiator::Service)
    );
    assert_eq!(node_qn1(tpu).await.unwrap().state, node::State::Preempted);
    emu.clock().advance(secs(30));
    assert_eq!(qr_state(tpu, name).await, S::Suspended);
    assert_eq!(code(&node_qn1(tpu).await.unwrap_err()), "NotFound");
    let _t = ticker(emu.clock(), secs(5));
    let reset = tpu
        .reset_queued_resource()
        .set_name(name)
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(reset.state.unwrap().state, S::Accepted);
    drop(_t);
}

/// Once ACTIVE again, deleting `name` is FAILED_PRECONDITION without force; with force it goes,
/// taking its nodes, and the list is empty.
async fn delete_needs_force_while_nodes_live(emu: &Emulator, tpu: &TpuClient, name: &str) {
    use queued_resource_state::State as S;
    emu.clock().advance(secs(400));
    assert_eq!(qr_state(tpu, name).await, S::Active);
    let err = tpu
        .delete_queued_resource()
        .set_name(name)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("FailedPrecondition", 400)
    );
    let _t = ticker(emu.clock(), secs(10));
    tpu.delete_queued_resource()
        .set_name(name)
        .set_force(true)
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(
        code(&tpu.get_queued_resource().set_name(name).send().await.unwrap_err()),
        "NotFound"
    );
    assert!(emu.nodes().is_empty());
    let list = tpu
        .list_queued_resources()
        .set_parent(PARENT)
        .send()
        .await
        .unwrap();
    assert!(list.queued_resources.is_empty());
}

#[tokio::test]
async fn queued_resource_walks_every_state_and_replays_request_ids() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let name = format!("{PARENT}/queuedResources/qr1");
    let op = create_qr1_replay_and_duplicate(&tpu).await;
    walk_qr1_to_active(&emu, &tpu, &name, &op).await;

    // Preemption: SUSPENDING (SERVICE) -> SUSPENDED, nodes gone; reset goes back to the queue.
    preempt_suspend_and_reset(&emu, &tpu, &name).await;

    // delete: refused without force while nodes are live, allowed with force.
    delete_needs_force_while_nodes_live(&emu, &tpu, &name).await;
}

#[tokio::test]
async fn stockout_fails_creates_and_holds_queued_resources_until_valid_until() {
    use queued_resource_state::State as S;
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    emu.inject(Fault::Stockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    let err = tpu
        .create_node()
        .set_parent(PARENT)
        .set_node_id("n1")
        .set_node(node_spec("v6e-8"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("ResourceExhausted", 429)
    );
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("n2")
        .set_node(node_spec("v5p-8"))
        .send()
        .await
        .expect("other families have capacity");

    let waits = qr("w1", "v6e-8");
    let expires = qr("w2", "v6e-8").set_queueing_policy(
        queued_resource::QueueingPolicy::new()
            .set_valid_until_duration(google_cloud_wkt::Duration::clamp(600, 0)),
    );
    for (id, q) in [("wait", waits), ("expire", expires)] {
        tpu.create_queued_resource()
            .set_parent(PARENT)
            .set_queued_resource_id(id)
            .set_queued_resource(q)
            .send()
            .await
            .unwrap();
    }
    emu.clock().advance(secs(500));
    assert_eq!(
        qr_state(&tpu, &format!("{PARENT}/queuedResources/wait")).await,
        S::WaitingForResources
    );
    emu.clock().advance(secs(100));
    let failed = tpu
        .get_queued_resource()
        .set_name(format!("{PARENT}/queuedResources/expire"))
        .send()
        .await
        .unwrap();
    let st = failed.state.unwrap();
    assert_eq!(st.state, S::Failed);
    let fd = st.failed_data().expect("failedData");
    assert_eq!(fd.error.as_ref().unwrap().code, 8);

    emu.inject(Fault::LiftStockout {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    assert_eq!(
        qr_state(&tpu, &format!("{PARENT}/queuedResources/wait")).await,
        S::Provisioning
    );
    emu.clock().advance(secs(180));
    assert_eq!(
        qr_state(&tpu, &format!("{PARENT}/queuedResources/wait")).await,
        S::Active
    );
}

/// With a spot and an on-demand node READY, `PreemptNode` preempts the spot one and refuses the
/// on-demand one.
async fn preempt_spot_but_not_on_demand(emu: &Emulator, tpu: &TpuClient) {
    let spot = node_spec("v5p-8").set_scheduling_config(SchedulingConfig::new().set_spot(true));
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("spot")
        .set_node(spot)
        .send()
        .await
        .unwrap();
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id("od")
        .set_node(node_spec("v5p-8"))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(180));
    emu.inject(Fault::PreemptNode {
        name: format!("{PARENT}/nodes/spot"),
    })
    .unwrap();
    assert_eq!(
        tpu.get_node()
            .set_name(format!("{PARENT}/nodes/spot"))
            .send()
            .await
            .unwrap()
            .state,
        node::State::Preempted
    );
    assert!(
        emu.inject(Fault::PreemptNode {
            name: format!("{PARENT}/nodes/od")
        })
        .is_err(),
        "on-demand nodes are not preemptible"
    );
}

/// `FailCalls` with each code fails only the next `nodes.list`, with that code and HTTP status;
/// on method `*` it fails any call, with the code's default message.
async fn fail_calls_with_each_code(emu: &Emulator, tpu: &TpuClient) {
    for (c, expected, http) in [
        (Code::PermissionDenied, "PermissionDenied", 403),
        (Code::Unavailable, "Unavailable", 503),
        (Code::ResourceExhausted, "ResourceExhausted", 429),
        (Code::NotFound, "NotFound", 404),
        (Code::InvalidArgument, "InvalidArgument", 400),
        (Code::AlreadyExists, "AlreadyExists", 409),
    ] {
        emu.inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.list".into(),
            count: 1,
            code: c,
            message: None,
        })
        .unwrap();
        // NeverRetry: the default policy would retry UNAVAILABLE on this idempotent GET.
        let err = tpu
            .list_nodes()
            .set_parent(PARENT)
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
            .send()
            .await
            .unwrap_err();
        assert_eq!((code(&err).as_str(), http_status(&err)), (expected, http));
        tpu.list_nodes()
            .set_parent(PARENT)
            .send()
            .await
            .expect("only the next call fails");
    }
    let err = tpu
        .get_node()
        .set_name(format!("{PARENT}/nodes/od"))
        .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
    emu.inject(Fault::FailCalls {
        service: "tpu".into(),
        method: "*".into(),
        count: 1,
        code: Code::PermissionDenied,
        message: None,
    })
    .unwrap();
    let e = err.send().await.unwrap_err();
    assert_eq!(e.status().unwrap().message, "The caller does not have permission");
}

/// `RandomFailures` at rate 0.5 fails about half of 40 calls with INTERNAL, and the failures are
/// in the call log after the faults are cleared.
async fn random_failures_fail_about_half(emu: &Emulator, tpu: &TpuClient) {
    emu.inject(Fault::RandomFailures {
        rate: 0.5,
        seed: 7,
        code: Code::Internal,
        service: Some("tpu".into()),
    })
    .unwrap();
    let mut failures = 0;
    for _ in 0..40 {
        let r = tpu
            .list_nodes()
            .set_parent(PARENT)
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
            .send()
            .await;
        if let Err(e) = r {
            assert_eq!(code(&e), "Internal");
            failures += 1;
        }
    }
    assert!(
        (8..=32).contains(&failures),
        "about half of 40 calls fail, got {failures}"
    );
    emu.clear_faults();
    tpu.list_nodes().set_parent(PARENT).send().await.unwrap();
    assert!(
        emu.calls()
            .iter()
            .any(|c| c.status == 500 && c.method == "nodes.list")
    );
}

#[tokio::test]
async fn preemption_call_faults_latency_and_random_failures() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    preempt_spot_but_not_on_demand(&emu, &tpu).await;

    fail_calls_with_each_code(&emu, &tpu).await;

    emu.inject(Fault::Latency {
        service: "tpu".into(),
        method: Some("nodes.get".into()),
        millis: 150,
        count: Some(1),
    })
    .unwrap();
    let t0 = std::time::Instant::now();
    tpu.get_node()
        .set_name(format!("{PARENT}/nodes/od"))
        .send()
        .await
        .unwrap();
    assert!(t0.elapsed() >= std::time::Duration::from_millis(150));

    random_failures_fail_about_half(&emu, &tpu).await;
}

#[tokio::test]
async fn tpu_vm_workload_writes_success_or_failed_marker() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    for (id, uri) in [
        ("ok", "gs://models/run-1/"),
        ("bad", "gs://models/run-2/"),
        ("quiet", "gs://models/run-3/"),
    ] {
        let n = node_spec("v5p-8").set_metadata([(gcp_emulator::DONE_URI_KEY, uri)]);
        tpu.create_node()
            .set_parent(PARENT)
            .set_node_id(id)
            .set_node(n)
            .send()
            .await
            .unwrap();
    }
    emu.inject(Fault::FailTpuWorkload {
        node: "bad".into(),
        exit_code: None,
        message: None,
    })
    .unwrap();
    emu.inject(Fault::SuppressOutput {
        name: format!("{PARENT}/nodes/quiet"),
    })
    .unwrap();
    emu.clock().advance(secs(180 + 599));
    assert!(emu.objects("models").is_empty(), "workload still running");
    emu.clock().advance(secs(1));
    let names: Vec<String> = emu.objects("models").into_iter().map(|o| o.name).collect();
    assert_eq!(
        names,
        vec!["run-1/_SUCCESS".to_string(), "run-2/_FAILED".to_string()]
    );
    assert_eq!(emu.object("models", "run-2/_FAILED").unwrap().as_ref(), b"1");
}

#[tokio::test]
async fn multislice_queued_resource_honours_valid_after() {
    use queued_resource::tpu::node_spec::MultisliceParams;
    use queued_resource_state::State as S;
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let spec = queued_resource::tpu::NodeSpec::new()
        .set_parent(PARENT)
        .set_multislice_params(
            MultisliceParams::new()
                .set_node_count(2)
                .set_node_id_prefix("slice"),
        )
        .set_node(node_spec("v6e-8"));
    let q = QueuedResource::new()
        .set_tpu(queued_resource::Tpu::new().set_node_spec([spec]))
        .set_queueing_policy(
            queued_resource::QueueingPolicy::new()
                .set_valid_after_duration(google_cloud_wkt::Duration::clamp(1000, 0)),
        );
    tpu.create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("ms")
        .set_queued_resource(q)
        .send()
        .await
        .unwrap();
    let name = format!("{PARENT}/queuedResources/ms");
    emu.clock().advance(secs(900));
    assert_eq!(
        qr_state(&tpu, &name).await,
        S::WaitingForResources,
        "not before validAfter"
    );
    emu.clock().advance(secs(100));
    assert_eq!(qr_state(&tpu, &name).await, S::Provisioning);
    emu.clock().advance(secs(180));
    assert_eq!(qr_state(&tpu, &name).await, S::Active);
    for i in 0..2 {
        let n = tpu
            .get_node()
            .set_name(format!("{PARENT}/nodes/slice-{i}"))
            .send()
            .await
            .unwrap();
        assert!(n.multislice_node);
        assert_eq!(
            (n.state, n.queued_resource.as_str()),
            (node::State::Ready, name.as_str())
        );
    }
}

fn reserved_qr(node_id: &str, reservation: &str) -> QueuedResource {
    QueuedResource::new()
        .set_tpu(
            queued_resource::Tpu::new().set_node_spec([queued_resource::tpu::NodeSpec::new()
                .set_parent(PARENT)
                .set_node_id(node_id)
                .set_node(node_spec("v5litepod-8"))]),
        )
        .set_reservation_name(reservation)
}

/// `reservationName` (tpu.v2.json: "Format: projects/{project}/locations/{zone}/reservations/
/// {reservation}"): a malformed name is refused; a missing reservation FAILs the queued resource
/// (NOT_FOUND in failedData); a reservation's chips are handed out first come, the next request
/// WAITs until they are free again, and stockouts do not hold reserved capacity back.
#[tokio::test]
async fn queued_resources_consume_named_reservations() {
    use queued_resource_state::State as S;
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let res = format!("{PARENT}/reservations/res-a");
    let create = |id: &'static str, node: &'static str, r: String| {
        let tpu = tpu.clone();
        async move {
            tpu.create_queued_resource()
                .set_parent(PARENT)
                .set_queued_resource_id(id)
                .set_queued_resource(reserved_qr(node, &r))
                .send()
                .await
        }
    };
    let err = create("bad", "bad-n", "res-a".into()).await.unwrap_err();
    assert_eq!(code(&err), "InvalidArgument", "{err}");
    assert!(err.to_string().contains("reservation_name"), "{err}");

    // No such reservation: accepted, then FAILED (NOT_FOUND) instead of provisioning.
    create("missing", "missing-n", format!("{PARENT}/reservations/nope"))
        .await
        .unwrap();
    emu.clock().advance(secs(10 + 20 + 60));
    let q = tpu
        .get_queued_resource()
        .set_name(format!("{PARENT}/queuedResources/missing"))
        .send()
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(q.state, S::Failed);
    let e = q.failed_data().unwrap().error.clone().unwrap();
    assert_eq!(e.code, 5, "{e:?}");
    assert!(e.message.contains("reservations/nope"), "{e:?}");

    // 8 chips reserved: the first v5litepod-8 gets them despite a stockout, the second waits.
    emu.create_reservation(&res, 8).unwrap();
    emu.inject(Fault::Stockout {
        zone: ZONE.into(),
        accelerator: "v5litepod".into(),
    })
    .unwrap();
    create("first", "first-n", res.clone()).await.unwrap();
    create("second", "second-n", res.clone()).await.unwrap();
    let first = format!("{PARENT}/queuedResources/first");
    let second = format!("{PARENT}/queuedResources/second");
    emu.clock().advance(secs(10 + 20 + 60));
    assert_eq!(qr_state(&tpu, &first).await, S::Provisioning);
    assert_eq!(qr_state(&tpu, &second).await, S::WaitingForResources);
    emu.clock().advance(secs(180));
    assert_eq!(qr_state(&tpu, &first).await, S::Active);
    assert_eq!(qr_state(&tpu, &second).await, S::WaitingForResources);

    // The first gives its chips back; the second gets them at its next check.
    tpu.delete_queued_resource()
        .set_name(&first)
        .set_force(true)
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(60));
    emu.clock().advance(secs(60));
    assert_eq!(qr_state(&tpu, &second).await, S::Provisioning);
}
