//! Dataproc v1 Serverless batches against the emulator, through Google's official Rust client.

use crate::common;

use common::*;
use gcp_emulator::{Code, Emulator, Fault};
use google_cloud_dataproc_v1::model::{Batch, PySparkBatch, RuntimeConfig, batch};
use google_cloud_gax::options::RequestOptionsBuilder as _;
use google_cloud_gax::paginator::ItemPaginator as _;
use google_cloud_lro::Poller;
use reqwest::Method;
use serde_json::json;

const PARENT: &str = "projects/p/locations/us-central1";

fn pyspark(args: &[&str]) -> Batch {
    Batch::new()
        .set_pyspark_batch(
            PySparkBatch::new()
                .set_main_python_file_uri("gs://code/main.py")
                .set_args(args.iter().copied()),
        )
        .set_labels([("owner", "op")])
}

async fn state(c: &google_cloud_dataproc_v1::client::BatchController, id: &str) -> batch::State {
    c.get_batch()
        .set_name(format!("{PARENT}/batches/{id}"))
        .send()
        .await
        .unwrap()
        .state
}

#[tokio::test]
async fn batch_runs_to_success_with_poller_and_writes_outputs() {
    let emu = emulator().await;
    let dp = dataproc(&emu).await;
    let _t = ticker(emu.clock(), secs(10));
    let b = dp
        .create_batch()
        .set_parent(PARENT)
        .set_batch_id("b-0001")
        .set_request_id("req-1")
        .set_batch(
            pyspark(&["gs://data/raw/", "--x", "gs://data/processed/"])
                .set_runtime_config(RuntimeConfig::new().set_version("2.2")),
        )
        .poller()
        .until_done()
        .await
        .expect("batch completes");
    assert_eq!(b.state, batch::State::Succeeded);
    assert_eq!(b.runtime_config.as_ref().unwrap().version, "2.2.39");
    assert_eq!(
        b.labels.get("goog-dataproc-batch-id").map(String::as_str),
        Some("b-0001")
    );
    assert_eq!(
        b.labels.get("goog-dataproc-location").map(String::as_str),
        Some("us-central1")
    );
    assert!(b.labels.contains_key("goog-dataproc-batch-uuid"));
    let hist: Vec<batch::State> = b.state_history.iter().map(|h| h.state.clone()).collect();
    assert_eq!(hist, vec![batch::State::Pending, batch::State::Running]);
    let usage = b
        .runtime_info
        .as_ref()
        .unwrap()
        .approximate_usage
        .as_ref()
        .unwrap();
    assert!(usage.milli_dcu_seconds > 0);
    assert!(
        b.runtime_info
            .as_ref()
            .unwrap()
            .endpoints
            .contains_key("Spark History Server")
    );
    let env = b
        .environment_config
        .as_ref()
        .unwrap()
        .execution_config
        .as_ref()
        .unwrap();
    assert_eq!(env.ttl.as_ref().unwrap().seconds(), 14400);
    assert!(
        b.operation
            .starts_with("projects/p/regions/us-central1/operations/")
    );
    let names: Vec<String> = emu.objects("data").into_iter().map(|o| o.name).collect();
    assert_eq!(
        names,
        vec![
            "processed/_SUCCESS".to_string(),
            "processed/part-00000".to_string()
        ]
    );
}

