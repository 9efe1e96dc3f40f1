//! Issue 50 item 6: per-zone stock per accelerator and capacity kind, exhausted and refilled over
//! emulated time, and per-project rate quotas per group of methods with each API's error shape.
//! Through Google's official Rust clients (TPU) and raw HTTP where a shape is checked on the wire.

use crate::common;

use common::*;
use gcp_emulator::{CapacityKind, QuotaGroup, RateQuota, StockSpec, StockStep};
use google_cloud_gax::error::rpc::{Code as RpcCode, StatusDetails};
use google_cloud_tpu_v2::model::{
    Node, QueuedResource, SchedulingConfig, queued_resource, queued_resource_state,
};
use reqwest::Method;
use serde_json::json;

const ZONE: &str = "us-east5-b";
const PARENT: &str = "projects/p/locations/us-east5-b";

fn node(spot: bool) -> Node {
    Node::new()
        .set_accelerator_type("v6e-8")
        .set_runtime_version("v2-alpha-tpuv6e")
        .set_scheduling_config(SchedulingConfig::new().set_spot(spot))
}

fn stock(kind: CapacityKind, chips: u64, steps: Vec<StockStep>) -> StockSpec {
    StockSpec {
        zone: ZONE.into(),
        accelerator: "v6e".into(),
        kind,
        chips,
        steps,
        refill: None,
    }
}

async fn create(
    tpu: &google_cloud_tpu_v2::client::Tpu,
    id: &str,
    spot: bool,
) -> Result<(), google_cloud_gax::error::Error> {
    tpu.create_node()
        .set_parent(PARENT)
        .set_node_id(id)
        .set_node(node(spot))
        .send()
        .await
        .map(|_| ())
}

