//! PreprocessBatch controller end to end: the controller in-process against kube-emulator and
//! gcp-emulator (Dataproc and Cloud Storage over HTTP, through Google's clients) with the
//! emulator's manual clock.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use gcp_emulator::{Code, Fault, OUTPUT_PROPERTY};
use kube::{ResourceExt, api::DeleteParams};
use serde_json::json;
use test_kit::TestEnv;
use tokio::sync::mpsc;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    naming::{self, ObjectIdentity},
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
};
use tpu_operator_controller::{kinds::preprocess_batch, never_shutdown};
use tpu_operator_gcp::{DataprocApi, GcpError, dataproc_v1::model::Batch, longrunning::model::Operation};

const REGION: &str = "us-central1";
const PARENT: &str = "projects/demo-project/locations/us-central1";
const OUTPUT: &str = "gs://demo-data/tokenized/";
/// Emulated time per poll: a batch (60 s pending + 120 s running) finishes in ~18 polls.
const STEP: Duration = Duration::from_secs(10);

fn ppb(name: &str, max_retries: i32) -> PreprocessBatch {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "PreprocessBatch",
        "metadata": {"name": name},
        "spec": {
            "region": REGION,
            "pyspark": {
                "mainPythonFileUri": "gs://demo-data/scripts/tokenize.py",
                "args": ["gs://demo-data/raw/", OUTPUT]
            },
            "runtime": {"version": "2.2", "properties": {"spark.executor.memory": "4g"}},
            "execution": {"serviceAccount": "runner@demo-project.iam.gserviceaccount.com", "ttl": "4h"},
            "labels": {"team": "ml"},
            "outputUri": OUTPUT,
            "maxRetries": max_retries
        }
    }))
    .expect("PreprocessBatch fixture")
}

/// Creates the object and returns the deterministic Dataproc batch ids of its attempts 1..=3.
async fn create(env: &TestEnv, obj: &PreprocessBatch) -> Vec<String> {
    let created = env.create(obj).await;
    let id = ObjectIdentity::new(&env.ns, created.name_any(), created.uid().expect("uid"));
    (1..=3).map(|n| naming::dataproc_batch_id(&id, n)).collect()
}

fn progress(b: &PreprocessBatch) -> Option<Progress> {
    b.status.as_ref().and_then(|s| progress_of(&s.conditions))
}