#[tokio::test]
async fn state_machine_request_id_replay_duplicates_and_delete_rules() {
    let emu = emulator().await;
    let dp = dataproc(&emu).await;
    let op = dp
        .create_batch()
        .set_parent(PARENT)
        .set_batch_id("b-0001")
        .set_request_id("r1")
        .set_batch(pyspark(&[]))
        .send()
        .await
        .unwrap();
    let replay = dp
        .create_batch()
        .set_parent(PARENT)
        .set_batch_id("b-0001")
        .set_request_id("r1")
        .set_batch(pyspark(&[]))
        .send()
        .await
        .unwrap();
    assert_eq!(op.name, replay.name);
    let dup = dp
        .create_batch()
        .set_parent(PARENT)
        .set_batch_id("b-0001")
        .set_batch(pyspark(&[]))
        .send()
        .await
        .unwrap_err();
    assert_eq!((code(&dup).as_str(), http_status(&dup)), ("AlreadyExists", 409));
    assert_eq!(state(&dp, "b-0001").await, batch::State::Pending);
    let err = dp
        .delete_batch()
        .set_name(format!("{PARENT}/batches/b-0001"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (code(&err).as_str(), http_status(&err)),
        ("FailedPrecondition", 400)
    );
    emu.clock().advance(secs(60));
    assert_eq!(state(&dp, "b-0001").await, batch::State::Running);
    assert!(
        !dp.get_operation().set_name(&op.name).send().await.unwrap().done,
        "op done only at the terminal state"
    );
    emu.clock().advance(secs(120));
    assert_eq!(state(&dp, "b-0001").await, batch::State::Succeeded);
    // locations/ and regions/ operation names both work.
    let via_locations = op.name.replace("/regions/", "/locations/");
    assert!(
        dp.get_operation()
            .set_name(&via_locations)
            .send()
            .await
            .unwrap()
            .done
    );
    dp.delete_batch()
        .set_name(format!("{PARENT}/batches/b-0001"))
        .send()
        .await
        .unwrap();
    let err = dp
        .get_batch()
        .set_name(format!("{PARENT}/batches/b-0001"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().message,
        format!("batch \"{PARENT}/batches/b-0001\" not found")
    );
    let ops = dp
        .list_operations()
        .set_name("projects/p/regions/us-central1/operations")
        .send()
        .await
        .unwrap();
    assert_eq!(ops.operations.len(), 1);
    dp.delete_operation().set_name(&op.name).send().await.unwrap();
}

async fn create(
    dp: &google_cloud_dataproc_v1::client::BatchController,
    id: &str,
    args: &[&str],
) -> google_cloud_dataproc_v1::Result<google_cloud_longrunning::model::Operation> {
    dp.create_batch()
        .set_parent(PARENT)
        .set_batch_id(id)
        .set_batch(pyspark(args))
        .send()
        .await
}

async fn get(dp: &google_cloud_dataproc_v1::client::BatchController, id: &str) -> Batch {
    dp.get_batch()
        .set_name(format!("{PARENT}/batches/{id}"))
        .send()
        .await
        .unwrap()
}

/// Cancelling a running batch's operation: CANCELLING, then CANCELLED with the operation done;
/// cancelling again is FAILED_PRECONDITION, and nothing was written.
async fn cancel_running_batch_through_its_operation(
    emu: &Emulator,
    dp: &google_cloud_dataproc_v1::client::BatchController,
) {
    let op = create(dp, "c-0001", &["gs://o/x/"]).await.unwrap();
    emu.clock().advance(secs(60));
    dp.cancel_operation().set_name(&op.name).send().await.unwrap();
    assert_eq!(state(dp, "c-0001").await, batch::State::Cancelling);
    emu.clock().advance(secs(30));
    let b = get(dp, "c-0001").await;
    assert_eq!(b.state, batch::State::Cancelled);
    let done = dp.get_operation().set_name(&op.name).send().await.unwrap();
    assert!(done.done);
    let err = dp
        .cancel_operation()
        .set_name(op.name.replace("/regions/", "/locations/"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "FailedPrecondition");
    assert!(emu.objects("o").is_empty(), "cancelled batches write nothing");
}

/// `FailBatch` fails a running batch at once (with its message) and a future one at the end of
/// its run; `SuppressOutput` lets a batch succeed without writing; neither writes outputs.
async fn fail_running_and_future_batches_and_suppress_outputs(
    emu: &Emulator,
    dp: &google_cloud_dataproc_v1::client::BatchController,
) {
    create(dp, "f-0001", &["gs://o/f/"]).await.unwrap();
    emu.clock().advance(secs(61));
    emu.inject(Fault::FailBatch {
        name: "f-0001".into(),
        message: Some("boom".into()),
    })
    .unwrap();
    let b = get(dp, "f-0001").await;
    assert_eq!(
        (b.state, b.state_message.as_str()),
        (batch::State::Failed, "boom")
    );
    emu.inject(Fault::FailBatch {
        name: format!("{PARENT}/batches/f-0002"),
        message: None,
    })
    .unwrap();
    emu.inject(Fault::SuppressOutput {
        name: "s-0001".into(),
    })
    .unwrap();
    for id in ["f-0002", "s-0001"] {
        create(dp, id, &["gs://o/f/"]).await.unwrap();
    }
    emu.clock().advance(secs(180));
    assert_eq!(state(dp, "f-0002").await, batch::State::Failed);
    assert_eq!(state(dp, "s-0001").await, batch::State::Succeeded);
    assert!(
        emu.objects("o").is_empty(),
        "failed and suppressed batches write nothing"
    );
}

#[tokio::test]
async fn cancel_through_the_operation_and_failures() {
    let emu = emulator().await;
    let dp = dataproc(&emu).await;
    cancel_running_batch_through_its_operation(&emu, &dp).await;

    // Fail a running batch now; fail a future batch at the end of its run; suppress outputs.
    fail_running_and_future_batches_and_suppress_outputs(&emu, &dp).await;

    emu.inject(Fault::FailCalls {
        service: "dataproc".into(),
        method: "batches.create".into(),
        count: 2,
        code: Code::ResourceExhausted,
        message: Some("Insufficient 'DISKS_TOTAL_GB' quota".into()),
    })
    .unwrap();
    for _ in 0..2 {
        let e = create(&dp, "q-0001", &[]).await.unwrap_err();
        assert_eq!((code(&e).as_str(), http_status(&e)), ("ResourceExhausted", 429));
    }
    create(&dp, "q-0001", &[]).await.unwrap();
}

#[tokio::test]
async fn list_filters_order_and_paging() {
    let emu = emulator().await;
    let dp = dataproc(&emu).await;
    for (i, env) in ["prod", "dev", "prod"].iter().enumerate() {
        dp.create_batch()
            .set_parent(PARENT)
            .set_batch_id(format!("l-000{i}"))
            .set_batch(pyspark(&[]).set_labels([("env", *env)]))
            .send()
            .await
            .unwrap();
        emu.clock().advance(secs(30));
    }
    // l-0000 RUNNING (created at 0, runs at 60), l-0001 RUNNING (30 -> 90 > now=90?), l-0002 PENDING
    let list = |f: &str| {
        let f = f.to_string();
        let dp = dp.clone();
        async move {
            let r = dp
                .list_batches()
                .set_parent(PARENT)
                .set_filter(f)
                .send()
                .await
                .unwrap();
            r.batches
                .into_iter()
                .map(|b| b.name.rsplit('/').next().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("").await, vec!["l-0002", "l-0001", "l-0000"], "newest first");
    assert_eq!(list("labels.env = prod").await, vec!["l-0002", "l-0000"]);
    assert_eq!(list("state = PENDING").await, vec!["l-0002"]);
    assert_eq!(list("state = RUNNING AND labels.env=prod").await, vec!["l-0000"]);
    assert_eq!(
        list("state = PENDING OR batch_id = l-0000").await,
        vec!["l-0002", "l-0000"]
    );
    assert_eq!(
        list("create_time < \"2026-01-01T00:00:45Z\"").await,
        vec!["l-0001", "l-0000"]
    );
    let e = dp
        .list_batches()
        .set_parent(PARENT)
        .set_filter("colour = red")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidArgument");
    let e = dp
        .list_batches()
        .set_parent(PARENT)
        .set_order_by("name")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "InvalidArgument");
    let ok = dp
        .list_batches()
        .set_parent(PARENT)
        .set_order_by("create_time desc")
        .set_page_size(2)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.batches.len(), 2);
    let mut items = dp.list_batches().set_parent(PARENT).set_page_size(1).by_item();
    let mut n = 0;
    while let Some(b) = items.next().await {
        b.unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
    let (_, empty) = raw(
        Method::GET,
        &format!(
            "{}/dataproc/v1/projects/p/locations/europe-west1/batches",
            emu.url()
        ),
        None,
    )
    .await;
    assert_eq!(empty, json!({}));
    let _ = dp
        .list_batches()
        .set_parent(PARENT)
        .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn wire_format_validation_and_enum_encoding() {
    let emu = emulator().await;
    let base = format!("{}/dataproc/v1/{PARENT}/batches", emu.url());
    let body = json!({"pysparkBatch": {"mainPythonFileUri": "gs://b/m.py"}});
    let (s, op) = raw(
        Method::POST,
        &format!("{base}?batchId=w-0001&requestId=&%24alt=json%3Benum-encoding%3Dint"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        op["metadata"]["@type"],
        "type.googleapis.com/google.cloud.dataproc.v1.BatchOperationMetadata"
    );
    assert_eq!(op["metadata"]["operationType"], 1);
    assert!(
        op["metadata"]["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("No runtime version specified")
    );
    let (_, named) = raw(
        Method::GET,
        &format!("{}/dataproc/v1/{}", emu.url(), op["name"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(named["metadata"]["operationType"], "BATCH");
    emu.clock().advance(secs(180));
    let (_, b) = raw(
        Method::GET,
        &format!("{base}/w-0001?$alt=json;enum-encoding=int"),
        None,
    )
    .await;
    assert_eq!(
        (b["state"].clone(), b["stateHistory"][0]["state"].clone()),
        (json!(5), json!(1))
    );
    assert_eq!(b["runtimeInfo"]["approximateUsage"]["milliDcuSeconds"], "1440000");
    let cases = [
        (json!({}), "batch.batch_config"),
        (
            json!({"pysparkBatch": {}}),
            "batch.pyspark_batch.main_python_file_uri",
        ),
        (
            json!({"pysparkBatch": {"mainPythonFileUri": "x"}, "sparkBatch": {"mainClass": "C"}}),
            "batch.batch_config",
        ),
        (
            json!({"pysparkBatch": {"mainPythonFileUri": "x"}, "environmentConfig": {"executionConfig": {"ttl": "5s"}}}),
            "ttl",
        ),
        (
            json!({"pysparkBatch": {"mainPythonFileUri": "x"}, "environmentConfig": {"executionConfig": {"idleTtl": "600s"}}}),
            "idle_ttl",
        ),
        (
            json!({"pysparkBatch": {"mainPythonFileUri": "x"}, "labels": {"Bad": "x"}}),
            "batch.labels",
        ),
        (
            json!({"pysparkBatch": {"mainPythonFileUri": "x"}, "state": "SUCCEEDED", "nope": 1}),
            "Unknown name \"nope\"",
        ),
    ];
    for (i, (body, needle)) in cases.into_iter().enumerate() {
        let (s, e) = raw(Method::POST, &format!("{base}?batchId=v-000{i}"), Some(body)).await;
        assert_eq!(
            (s, e["error"]["status"].as_str()),
            (400, Some("INVALID_ARGUMENT")),
            "{e}"
        );
        assert!(
            e["error"]["message"].as_str().unwrap().contains(needle),
            "{needle} not in {e}"
        );
    }
    for bad in ["AB", "has_underscore", "x"] {
        let (s, _) = raw(Method::POST, &format!("{base}?batchId={bad}"), Some(body.clone())).await;
        assert_eq!(s, 400, "{bad}");
    }
    let (s, _) = raw(
        Method::POST,
        &format!("{base}?batchId=ok-id&requestId=way-too-long-request-id-that-exceeds-forty-chars"),
        Some(body),
    )
    .await;
    assert_eq!(s, 400);
}