fn reason(err: &google_cloud_gax::error::Error) -> Option<String> {
    err.status()?.details.iter().find_map(|d| match d {
        StatusDetails::ErrorInfo(i) => Some(i.reason.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn spot_stock_runs_out_for_spot_only_and_comes_back_with_time_and_deletes() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let later = StockStep {
        after: secs(600),
        chips: 16,
    };
    emu.set_stock(stock(CapacityKind::Spot, 8, vec![later]));
    create(&tpu, "a", true).await.expect("8 chips in stock");
    let err = create(&tpu, "b", true).await.unwrap_err();
    assert_eq!(http_status(&err), 429);
    assert_eq!(err.status().unwrap().code, RpcCode::ResourceExhausted);
    assert_eq!(reason(&err).as_deref(), Some("STOCKOUT"));
    // On-demand capacity of the same zone has no stock entry: unlimited.
    create(&tpu, "c", false).await.expect("another kind");
    // Restocked after 10 minutes of emulated time.
    emu.clock().advance(secs(600));
    create(&tpu, "b", true).await.expect("restocked to 16");
    assert!(create(&tpu, "d", true).await.is_err(), "16 chips held");
    // A deleted node gives its chips back once it is gone.
    tpu.delete_node()
        .set_name(format!("{PARENT}/nodes/a"))
        .send()
        .await
        .unwrap();
    emu.clock().advance(secs(120));
    create(&tpu, "d", true).await.expect("a's chips came back");
    assert_eq!(emu.stock()["stock"][0]["capNow"], 16);
}

#[tokio::test]
async fn a_queued_resource_waits_for_its_kinds_stock() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    let later = StockStep {
        after: secs(1800),
        chips: 8,
    };
    emu.set_stock(stock(CapacityKind::Queued, 0, vec![later]));
    let qr = QueuedResource::new().set_tpu(
        queued_resource::Tpu::new().set_node_spec([queued_resource::tpu::NodeSpec::new()
            .set_parent(PARENT)
            .set_node_id("q1")
            .set_node(node(false))]),
    );
    tpu.create_queued_resource()
        .set_parent(PARENT)
        .set_queued_resource_id("qr1")
        .set_queued_resource(qr)
        .send()
        .await
        .unwrap();
    let state = |emu: &gcp_emulator::Emulator| emu.queued_resources()[0]["state"]["state"].clone();
    emu.clock().advance(secs(1200));
    assert_eq!(state(&emu), "WAITING_FOR_RESOURCES");
    emu.clock().advance(secs(900));
    emu.clock().advance(secs(300));
    let got = tpu
        .get_queued_resource()
        .set_name(format!("{PARENT}/queuedResources/qr1"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.state.unwrap().state, queued_resource_state::State::Active);
}

#[tokio::test]
async fn tpu_creates_over_the_rate_quota_get_429_rate_limit_exceeded_until_the_next_minute() {
    let emu = emulator().await;
    let tpu = tpu(&emu).await;
    emu.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: Some(2),
    });
    emu.clock().advance(secs(15));
    create(&tpu, "a", false).await.unwrap();
    create(&tpu, "b", false).await.unwrap();
    let err = create(&tpu, "c", false).await.unwrap_err();
    assert_eq!(http_status(&err), 429);
    let status = err.status().unwrap();
    assert!(
        status.message.starts_with("Quota exceeded for quota metric"),
        "{}",
        status.message
    );
    let info = status
        .details
        .iter()
        .find_map(|d| match d {
            StatusDetails::ErrorInfo(i) => Some(i.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(info.reason, "RATE_LIMIT_EXCEEDED");
    assert_eq!(info.metadata["quota_metric"], "tpu.googleapis.com/qps/create");
    assert_eq!(info.metadata["quota_limit_value"], "2");
    // Reads are another group.
    tpu.get_node()
        .set_name(format!("{PARENT}/nodes/a"))
        .send()
        .await
        .unwrap();
    // The window refills at the next whole minute, not 60 s after the first call.
    emu.clock().advance(secs(45));
    create(&tpu, "c", false).await.expect("a new minute");
    assert_eq!(emu.rate_quota_refusals(QuotaGroup::TpuCreate), 1);
}

#[tokio::test]
async fn compute_dataproc_and_vertex_refuse_in_their_own_shapes_and_the_admin_api_shows_it() {
    let emu = emulator().await;
    let url = emu.url();
    for group in ["computeMutate", "dataprocBatch", "vertexJobSubmit"] {
        let (status, _) = raw(
            Method::POST,
            &format!("{url}/emulator/v1/quotas"),
            Some(json!({"group": group, "perMinute": 0})),
        )
        .await;
        assert_eq!(status, 200);
    }
    let compute = format!("{url}/compute/v1/projects/p/zones/{ZONE}/instances");
    let (status, body) = raw(Method::POST, &compute, Some(json!({"name": "vm"}))).await;
    assert_eq!(status, 403, "{body}");
    let item = &body["error"]["errors"][0];
    assert_eq!(
        (item["reason"].as_str(), item["domain"].as_str()),
        (Some("rateLimitExceeded"), Some("usageLimits"))
    );
    let batches = format!("{url}/dataproc/v1/projects/p/locations/us-central1/batches?batchId=b-1");
    let (status, body) = raw(Method::POST, &batches, Some(json!({}))).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    let meta = &body["error"]["details"][0]["metadata"];
    assert_eq!(
        meta["quota_limit"],
        "BatchOperationRequestsPerMinutePerProjectPerRegion"
    );
    assert_eq!(meta["quota_location"], "us-central1");
    let jobs = format!("{url}/vertex/v1/projects/p/locations/us-east5/customJobs");
    let (status, body) = raw(Method::POST, &jobs, Some(json!({}))).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["details"][0]["reason"], "RATE_LIMIT_EXCEEDED");
    let (_, view) = raw(Method::GET, &format!("{url}/emulator/v1/quotas"), None).await;
    let refused: Vec<u64> = view["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["refused"].as_u64().unwrap())
        .collect();
    assert_eq!(refused, vec![1, 1, 1], "{view}");
    // Stock over the admin API as well.
    let body = json!({"zone": ZONE, "accelerator": "v6e", "kind": "spot", "chips": 0,
                      "steps": [{"after": "10m", "chips": 64}]});
    let (status, _) = raw(Method::POST, &format!("{url}/emulator/v1/stock"), Some(body)).await;
    assert_eq!(status, 200);
    let (_, stock) = raw(Method::GET, &format!("{url}/emulator/v1/stock"), None).await;
    assert_eq!(stock["stock"][0]["capNow"], 0, "{stock}");
    emu.clock().advance(secs(600));
    let (_, stock) = raw(Method::GET, &format!("{url}/emulator/v1/stock"), None).await;
    assert_eq!(stock["stock"][0]["capNow"], 64, "{stock}");
}