fn stalled_reason(b: &PreprocessBatch) -> Option<String> {
    let st = b.status.as_ref()?;
    find_condition(&st.conditions, types::STALLED)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

fn phase(b: &PreprocessBatch) -> PreprocessBatchPhase {
    b.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn start_operator(env: &mut TestEnv) {
    env.spawn(preprocess_batch::run(env.ctx.clone(), never_shutdown()));
}

fn dataproc_calls(env: &TestEnv) -> usize {
    env.gcp.calls().iter().filter(|c| c.service == "dataproc").count()
}

#[tokio::test]
async fn success_with_output_becomes_ready_with_links_history_and_bounded_calls() {
    let mut env = TestEnv::start().await;
    start_operator(&mut env);
    let ids = create(&env, &ppb("ok", 0)).await;
    let b: PreprocessBatch = env
        .wait_for("ok", "Ready", STEP, |b| progress(b) == Some(Progress::Ready))
        .await;
    let st = b.status.clone().unwrap();
    assert_eq!(st.phase, PreprocessBatchPhase::Succeeded);
    assert_eq!(st.attempts, 1);
    assert_eq!(st.batch_name, Some(format!("{PARENT}/batches/{}", ids[0])));
    assert_eq!(st.batch_state.as_deref(), Some("SUCCEEDED"));
    assert_eq!(st.output_uri.as_deref(), Some(OUTPUT));
    assert!(st.driver_output_uri.is_some(), "{st:?}");
    assert!(st.batch_uuid.is_some() && st.start_time.is_some() && st.completion_time.is_some());
    assert_eq!(st.pending_operation, None, "the operation is done at SUCCEEDED");
    assert!(st.previous_batches.is_empty());
    let verified = find_condition(&st.conditions, types::OUTPUT_VERIFIED).unwrap();
    assert_eq!(
        (verified.status.as_str(), verified.reason.as_str()),
        ("True", "OutputFound")
    );
    let history = st.message.clone().unwrap();
    assert!(
        history.contains("PENDING") && history.contains("RUNNING") && history.contains("SUCCEEDED"),
        "{history}"
    );
    assert!(history.contains("Spark History Server: https://"), "{history}");
    // 12 DCUs for the emulated 120 s run at list price (plus shuffle storage).
    let cost = st.estimated_cost.clone().unwrap();
    assert_eq!((cost.so_far_usd, cost.per_hour_usd), (0.0244, 0.0), "{cost:?}");
    assert_eq!(st.observed_generation, b.metadata.generation);

    // Cloud side: one batch with the identity labels and the output property.
    let batches = env.gcp.batches();
    assert_eq!(batches.len(), 1, "{batches:#?}");
    let cloud = &batches[0];
    assert_eq!(cloud["labels"]["managed-by"], "tpu-operator");
    assert_eq!(cloud["labels"]["tpu-operator-name"], "ok");
    assert_eq!(cloud["labels"]["tpu-operator-uid"], b.uid().unwrap());
    assert_eq!(cloud["labels"]["tpu-operator-cluster"], "test-cluster");
    assert_eq!(cloud["labels"]["team"], "ml");
    assert_eq!(cloud["runtimeConfig"]["properties"][OUTPUT_PROPERTY], OUTPUT);
    assert_eq!(cloud["environmentConfig"]["executionConfig"]["ttl"], "14400s");
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 1);
    assert_eq!(
        env.gcp.call_count("storage", "objects.list"),
        1,
        "{:?}",
        env.gcp.call_counts()
    );

    // Finished: no further cloud calls however long it sits.
    let before = dataproc_calls(&env);
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(dataproc_calls(&env), before, "{:?}", env.gcp.call_counts());
    eprintln!(
        "dataproc/storage calls for one batch: {:?}",
        env.gcp.call_counts()
    );
    // One get per poll while PENDING/RUNNING (180 s of emulated run): bounded, not a storm.
    // The cloud watch's listings are left out: one a `poll_active` of real time for the whole
    // collection, so a busy machine makes more of them (bounded by the reliability suites).
    let reads = env
        .gcp
        .calls()
        .iter()
        .filter(|c| c.service == "dataproc" && c.method != "batches.list")
        .count();
    assert!(
        reads <= 40,
        "dataproc calls for one batch but listings: {reads}: {:?}",
        env.gcp.call_counts()
    );
}

#[tokio::test]
async fn success_without_output_is_a_failure_with_reason() {
    let mut env = TestEnv::start().await;
    let ids = create(&env, &ppb("no-output", 0)).await;
    env.gcp
        .inject(Fault::SuppressOutput { name: ids[0].clone() })
        .unwrap();
    start_operator(&mut env);
    let b: PreprocessBatch = env
        .wait_for("no-output", "Stalled", STEP, |b| stalled_reason(b).is_some())
        .await;
    let st = b.status.clone().unwrap();
    assert_eq!(stalled_reason(&b).as_deref(), Some("OutputMissing"));
    assert_eq!(st.phase, PreprocessBatchPhase::Failed);
    assert_eq!(st.batch_state.as_deref(), Some("SUCCEEDED"));
    assert_eq!(st.output_uri, None);
    let verified = find_condition(&st.conditions, types::OUTPUT_VERIFIED).unwrap();
    assert_eq!(
        (verified.status.as_str(), verified.reason.as_str()),
        ("False", "OutputMissing")
    );
    let stalled = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(stalled.message.contains(OUTPUT), "{}", stalled.message);
    assert_eq!(env.gcp.batches().len(), 1);
}

#[tokio::test]
async fn failed_batch_is_retried_after_a_backoff_and_succeeds_on_the_second_attempt() {
    let mut env = TestEnv::start().await;
    let ids = create(&env, &ppb("retry", 2)).await;
    env.gcp
        .inject(Fault::FailBatch {
            name: ids[0].clone(),
            message: Some("Job failed with exit code 137".into()),
        })
        .unwrap();
    start_operator(&mut env);
    let retrying: PreprocessBatch = env
        .wait_for("retry", "Retrying", STEP, |b| {
            phase(b) == PreprocessBatchPhase::Retrying
        })
        .await;
    let reconciling =
        find_condition(&retrying.status.as_ref().unwrap().conditions, types::RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "Retrying");
    assert!(
        reconciling.message.contains("exit code 137"),
        "{}",
        reconciling.message
    );

    let b: PreprocessBatch = env
        .wait_for("retry", "Ready", STEP, |b| progress(b) == Some(Progress::Ready))
        .await;
    let st = b.status.clone().unwrap();
    assert_eq!(st.attempts, 2);
    assert_eq!(st.batch_name, Some(format!("{PARENT}/batches/{}", ids[1])));
    assert_eq!(st.previous_batches, vec![format!("{PARENT}/batches/{}", ids[0])]);
    assert!(st.message.as_deref().unwrap().contains(&ids[1]), "{st:?}");
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 2);
    assert_eq!(
        st.estimated_cost.unwrap().so_far_usd,
        0.0488,
        "both attempts are paid for"
    );

    // The second attempt was submitted no sooner than the retry delay after the first ended.
    let batches = env.gcp.batches();
    let find = |id: &str| {
        batches
            .iter()
            .find(|b| b["name"].as_str().unwrap().ends_with(id))
            .unwrap()
    };
    let ended: chrono::DateTime<chrono::Utc> = find(&ids[0])["stateTime"].as_str().unwrap().parse().unwrap();
    let second: chrono::DateTime<chrono::Utc> =
        find(&ids[1])["createTime"].as_str().unwrap().parse().unwrap();
    assert_eq!(find(&ids[0])["state"], "FAILED");
    assert!(
        second - ended >= chrono::Duration::seconds(30),
        "ended {ended}, resubmitted {second}"
    );
}

#[tokio::test]
async fn exhausted_retries_stall_with_the_api_message() {
    let mut env = TestEnv::start().await;
    let ids = create(&env, &ppb("doomed", 1)).await;
    for id in &ids[..2] {
        env.gcp
            .inject(Fault::FailBatch {
                name: id.clone(),
                message: Some("Insufficient 'CPUS' quota".into()),
            })
            .unwrap();
    }
    start_operator(&mut env);
    let b: PreprocessBatch = env
        .wait_for("doomed", "Stalled", STEP, |b| stalled_reason(b).is_some())
        .await;
    let st = b.status.clone().unwrap();
    assert_eq!(stalled_reason(&b).as_deref(), Some("RetriesExhausted"));
    assert_eq!(st.phase, PreprocessBatchPhase::Failed);
    assert_eq!(st.attempts, 2);
    let stalled = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(stalled.message.contains("attempt 2/2"), "{}", stalled.message);
    assert!(
        stalled.message.contains("Insufficient 'CPUS' quota"),
        "{}",
        stalled.message
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(
        env.gcp.call_count("dataproc", "batches.create"),
        2,
        "no third attempt"
    );
}

#[tokio::test]
async fn delete_while_running_cancels_then_deletes_every_attempt_and_leaves_nothing() {
    let mut env = TestEnv::start().await;
    let mut config = env.gcp.config();
    config.durations.batch_run = Duration::from_secs(3600);
    env.gcp.set_config(config);
    let ids = create(&env, &ppb("doomed-run", 1)).await;
    // The first attempt fails, so there is an earlier attempt's batch to clean up too.
    env.gcp
        .inject(Fault::FailBatch {
            name: ids[0].clone(),
            message: None,
        })
        .unwrap();
    start_operator(&mut env);
    env.wait_for::<PreprocessBatch, _>("doomed-run", "second attempt RUNNING", STEP, |b| {
        phase(b) == PreprocessBatchPhase::Running && b.status.as_ref().unwrap().attempts == 2
    })
    .await;
    assert_eq!(env.gcp.batches().len(), 2);

    env.api::<PreprocessBatch>()
        .delete("doomed-run", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<PreprocessBatch>("doomed-run", Duration::from_secs(5))
        .await;
    assert!(env.gcp.batches().is_empty(), "{:#?}", env.gcp.batches());
    assert_eq!(env.gcp.call_count("dataproc", "operations.cancel"), 1);
    assert_eq!(env.gcp.call_count("dataproc", "batches.delete"), 2);
    // Cancel came first, and each batch was deleted only once it was terminal.
    let calls = env.gcp.calls();
    let position = |m: &str| calls.iter().position(|c| c.method == m).unwrap();
    assert!(position("operations.cancel") < position("batches.delete"));
    assert!(
        calls
            .iter()
            .filter(|c| c.method == "batches.delete")
            .all(|c| c.status < 300),
        "{calls:#?}"
    );
}

#[tokio::test]
async fn deleting_a_finished_batch_takes_one_delete_and_no_listing() {
    let mut env = TestEnv::start().await;
    start_operator(&mut env);
    create(&env, &ppb("finished", 0)).await;
    env.wait_for::<PreprocessBatch, _>("finished", "Succeeded", STEP, |b| {
        phase(b) == PreprocessBatchPhase::Succeeded
    })
    .await;
    env.gcp.clear_calls();
    env.api::<PreprocessBatch>()
        .delete("finished", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<PreprocessBatch>("finished", Duration::ZERO).await;
    assert!(env.gcp.batches().is_empty(), "{:#?}", env.gcp.batches());
    // Status saw the one attempt's batch finish, so no other batch of this object can exist:
    // it is deleted by name (Dataproc deletes synchronously) and the finalizer goes in the same
    // pass, without a listing by UID label.
    let counts = env.gcp.call_counts();
    assert_eq!(counts.get("dataproc.batches.list"), None, "{counts:?}");
    assert_eq!(counts.get("dataproc.batches.delete"), Some(&1), "{counts:?}");
    assert_eq!(dataproc_calls(&env), 1, "{counts:?}");
}

/// A Dataproc client that performs the create and then never returns, as if the operator
/// process died right after Dataproc accepted the batch and before the status write.
struct StallAfterCreate {
    inner: Arc<dyn DataprocApi>,
    created: mpsc::UnboundedSender<String>,
}

type Call<'a, T> = BoxFuture<'a, Result<T, GcpError>>;

// Written out by hand (the trait uses `async_trait`, which this crate does not depend on).
impl DataprocApi for StallAfterCreate {
    fn create_batch<'a, 'b, 'c, 'd, 'f>(
        &'a self,
        parent: &'b str,
        batch_id: &'c str,
        request_id: &'d str,
        batch: Batch,
    ) -> Call<'f, Operation>
    where
        'a: 'f,
        'b: 'f,
        'c: 'f,
        'd: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let op = self
                .inner
                .create_batch(parent, batch_id, request_id, batch)
                .await?;
            let _ = self.created.send(op.name);
            futures::future::pending().await
        })
    }
    fn get_batch<'a, 'b, 'f>(&'a self, name: &'b str) -> Call<'f, Batch>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        self.inner.get_batch(name)
    }
    fn list_batches<'a, 'b, 'c, 'f>(&'a self, parent: &'b str, filter: &'c str) -> Call<'f, Vec<Batch>>
    where
        'a: 'f,
        'b: 'f,
        'c: 'f,
        Self: 'f,
    {
        self.inner.list_batches(parent, filter)
    }
    fn list_batches_by_page<'a, 'b, 'c, 'd, 'f>(
        &'a self,
        parent: &'b str,
        filter: &'c str,
        sift: &'d mut (dyn FnMut(Vec<Batch>) + Send),
    ) -> Call<'f, ()>
    where
        'a: 'f,
        'b: 'f,
        'c: 'f,
        'd: 'f,
        Self: 'f,
    {
        self.inner.list_batches_by_page(parent, filter, sift)
    }
    fn delete_batch<'a, 'b, 'f>(&'a self, name: &'b str) -> Call<'f, ()>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        self.inner.delete_batch(name)
    }
    fn get_operation<'a, 'b, 'f>(&'a self, name: &'b str) -> Call<'f, Operation>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        self.inner.get_operation(name)
    }
    fn cancel_operation<'a, 'b, 'f>(&'a self, name: &'b str) -> Call<'f, ()>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        self.inner.cancel_operation(name)
    }
}

#[tokio::test]
async fn operator_killed_between_submit_and_status_write_leaves_one_batch() {
    let mut env = TestEnv::start().await;
    let mut ctx = env.context().await;
    let (tx, mut created) = mpsc::unbounded_channel();
    ctx.gcp.dataproc = Arc::new(StallAfterCreate {
        inner: ctx.gcp.dataproc.clone(),
        created: tx,
    });
    env.spawn(preprocess_batch::run(Arc::new(ctx), never_shutdown()));
    let ids = create(&env, &ppb("crash", 0)).await;

    let first_op = tokio::time::timeout(Duration::from_secs(30), created.recv())
        .await
        .expect("the operator submits a batch")
        .unwrap();
    env.stop_all(); // SIGKILL inside the window: the batch exists, the status does not know it.
    let seen = env.api::<PreprocessBatch>().get("crash").await.unwrap();
    assert!(
        seen.status
            .as_ref()
            .is_none_or(|s| s.attempts == 0 && s.batch_name.is_none()),
        "{:?}",
        seen.status
    );
    assert_eq!(env.gcp.batches().len(), 1);

    // A fresh operator process: its create is a requestId replay that returns the first operation.
    start_operator(&mut env);
    let submitted: PreprocessBatch = env
        .wait_for("crash", "submitted", Duration::ZERO, |b: &PreprocessBatch| {
            b.status.as_ref().is_some_and(|s| s.attempts == 1)
        })
        .await;
    assert_eq!(submitted.status.unwrap().pending_operation, Some(first_op));
    env.wait_for::<PreprocessBatch, _>("crash", "Ready", STEP, |b| progress(b) == Some(Progress::Ready))
        .await;
    let batches = env.gcp.batches();
    assert_eq!(batches.len(), 1, "{batches:#?}");
    assert!(batches[0]["name"].as_str().unwrap().ends_with(&ids[0]));
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 2);
    let dataproc_ops = env
        .gcp
        .operations()
        .iter()
        .filter(|o| o["name"].as_str().unwrap().contains("/regions/"))
        .count();
    assert_eq!(dataproc_ops, 1, "{:#?}", env.gcp.operations());
}

#[tokio::test]
async fn existing_batch_with_the_attempts_id_is_adopted_not_duplicated() {
    let mut env = TestEnv::start().await;
    let obj = ppb("adopt", 0);
    let created = env.create(&obj).await;
    let identity = ObjectIdentity::new(&env.ns, "adopt", created.uid().unwrap());
    let batch_id = naming::dataproc_batch_id(&identity, 1);
    // A batch already exists under attempt 1's id but with a request id the controller does not
    // use (e.g. Dataproc forgot the request id after a long outage): the create is a 409.
    let body = preprocess_batch::spec::batch_request(&obj.spec.batch, &identity, "test-cluster").unwrap();
    let op = env
        .ctx
        .gcp
        .dataproc
        .create_batch(PARENT, &batch_id, "someone-else-1", body)
        .await
        .unwrap();
    start_operator(&mut env);
    let b: PreprocessBatch = env
        .wait_for("adopt", "Ready", STEP, |b| progress(b) == Some(Progress::Ready))
        .await;
    let st = b.status.unwrap();
    assert_eq!(st.batch_name, Some(format!("{PARENT}/batches/{batch_id}")));
    assert_eq!(st.attempts, 1);
    assert_eq!(env.gcp.batches().len(), 1);
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 2);
    let statuses: Vec<u16> = env
        .gcp
        .calls()
        .iter()
        .filter(|c| c.method == "batches.create")
        .map(|c| c.status)
        .collect();
    assert_eq!(statuses, vec![200, 409]);
    assert!(!op.name.is_empty());
}

#[tokio::test]
async fn api_refusals_stall_with_the_api_message_and_permission_is_retried_slowly() {
    let mut env = TestEnv::start().await;
    start_operator(&mut env);

    // PERMISSION_DENIED on the create: Stalled with Google's message, then (permission fixed
    // out of band) the slow retry submits and the batch runs to Ready. A transient 503 on the
    // first batch read is only backed off.
    env.gcp
        .inject(Fault::FailCalls {
            service: "dataproc".into(),
            method: "batches.create".into(),
            count: 1,
            code: Code::PermissionDenied,
            message: None,
        })
        .unwrap();
    env.gcp
        .inject(Fault::FailCalls {
            service: "dataproc".into(),
            method: "batches.get".into(),
            count: 1,
            code: Code::Unavailable,
            message: None,
        })
        .unwrap();
    create(&env, &ppb("denied", 0)).await;
    let b: PreprocessBatch = env
        .wait_for("denied", "Stalled", Duration::ZERO, |b| {
            stalled_reason(b).is_some()
        })
        .await;
    assert_eq!(stalled_reason(&b).as_deref(), Some("PermissionDenied"));
    let stalled = find_condition(&b.status.as_ref().unwrap().conditions, types::STALLED).unwrap();
    assert!(stalled.message.contains("permission"), "{}", stalled.message);
    assert_eq!(b.status.as_ref().unwrap().attempts, 0);
    env.wait_for::<PreprocessBatch, _>("denied", "Ready", STEP, |b| progress(b) == Some(Progress::Ready))
        .await;
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 2);

    // INVALID_ARGUMENT (Dataproc's TTL floor is 10 minutes; admission only checks the syntax):
    // terminal, Stalled with the API's message, never resubmitted.
    let mut invalid = ppb("invalid", 2);
    invalid.spec.batch.execution.as_mut().unwrap().ttl = Some("5m".into());
    create(&env, &invalid).await;
    let b: PreprocessBatch = env
        .wait_for("invalid", "Stalled", STEP, |b| stalled_reason(b).is_some())
        .await;
    let st = b.status.clone().unwrap();
    assert_eq!(stalled_reason(&b).as_deref(), Some("InvalidSpec"));
    assert_eq!(st.phase, PreprocessBatchPhase::Failed);
    let stalled = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(stalled.message.contains("ttl"), "{}", stalled.message);
    env.idle(Duration::from_millis(700), STEP).await;
    assert_eq!(
        env.gcp.call_count("dataproc", "batches.create"),
        3,
        "the invalid batch is not retried"
    );
    assert_eq!(env.gcp.batches().len(), 1);
}

#[tokio::test]
async fn orphan_policy_leaves_the_running_batch() {
    let mut env = TestEnv::start().await;
    // An hour's run: the wait for Running moves the clock 10 s a poll, and the default two
    // minutes could end before a busy machine's pass saw the batch run.
    let mut config = env.gcp.config();
    config.durations.batch_run = Duration::from_secs(3600);
    env.gcp.set_config(config);
    start_operator(&mut env);
    let mut obj = ppb("keep", 0);
    obj.spec.deletion_policy = tpu_operator_api::common::DeletionPolicy::Orphan;
    create(&env, &obj).await;
    env.wait_for::<PreprocessBatch, _>("keep", "RUNNING", STEP, |b| {
        phase(b) == PreprocessBatchPhase::Running
    })
    .await;
    env.api::<PreprocessBatch>()
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<PreprocessBatch>("keep", Duration::ZERO).await;
    let batches = env.gcp.batches();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0]["state"], "RUNNING");
    assert_eq!(env.gcp.call_count("dataproc", "operations.cancel"), 0);
    assert_eq!(env.gcp.call_count("dataproc", "batches.delete"), 0);
}

#[tokio::test]
async fn missing_input_stalls_before_any_batch_until_it_is_uploaded() {
    let mut env = TestEnv::start().await;
    start_operator(&mut env);
    let mut obj = ppb("needs-input", 0);
    obj.spec.batch.inputs = vec!["gs://demo-data/raw/".into()];
    create(&env, &obj).await;
    let b: PreprocessBatch = env
        .wait_for("needs-input", "Stalled", Duration::ZERO, |b| {
            stalled_reason(b).is_some()
        })
        .await;
    assert_eq!(stalled_reason(&b).as_deref(), Some("NotFound"));
    let stalled = find_condition(&b.status.as_ref().unwrap().conditions, types::STALLED).unwrap();
    assert!(
        stalled.message.contains("gs://demo-data/raw/"),
        "{}",
        stalled.message
    );
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 0);

    env.gcp
        .put_object("demo-data", "raw/part-0.txt", "hello", "text/plain");
    env.wait_for::<PreprocessBatch, _>("needs-input", "Ready", STEP, |b| {
        progress(b) == Some(Progress::Ready)
    })
    .await;
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 1);
}
