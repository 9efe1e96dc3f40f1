//! TrainingPipeline end to end: the three controllers in-process against kube-emulator and
//! gcp-emulator (Dataproc, Vertex AI, TPU and Cloud Storage over HTTP through Google's clients),
//! with the emulator's manual clock.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use gcp_emulator::Fault;
use kube::{
    ResourceExt,
    api::{DeleteParams, Patch, PatchParams, WatchEvent, WatchParams},
};
use prometheus_client::{encoding::text::encode, registry::Registry};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    common::Links,
    conditions::{find_condition, types},
    naming::ObjectIdentity,
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::{RERUN_ANNOTATION, StageName, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice, training_pipeline, training_pipeline::spec},
    never_shutdown,
    runtime::metrics::Metrics,
};

/// Emulated time per poll: Dataproc (3 min) + Vertex (6 min) finish in a few dozen polls.
const STEP: Duration = Duration::from_secs(15);
const BUCKET: &str = "demo-project-tpu-data";

fn spawn_all(env: &mut TestEnv, ctx: &Arc<Context>) {
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
}

async fn started() -> TestEnv {
    let mut env = TestEnv::start().await;
    let ctx = env.ctx.clone();
    spawn_all(&mut env, &ctx);
    env
}

fn quickstart() -> TrainingPipeline {
    test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"))
}

/// The quickstart without its preprocessing stage (Vertex training only), writing
/// `models/<name>/`: pipelines alive at once may not share a model directory.
fn vertex_only(name: &str) -> TrainingPipeline {
    let mut tp = quickstart();
    tp.metadata.name = Some(name.into());
    tp.spec.preprocess = None;
    tp.spec.artifacts.model_dir = "gs://demo-project-tpu-data/models/$(PIPELINE_NAME)/".into();
    tp
}

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn message(tp: &TrainingPipeline) -> String {
    tp.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

fn train_attempts(tp: &TrainingPipeline) -> i32 {
    let st = tp.status.as_ref().unwrap();
    st.stages
        .iter()
        .find(|s| s.name == StageName::Train)
        .map(|s| s.attempts)
        .unwrap_or_default()
}

async fn wait_phase(env: &TestEnv, name: &str, want: Phase) -> TrainingPipeline {
    wait_phase_at(env, name, want, STEP).await
}

/// Waits for a TPU VM pipeline to say Training, moving the clock a second a poll: its workload
/// ends 600 s of cloud time after the node is READY, and the tests act on the running workload
/// next (at 15 s a poll, a busy machine's pass had 40 polls to come in before the run ended).
async fn tpu_vm_training(env: &TestEnv, name: &str) -> TrainingPipeline {
    wait_phase_at(env, name, Phase::Training, Duration::from_secs(1)).await
}

/// [`wait_phase`] moving the clock by `step` a poll (`Duration::ZERO`: it stands still, for a
/// phase the controller reaches without the cloud moving on).
async fn wait_phase_at(env: &TestEnv, name: &str, want: Phase, step: Duration) -> TrainingPipeline {
    env.wait_for::<TrainingPipeline, _>(name, &format!("phase {want:?}"), step, |tp| phase(tp) == want)
        .await
}

#[tokio::test]
async fn quickstart_reaches_succeeded_with_the_model_in_storage() {
    let env = started().await;
    env.create(&quickstart()).await;
    let tp = wait_phase(&env, "quickstart", Phase::Succeeded).await;
    let st = tp.status.clone().unwrap();
    let outputs = st.outputs.clone().unwrap();
    assert_eq!(
        outputs.model_uri.as_deref(),
        Some("gs://demo-project-tpu-data/models/quickstart/model/")
    );
    assert_eq!(
        outputs.processed_data.as_deref(),
        Some("gs://demo-project-tpu-data/processed/")
    );
    assert!(
        env.gcp
            .object(BUCKET, "models/quickstart/model/saved_model.pb")
            .is_some()
    );
    assert!(env.gcp.object(BUCKET, "processed/_SUCCESS").is_some());
    let ready = find_condition(&st.conditions, types::READY).unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");
    // The owned batch carries the pipeline as its controller and expanded arguments.
    let batch = env
        .api::<PreprocessBatch>()
        .get("quickstart-preprocess")
        .await
        .unwrap();
    let owner = &batch.owner_references()[0];
    assert_eq!(
        (owner.controller, owner.uid.as_str()),
        (Some(true), tp.uid().unwrap().as_str())
    );
    assert_eq!(
        batch.spec.batch.pyspark.unwrap().args,
        [
            "--input=gs://demo-project-tpu-data/raw/",
            "--output=gs://demo-project-tpu-data/processed/"
        ]
    );
    // One batch, one training job, created once each.
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 1);
    assert_eq!(env.gcp.custom_jobs().len(), 1);
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 1);
    let job = &env.gcp.custom_jobs()[0];
    assert_eq!(job["labels"]["tpu-operator-uid"], tp.uid().unwrap().as_str());
    assert_eq!(
        job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"][0],
        "--data=gs://demo-project-tpu-data/processed/"
    );
}

#[tokio::test]
async fn preprocessing_failure_stops_the_pipeline_with_a_clear_reason() {
    let env = started().await;
    env.create(&quickstart()).await;
    let name = env
        .until("the batch", Duration::from_secs(1), async || {
            let batch = env.gcp.batches().into_iter().next();
            batch.map(|b| b["name"].as_str().unwrap().to_string())
        })
        .await;
    env.gcp
        .inject(Fault::FailBatch {
            name,
            message: Some("input schema mismatch".into()),
        })
        .unwrap();
    let tp = wait_phase(&env, "quickstart", Phase::Failed).await;
    let st = tp.status.clone().unwrap();
    let stalled = find_condition(&st.conditions, types::STALLED).unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "PreprocessFailed")
    );
    assert!(
        stalled.message.contains("quickstart-preprocess"),
        "{}",
        stalled.message
    );
    // Training never started.
    env.idle(Duration::from_millis(200), STEP).await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
}

#[tokio::test]
async fn failed_vertex_job_is_retried_then_succeeds() {
    let env = started().await;
    env.create(&vertex_only("retry")).await;
    let first = env
        .until("the first job", Duration::from_secs(1), async || {
            let job = env.gcp.custom_jobs().into_iter().next();
            job.map(|j| j["name"].as_str().unwrap().to_string())
        })
        .await;
    env.gcp
        .inject(Fault::FailJob {
            name: first.clone(),
            message: Some("XLA out of memory".into()),
        })
        .unwrap();
    let tp = wait_phase(&env, "retry", Phase::Succeeded).await;
    let st = tp.status.clone().unwrap();
    assert_eq!(st.attempts, 2);
    assert_eq!(train_attempts(&tp), 2);
    assert_ne!(st.custom_job_name.as_deref(), Some(first.as_str()));
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    assert_eq!(env.gcp.custom_jobs().len(), 2);
}

#[tokio::test]
async fn delete_mid_training_cancels_and_deletes_everything() {
    let env = started().await;
    env.create(&quickstart()).await;
    // The clock stands still from the job's run until its cancel: a job that ended first is
    // deleted without one.
    crate::vertex_training::training(&env, "quickstart").await;
    env.api::<TrainingPipeline>()
        .delete("quickstart", &DeleteParams::default())
        .await
        .unwrap();
    env.until("the running job's cancel", Duration::ZERO, async || {
        env.gcp.call_count("vertex", "customJobs.cancel") >= 1
    })
    .await;
    env.wait_gone::<TrainingPipeline>("quickstart", STEP).await;
    env.wait_gone::<PreprocessBatch>("quickstart-preprocess", STEP)
        .await;
    assert!(env.gcp.call_count("vertex", "customJobs.cancel") >= 1);
    assert!(env.gcp.custom_jobs().is_empty(), "{:?}", env.gcp.custom_jobs());
    // The batch's own finalizer deletes its record once it is gone from Kubernetes.
    env.until("the batch's record deleted", STEP, async || {
        let batches = env.gcp.batches();
        if batches.is_empty() { Ok(()) } else { Err(batches) }
    })
    .await;
    assert!(env.gcp.nodes().is_empty());
    assert!(env.gcp.queued_resources().is_empty());
}

#[tokio::test]
async fn crash_between_vertex_create_and_status_write_runs_one_job() {
    let env = TestEnv::start().await;
    // The pipeline exists; a previous operator process created attempt 1's job and died before
    // writing its name to the status.
    let tp = env.create(&vertex_only("crash")).await;
    let id = ObjectIdentity::new(&env.ns, "crash", tp.uid().unwrap());
    // As the operator builds it: from the spec with its artifact placeholders expanded.
    let expanded = training_pipeline::expanded(&tp, &id);
    let ckpt = training_pipeline::checkpoints::base_dir(&expanded.spec.artifacts);
    let job = spec::custom_job(&expanded.spec, &id, "test-cluster", 1, &ckpt).unwrap();
    env.ctx
        .gcp
        .vertex
        .create_custom_job("projects/demo-project/locations/us-east5", job)
        .await
        .unwrap();

    let mut env = env;
    let ctx = Arc::new(env.context().await);
    spawn_all(&mut env, &ctx);
    let tp = wait_phase(&env, "crash", Phase::Succeeded).await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 1);
    assert_eq!(env.gcp.custom_jobs().len(), 1);
    assert_eq!(tp.status.unwrap().attempts, 1);
}

#[tokio::test]
async fn tpu_vm_training_succeeds_releases_the_slice_and_ttl_keeps_the_cr() {
    let env = started().await;
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.ttl_seconds_after_finished = Some(600);
    env.create(&tp).await;
    let done = wait_phase(&env, "tpu-vm-pipeline", Phase::Succeeded).await;
    assert_eq!(
        done.status
            .as_ref()
            .unwrap()
            .outputs
            .as_ref()
            .unwrap()
            .model_uri
            .as_deref(),
        Some("gs://demo-project-tpu-data/models/tpu-vm-run-1/")
    );
    assert!(env.gcp.object(BUCKET, "models/tpu-vm-run-1/_SUCCESS").is_some());
    let reaped = env
        .wait_for::<TrainingPipeline, _>("tpu-vm-pipeline", "reaped", STEP, |tp| {
            tp.status.as_ref().is_some_and(|s| s.reaped_time.is_some())
        })
        .await;
    env.wait_gone::<TpuSlice>("tpu-vm-pipeline-train", STEP).await;
    env.until("the node and its queued resource deleted", STEP, async || {
        let (nodes, queued) = (env.gcp.nodes(), env.gcp.queued_resources());
        if nodes.is_empty() && queued.is_empty() {
            Ok(())
        } else {
            Err((nodes, queued))
        }
    })
    .await;
    let st = reaped.status.clone().unwrap();
    assert_eq!(st.phase, Phase::Succeeded, "{}", message(&reaped));
    let ready = find_condition(&st.conditions, types::READY).unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Reaped"));
}

#[tokio::test]
async fn spot_preemption_during_tpu_vm_training_recreates_the_slice_without_a_retry() {
    let env = started().await;
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    env.create(&tp).await;
    tpu_vm_training(&env, "tpu-vm-pipeline").await;
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp.inject(Fault::PreemptNode { name: node.clone() }).unwrap();
    let done = wait_phase(&env, "tpu-vm-pipeline", Phase::Succeeded).await;
    let slice_recreations =
        env.gcp.call_count("tpu", "nodes.create") + env.gcp.call_count("tpu", "queuedResources.create");
    assert!(slice_recreations >= 2, "{:?}", env.gcp.call_counts());
    // The preemption used no retry: one counted attempt, one slice object.
    assert_eq!(train_attempts(&done), 1, "{}", message(&done));
    assert_eq!(done.status.as_ref().unwrap().attempts, 1);
}

/// Only the pipeline's controller, with its metrics in the returned registry: every count under
/// its kind is its own.
async fn metered_pipeline_controller() -> (TestEnv, Registry) {
    let mut env = TestEnv::start().await;
    let mut registry = Registry::default();
    let metrics = Metrics::default().register(&mut registry);
    let ctx = Arc::new(env.context().await.with_metrics(metrics));
    env.spawn(training_pipeline::run(ctx, never_shutdown()));
    (env, registry)
}

/// A pipeline's reconciles are counted and timed under its own kind, like the other kinds'
/// (`tpu_operator_reconciles_total`, `tpu_operator_reconcile_duration_seconds`): issue 22 found
/// them missing.
#[tokio::test]
async fn reconciles_are_counted_in_the_metrics() {
    let (env, registry) = metered_pipeline_controller().await;
    env.create(&vertex_only("counted")).await;
    env.wait_for::<TrainingPipeline, _>("counted", "a status", STEP, |tp| tp.status.is_some())
        .await;

    let sample = |text: &str, series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    env.until(
        "TrainingPipeline reconciles counted and timed",
        Duration::ZERO,
        async || {
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            let counted = sample(&text, "tpu_operator_reconciles_total{kind=\"TrainingPipeline\"}");
            let timed = sample(
                &text,
                "tpu_operator_reconcile_duration_seconds_count{kind=\"TrainingPipeline\"}",
            );
            if counted >= 1 && timed >= 1 {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
}

/// A Vertex job's create writes two statuses in one pass: the write-ahead marker, then the job's
/// name. The second is conditional on the marker's version, not on the version the pass read
/// (which the marker replaced): no 409, no failed reconcile, one create.
#[tokio::test]
async fn a_job_create_writes_its_marker_and_its_name_without_a_conflict() {
    let (env, registry) = metered_pipeline_controller().await;
    env.create(&vertex_only("marked")).await;
    let tp = env
        .wait_for::<TrainingPipeline, _>("marked", "the job's name in status", STEP, |tp| {
            tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some())
        })
        .await;
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tpu_operator_reconcile_failures_total{"))
        .collect();
    assert!(failures.is_empty(), "failed reconciles: {failures:?}");
    assert_eq!(
        env.gcp.call_count("vertex", "customJobs.create"),
        1,
        "status: {:?}",
        tp.status
    );
}

/// Counts the writes to `name` from now on: each is a new `resourceVersion`, seen as a watch
/// event of that object.
async fn count_writes<K: test_kit::NamespacedObject + 'static>(
    env: &TestEnv,
    name: &str,
) -> Arc<AtomicUsize> {
    let api = env.api::<K>();
    let rv = api.get(name).await.unwrap().resource_version().unwrap();
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let stream = api.watch(&params, &rv).await.expect("watch");
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            if matches!(event, WatchEvent::Modified(_)) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    count
}

/// Most writes an idle object may see in the counting window (its first status write excluded):
/// a poll's timestamp, a condition's refresh, never a write per pass.
const IDLE_WRITES: usize = 2;

async fn patch_spec(env: &TestEnv, name: &str, spec: serde_json::Value) {
    env.api::<TrainingPipeline>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

async fn first_job_of(env: &TestEnv, uid: &str, attempt: &str) -> String {
    let what = format!("attempt {attempt}'s job");
    env.until(&what, Duration::from_secs(1), async || {
        let found = env.gcp.custom_jobs().into_iter().find(|j| {
            j["labels"]["tpu-operator-uid"] == uid && j["labels"]["tpu-operator-attempt"] == attempt
        });
        found.map(|j| j["name"].as_str().unwrap().to_string())
    })
    .await
}

async fn fail_job(env: &TestEnv, name: String) {
    env.gcp
        .inject(Fault::FailJob {
            name,
            message: Some("XLA out of memory".into()),
        })
        .unwrap();
}

/// Issue 35 items 1 and 2: a pipeline created suspended, and one suspended while preprocessing,
/// write their status once and then not again (before the fix: ~110 writes a second,
/// `status.attempts` climbing), count no attempt, and resumed, still have their retry. The one
/// suspended mid-preprocessing has its Dataproc batch stopped.
#[tokio::test]
async fn suspended_pipeline_writes_no_status_loop_and_keeps_its_attempts() {
    let env = started().await;
    let mut created = vertex_only("created-suspended");
    created.spec.suspend = true;
    created.spec.max_retries = 1;
    env.create(&created).await;
    let mut between = quickstart();
    between.metadata.name = Some("between".into());
    env.create(&between).await;
    // The clock stands still from here until the suspension has stopped preprocessing: the
    // batch succeeds 3 minutes after it is created, and a clock moving on while a busy machine
    // ran the passes late could let it finish first.
    wait_phase_at(&env, "between", Phase::Preprocessing, Duration::ZERO).await;
    patch_spec(&env, "between", json!({"suspend": true})).await;
    let stopped = "preprocessing stopped";
    env.wait_for::<TrainingPipeline, _>("between", stopped, Duration::ZERO, |tp| {
        let st = tp.status.as_ref();
        phase(tp) == Phase::Suspended
            && st.is_some_and(|s| {
                s.stages.iter().any(|g| {
                    g.name == StageName::Preprocess
                        && g.state == tpu_operator_api::training_pipeline::StageState::Cancelled
                })
            })
    })
    .await;
    env.wait_gone::<PreprocessBatch>("between-preprocess", STEP).await;
    let running: Vec<_> = env
        .gcp
        .batches()
        .into_iter()
        .filter(|b| matches!(b["state"].as_str(), Some("PENDING" | "RUNNING")))
        .collect();
    assert!(running.is_empty(), "suspend left a batch running: {running:?}");
    wait_phase(&env, "created-suspended", Phase::Suspended).await;
    // Settle: passes enough for both to have seen all of the above, however late they ran.
    env.idle_passes("TrainingPipeline", Duration::ZERO, Duration::ZERO, 4)
        .await;
    let counts = [
        (
            "created-suspended",
            count_writes::<TrainingPipeline>(&env, "created-suspended").await,
        ),
        ("between", count_writes::<TrainingPipeline>(&env, "between").await),
    ];
    env.idle_passes("TrainingPipeline", Duration::from_secs(30 * 60), STEP, 6)
        .await;
    for (name, count) in &counts {
        let tp = env.api::<TrainingPipeline>().get(name).await.unwrap();
        let writes = count.load(Ordering::SeqCst);
        assert!(
            writes <= IDLE_WRITES,
            "{name}: {writes} status writes in 30 min of cloud time and 6 passes while suspended; status: {:#?}",
            tp.status
        );
        assert_eq!(phase(&tp), Phase::Suspended, "{name}: {}", message(&tp));
        assert_eq!(tp.status.as_ref().unwrap().attempts, 0, "{name}");
        assert_eq!(train_attempts(&tp), 0, "{name}");
    }
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);

    // Resumed: the first failure is retried (maxRetries 1 was not spent while suspended).
    patch_spec(&env, "created-suspended", json!({"suspend": false})).await;
    let uid = env
        .api::<TrainingPipeline>()
        .get("created-suspended")
        .await
        .unwrap()
        .uid()
        .unwrap();
    let first = first_job_of(&env, &uid, "1").await;
    fail_job(&env, first).await;
    let done = wait_phase(&env, "created-suspended", Phase::Succeeded).await;
    assert_eq!(done.status.as_ref().unwrap().attempts, 2, "{}", message(&done));
    assert_eq!(train_attempts(&done), 2);
}

/// No kind writes the status of an object that waits, over a few seconds of fast polls: a
/// TpuSlice waiting for capacity, a Ready one, a PreprocessBatch waiting for its input, a
/// suspended and a failed TrainingPipeline.
#[tokio::test]
async fn idle_objects_of_every_kind_write_no_status_loop() {
    let env = started().await;
    let zone = "us-east5-b";
    env.gcp
        .inject(Fault::Stockout {
            zone: zone.into(),
            accelerator: "v6e-4".into(),
        })
        .unwrap();
    let slice = |name: &str, accelerator: &str| -> TpuSlice {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "TpuSlice",
            "metadata": {"name": name},
            "spec": {
                "zone": zone,
                "acceleratorType": accelerator,
                "runtimeVersion": "v2-alpha-tpuv6e",
                "capacity": {"onDemand": {}},
                "workload": {"image": "us-docker.pkg.dev/demo-project/r/trainer:1", "args": ["--steps=10"]}
            }
        }))
        .unwrap()
    };
    env.create(&slice("waiting", "v6e-4")).await;
    env.create(&slice("ready", "v6e-8")).await;
    let batch: PreprocessBatch =
        test_kit::from_yaml(include_str!("../../../../examples/preprocess-batch.yaml"));
    env.create(&batch).await;
    let mut suspended = vertex_only("suspended");
    suspended.spec.suspend = true;
    env.create(&suspended).await;
    let mut failed = vertex_only("failed");
    failed.spec.max_retries = 0;
    let failed = env.create(&failed).await;

    let reason = |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], t: &str| {
        find_condition(conditions, t)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.clone())
    };
    env.wait_for::<TpuSlice, _>("waiting", "WaitingForCapacity", STEP, |s| {
        s.status
            .as_ref()
            .and_then(|st| reason(&st.conditions, types::RECONCILING))
            .as_deref()
            == Some("WaitingForCapacity")
    })
    .await;
    env.wait_for::<TpuSlice, _>("ready", "Ready", STEP, |s| {
        s.status
            .as_ref()
            .and_then(|st| reason(&st.conditions, types::READY))
            .is_some()
    })
    .await;
    // Its declared input does not exist: it waits for the upload.
    env.wait_for::<PreprocessBatch, _>("tokenize-corpus", "waiting for its input", STEP, |b| {
        b.status
            .as_ref()
            .is_some_and(|st| st.conditions.iter().any(|c| c.reason == "NotFound"))
    })
    .await;
    wait_phase(&env, "suspended", Phase::Suspended).await;
    let job = first_job_of(&env, &failed.uid().unwrap(), "1").await;
    fail_job(&env, job).await;
    wait_phase(&env, "failed", Phase::Failed).await;
    env.idle(Duration::from_millis(300), Duration::from_secs(1)).await;

    let counts = [
        (
            "TpuSlice waiting",
            count_writes::<TpuSlice>(&env, "waiting").await,
        ),
        ("TpuSlice ready", count_writes::<TpuSlice>(&env, "ready").await),
        (
            "PreprocessBatch",
            count_writes::<PreprocessBatch>(&env, "tokenize-corpus").await,
        ),
        (
            "TrainingPipeline suspended",
            count_writes::<TrainingPipeline>(&env, "suspended").await,
        ),
        (
            "TrainingPipeline failed",
            count_writes::<TrainingPipeline>(&env, "failed").await,
        ),
    ];
    // Three seconds of real time, the cloud clock moving at the same pace (a Ready slice's cost
    // checkpoint, written every ~90 s of cloud time, is not a loop).
    env.idle(Duration::from_secs(3), Duration::from_millis(10)).await;
    let seen: Vec<(&str, usize)> = counts
        .iter()
        .map(|(what, c)| (*what, c.load(Ordering::SeqCst)))
        .collect();
    assert!(
        seen.iter().all(|(_, n)| *n <= IDLE_WRITES),
        "status writes of idle objects in 3 s: {seen:?}"
    );
}

/// Issue 35 item 3: raising `maxRetries` on a pipeline Failed for RetriesExhausted resumes it:
/// one new attempt, with the same `CHECKPOINT_DIR` (default `checkpointsOnRetry: Resume`).
#[tokio::test]
async fn raising_max_retries_resumes_a_failed_pipeline() {
    let env = started().await;
    let mut tp = vertex_only("raise");
    tp.spec.max_retries = 0;
    let tp = env.create(&tp).await;
    let uid = tp.uid().unwrap();
    let first = first_job_of(&env, &uid, "1").await;
    fail_job(&env, first).await;
    let failed = wait_phase(&env, "raise", Phase::Failed).await;
    assert!(message(&failed).contains("maxRetries 0"), "{}", message(&failed));
    patch_spec(&env, "raise", json!({"maxRetries": 1})).await;
    let done = wait_phase(&env, "raise", Phase::Succeeded).await;
    let st = done.status.clone().unwrap();
    assert_eq!((st.attempts, train_attempts(&done)), (2, 2), "{}", message(&done));
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    let ckpt = |attempt: &str| {
        let job = env
            .gcp
            .custom_jobs()
            .into_iter()
            .find(|j| j["labels"]["tpu-operator-attempt"] == attempt)
            .unwrap();
        job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "CHECKPOINT_DIR")
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        ckpt("2"),
        ckpt("1"),
        "the resumed attempt reads the same checkpoints"
    );
    assert!(ckpt("2").is_some());
}

/// Issue 35 item 3: a new `tpu-operator.dev/rerun` value starts one new run of a Succeeded
/// pipeline without re-running its preprocessing; the same value later starts nothing more.
#[tokio::test]
async fn rerun_annotation_starts_one_new_run_of_a_finished_pipeline() {
    let env = started().await;
    env.create(&quickstart()).await;
    wait_phase(&env, "quickstart", Phase::Succeeded).await;
    let annotate = |value: &'static str| {
        let api = env.api::<TrainingPipeline>();
        async move {
            let patch = json!({"metadata": {"annotations": {RERUN_ANNOTATION: value}}});
            api.patch("quickstart", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    };
    annotate("1").await;
    let rerun_done = |value: &'static str| {
        move |tp: &TrainingPipeline| {
            phase(tp) == Phase::Succeeded
                && tp
                    .status
                    .as_ref()
                    .and_then(|s| s.rerun.as_ref())
                    .is_some_and(|r| r.value == value)
        }
    };
    let done = env
        .wait_for::<TrainingPipeline, _>("quickstart", "the re-run succeeded", STEP, rerun_done("1"))
        .await;
    let st = done.status.clone().unwrap();
    assert_eq!(st.attempts, 2, "{}", message(&done));
    assert_eq!(st.rerun.as_ref().unwrap().earlier_attempts, 1);
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    assert_eq!(
        env.gcp.call_count("dataproc", "batches.create"),
        1,
        "preprocessing output is still there: not run again"
    );
    // The value acted on starts nothing more, even after another object change.
    annotate("1").await;
    env.idle(Duration::from_secs(1), STEP).await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    annotate("2").await;
    env.wait_for::<TrainingPipeline, _>("quickstart", "the second re-run", STEP, rerun_done("2"))
        .await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 3);
}

/// Issue 35 item 4: a re-run whose Vertex job writes nothing must not succeed on the model the
/// earlier run left under `modelDir` (before the fix: Succeeded, "model written to ...").
#[tokio::test]
async fn a_rerun_whose_job_writes_no_model_does_not_succeed_on_the_old_one() {
    let env = started().await;
    let tp = env.create(&vertex_only("stale")).await;
    let uid = tp.uid().unwrap();
    wait_phase(&env, "stale", Phase::Succeeded).await;
    // The re-run is asked for after the run ended: outputs are judged to the second, and the
    // emulated clock may not have moved since the model was written.
    env.idle(Duration::from_millis(100), Duration::from_secs(5)).await;
    let patch = json!({"metadata": {"annotations": {RERUN_ANNOTATION: "1"}}});
    env.api::<TrainingPipeline>()
        .patch("stale", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let second = first_job_of(&env, &uid, "2").await;
    env.gcp
        .inject(Fault::SuppressOutput { name: second.clone() })
        .unwrap();
    let judged = env
        .wait_for::<TrainingPipeline, _>("stale", "the re-run judged", STEP, |tp| {
            let st = tp.status.as_ref();
            st.and_then(|s| s.rerun.as_ref()).is_some_and(|r| r.value == "1")
                && matches!(phase(tp), Phase::Succeeded | Phase::Failed)
        })
        .await;
    assert_eq!(phase(&judged), Phase::Failed, "{}", message(&judged));
    assert!(
        message(&judged).contains(&format!("custom job {second} succeeded but wrote no model")),
        "{}",
        message(&judged)
    );
    // The earlier run's model is still there: it was not what this run wrote.
    let model = env.gcp.object(BUCKET, "models/stale/model/saved_model.pb");
    assert!(model.is_some(), "the first run's model stays in place");
}

/// Issue 35 item 4, TPU VM mode: the `_SUCCESS` an earlier run left under `modelDir` is older
/// than the re-run's attempt, so a re-run whose workload writes no marker keeps training instead
/// of succeeding on it.
#[tokio::test]
async fn a_tpu_vm_rerun_does_not_succeed_on_the_earlier_runs_marker() {
    let env = started().await;
    let tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    env.create(&tp).await;
    let name = "tpu-vm-pipeline";
    wait_phase(&env, name, Phase::Succeeded).await;
    assert!(env.gcp.object(BUCKET, "models/tpu-vm-run-1/_SUCCESS").is_some());
    // As above: the re-run comes after the marker, not in the same second of the emulated clock.
    env.idle(Duration::from_millis(100), Duration::from_secs(5)).await;
    let rerun = env.gcp.clock().now();
    let patch = json!({"metadata": {"annotations": {RERUN_ANNOTATION: "1"}}});
    env.api::<TrainingPipeline>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    // The re-run's slice: its node writes nothing when its workload ends. Its node is the one
    // created since the re-run: on a busy machine the first run's may still be READY, going.
    let node = env
        .until("the re-run's node READY", Duration::from_secs(1), async || {
            let created_since = |n: &serde_json::Value| {
                let at = n["createTime"].as_str().unwrap_or_default();
                chrono::DateTime::parse_from_rfc3339(at).is_ok_and(|at| at >= rerun)
            };
            let ready = env
                .gcp
                .nodes()
                .into_iter()
                .find(|n| n["state"] == "READY" && created_since(n));
            ready.map(|n| n["name"].as_str().unwrap().to_string())
        })
        .await;
    env.gcp.inject(Fault::SuppressOutput { name: node }).unwrap();
    // It trains (its slice's status may follow its node late on a busy machine) ...
    let training = env
        .wait_for::<TrainingPipeline, _>(name, "the re-run training or ended", STEP, |tp| {
            let rerun = tp.status.as_ref().and_then(|s| s.rerun.as_ref());
            rerun.is_some_and(|r| r.value == "1")
                && matches!(phase(tp), Phase::Training | Phase::Succeeded | Phase::Failed)
        })
        .await;
    assert_eq!(phase(&training), Phase::Training, "{}", message(&training));
    // ... and keeps training past twice its workload's run (10 min) of cloud time, over passes
    // that saw it all.
    env.idle_passes(
        "TrainingPipeline",
        Duration::from_secs(20 * 60),
        Duration::from_secs(30),
        3,
    )
    .await;
    let now = env.api::<TrainingPipeline>().get(name).await.unwrap();
    let st = now.status.clone().unwrap();
    assert_eq!(st.rerun.as_ref().map(|r| r.value.as_str()), Some("1"));
    assert_eq!(st.phase, Phase::Training, "{}", message(&now));
}

async fn job_state(env: &TestEnv, name: &str) -> String {
    env.gcp
        .custom_jobs()
        .into_iter()
        .find(|j| j["name"] == name)
        .map(|j| j["state"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Issue 35 item 2: suspending a training Vertex pipeline cancels its job (nothing bills while
/// suspended, the status says what was stopped and when, and it is not rewritten); resuming
/// creates a new job that spends no retry: with `maxRetries: 0` the run still succeeds.
#[tokio::test]
async fn suspending_a_vertex_run_cancels_its_job_and_resuming_spends_no_retry() {
    let env = started().await;
    env.create(&vertex_only("vx")).await;
    // The clock stands still from the job's run until the run is suspended: the job cannot end
    // before the suspension cancels it.
    let uid = crate::vertex_training::training(&env, "vx").await.uid().unwrap();
    let first = first_job_of(&env, &uid, "1").await;
    patch_spec(&env, "vx", json!({"suspend": true})).await;
    let suspended = wait_phase_at(&env, "vx", Phase::Suspended, Duration::ZERO).await;
    let what = format!("suspend to cancel job {first}");
    env.until(&what, STEP, async || {
        let state = job_state(&env, &first).await;
        if state == "JOB_STATE_CANCELLED" {
            Ok(())
        } else {
            Err(state)
        }
    })
    .await;
    let record = suspended.status.as_ref().unwrap().suspension.clone().unwrap();
    assert!(record.suspended_time.is_some(), "{record:?}");
    assert!(
        record.stopped.as_deref().unwrap_or_default().contains(&first),
        "{record:?}"
    );
    env.wait_for_event("vx", "Suspended", STEP).await;
    // Settled once the pass that saw the job end has written it (nothing accrues any more), then
    // counted over cloud time and passes, which a busy machine cannot shorten.
    env.wait_for::<TrainingPipeline, _>("vx", "no cost accruing", Duration::ZERO, |tp| {
        let cost = tp.status.as_ref().and_then(|s| s.estimated_cost.as_ref());
        cost.is_some_and(|c| c.per_hour_usd == 0.0)
    })
    .await;
    let writes = count_writes::<TrainingPipeline>(&env, "vx").await;
    env.idle_passes("TrainingPipeline", Duration::from_secs(30 * 60), STEP, 3)
        .await;
    assert!(
        writes.load(Ordering::SeqCst) <= IDLE_WRITES,
        "suspended status rewritten"
    );
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 1);

    patch_spec(&env, "vx", json!({"suspend": false})).await;
    let done = wait_phase(&env, "vx", Phase::Succeeded).await;
    let st = done.status.clone().unwrap();
    assert_eq!(st.attempts, 2, "{}", message(&done));
    assert_eq!(train_attempts(&done), 1, "resuming spent a retry");
    let record = st.suspension.unwrap();
    assert_eq!(record.resumes, 1);
    assert!(record.resumed_time.is_some());
    env.wait_for_event("vx", "Resumed", STEP).await;
}

/// Issue 35 item 2, TPU VM: suspending deletes the training slice and its node, even with
/// `deletionPolicy: Orphan` (meant for deleting the pipeline, not for a release: an orphaned
/// node of a suspended run would bill with no owner); resuming recreates it without a retry.
#[tokio::test]
async fn suspending_a_tpu_vm_run_deletes_its_node_and_resuming_spends_no_retry() {
    let env = started().await;
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    tp.spec.deletion_policy = tpu_operator_api::common::DeletionPolicy::Orphan;
    env.create(&tp).await;
    tpu_vm_training(&env, "tpu-vm-pipeline").await;
    assert_eq!(env.gcp.nodes().len(), 1);
    patch_spec(&env, "tpu-vm-pipeline", json!({"suspend": true})).await;
    // The clock stands still until the suspension is seen: the workload cannot end first.
    wait_phase_at(&env, "tpu-vm-pipeline", Phase::Suspended, Duration::ZERO).await;
    env.wait_gone::<TpuSlice>("tpu-vm-pipeline-train", STEP).await;
    env.until("suspend to delete the node", STEP, async || {
        let (nodes, queued) = (env.gcp.nodes(), env.gcp.queued_resources());
        if nodes.is_empty() && queued.is_empty() {
            Ok(())
        } else {
            Err((nodes, queued))
        }
    })
    .await;
    let suspended = env
        .wait_for::<TrainingPipeline, _>("tpu-vm-pipeline", "no cost accruing", STEP, |tp| {
            let cost = tp.status.as_ref().and_then(|s| s.estimated_cost.as_ref());
            cost.is_some_and(|c| c.per_hour_usd == 0.0 && c.per_hour_usd.is_sign_positive())
        })
        .await;
    assert_eq!(phase(&suspended), Phase::Suspended, "{}", message(&suspended));

    patch_spec(&env, "tpu-vm-pipeline", json!({"suspend": false})).await;
    let done = wait_phase(&env, "tpu-vm-pipeline", Phase::Succeeded).await;
    assert_eq!(
        train_attempts(&done),
        1,
        "resuming spent a retry: {}",
        message(&done)
    );
    assert_eq!(done.status.as_ref().unwrap().attempts, 2);
}

/// Issue 35 item 6: a TPU VM run whose slice meets a stockout is `Waiting`, not `Provisioning`,
/// with one `WaitingForCapacity` Warning on the pipeline and a `WaitEnded` once it trains.
#[tokio::test]
async fn a_run_waiting_for_capacity_says_so_once_and_when_it_ends() {
    let env = started().await;
    env.gcp
        .inject(Fault::CapacityError {
            zone: "us-central2-b".into(),
            accelerator: "v4".into(),
            cause: gcp_emulator::CapacityCause::Stockout,
            shape: gcp_emulator::ErrorShape::Call,
            quota_metric: None,
        })
        .unwrap();
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    env.create(&tp).await;
    let waiting = wait_phase(&env, "tpu-vm-pipeline", Phase::Waiting).await;
    let ready = find_condition(&waiting.status.as_ref().unwrap().conditions, types::READY).unwrap();
    assert_eq!(
        ready.reason,
        "WaitingForCapacity",
        "the Reason column: {}",
        message(&waiting)
    );
    assert!(
        message(&waiting).contains("no TPU capacity"),
        "{}",
        message(&waiting)
    );
    env.wait_for_event("tpu-vm-pipeline", "WaitingForCapacity", STEP)
        .await;
    env.gcp
        .inject(Fault::LiftStockout {
            zone: "us-central2-b".into(),
            accelerator: "v4".into(),
        })
        .unwrap();
    wait_phase(&env, "tpu-vm-pipeline", Phase::Training).await;
    env.wait_for_event("tpu-vm-pipeline", "WaitEnded", STEP).await;
    let waits = env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("tpu-vm-pipeline"))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .count();
    assert_eq!(waits, 1, "one Warning for the wait");
}

fn fail_run_on_3_ignore_137() -> serde_json::Value {
    json!({"rules": [
        {"action": "FailRun", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}},
    ]})
}

/// Issue 35 item 8, Vertex: exit code 3 (a bad config) ends the run at once although retries
/// are left; exit code 137 is retried without spending `maxRetries`. The exit code is read from
/// the failed job's error message as Vertex words it.
#[tokio::test]
async fn retry_policy_fails_a_vertex_run_on_exit_3_and_retries_137_for_free() {
    let env = started().await;
    for name in ["bad-config", "flaky"] {
        let mut tp = vertex_only(name);
        tp.spec.max_retries = 2;
        tp.spec.retry_policy = Some(serde_json::from_value(fail_run_on_3_ignore_137()).unwrap());
        env.create(&tp).await;
    }
    for (name, code) in [("bad-config", 3), ("flaky", 137)] {
        let uid = env
            .api::<TrainingPipeline>()
            .get(name)
            .await
            .unwrap()
            .uid()
            .unwrap();
        let job = first_job_of(&env, &uid, "1").await;
        let message = format!(
            "The replica workerpool0-0 exited with a non-zero status of {code}. Termination reason: Error."
        );
        env.gcp
            .inject(Fault::FailJob {
                name: job,
                message: Some(message),
            })
            .unwrap();
    }
    let failed = wait_phase(&env, "bad-config", Phase::Failed).await;
    let stalled = find_condition(&failed.status.as_ref().unwrap().conditions, types::STALLED).unwrap();
    assert_eq!(stalled.reason, "FailedByRetryPolicy", "{}", stalled.message);
    assert!(stalled.message.contains("exit code 3"), "{}", stalled.message);
    assert_eq!(
        failed.status.as_ref().unwrap().attempts,
        1,
        "no retry after exit code 3"
    );

    let done = wait_phase(&env, "flaky", Phase::Succeeded).await;
    assert_eq!(done.status.as_ref().unwrap().attempts, 2, "{}", message(&done));
    assert_eq!(train_attempts(&done), 1, "the exit-137 retry spent maxRetries");
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 3);
}

/// Issue 35 item 8, TPU VM: the exit code in `_FAILED` decides: exit 3 ends the run and
/// releases the slice, no second slice is made.
#[tokio::test]
async fn retry_policy_fails_a_tpu_vm_run_on_exit_3_and_releases_its_slice() {
    let env = started().await;
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    tp.spec.max_retries = 2;
    tp.spec.retry_policy = Some(serde_json::from_value(fail_run_on_3_ignore_137()).unwrap());
    env.create(&tp).await;
    tpu_vm_training(&env, "tpu-vm-pipeline").await;
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp
        .inject(Fault::FailTpuWorkload {
            node,
            exit_code: Some(3),
            message: None,
        })
        .unwrap();
    let failed = wait_phase(&env, "tpu-vm-pipeline", Phase::Failed).await;
    let stalled = find_condition(&failed.status.as_ref().unwrap().conditions, types::STALLED).unwrap();
    assert_eq!(stalled.reason, "FailedByRetryPolicy", "{}", stalled.message);
    env.wait_gone::<TpuSlice>("tpu-vm-pipeline-train", STEP).await;
    let creates =
        env.gcp.call_count("tpu", "nodes.create") + env.gcp.call_count("tpu", "queuedResources.create");
    assert_eq!(creates, 1, "{:?}", env.gcp.call_counts());
}

/// Issue 35 item 9: a failed TPU VM run with `keepFailedSliceFor: 30m` keeps its slice (and
/// node) for that long, says so in status and an Event, and deletes it once the time is up.
#[tokio::test]
async fn a_failed_runs_slice_is_kept_for_debugging_then_deleted() {
    let env = started().await;
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    tp.spec.max_retries = 0;
    tp.spec.training.tpu_vm.as_mut().unwrap().keep_failed_slice_for = Some("30m".into());
    env.create(&tp).await;
    tpu_vm_training(&env, "tpu-vm-pipeline").await;
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp
        .inject(Fault::FailTpuWorkload {
            node: node.clone(),
            exit_code: Some(1),
            message: None,
        })
        .unwrap();
    let failed = wait_phase(&env, "tpu-vm-pipeline", Phase::Failed).await;
    let kept = failed
        .status
        .as_ref()
        .unwrap()
        .kept_slice
        .clone()
        .expect("status.keptSlice");
    assert_eq!(kept.name, "tpu-vm-pipeline-train");
    assert!(
        message(&failed).contains("kept for debugging until"),
        "{}",
        message(&failed)
    );
    env.wait_for_event("tpu-vm-pipeline", "SliceKept", STEP).await;
    // Ten minutes on (exactly: `idle` advances the clock per 10 ms of real time, so a loaded
    // machine would move it less and an idle one more), the node is still there to look at.
    env.gcp.clock().advance(Duration::from_secs(600));
    env.idle(Duration::from_millis(400), Duration::ZERO).await;
    assert!(
        env.gcp.nodes().iter().any(|n| n["name"] == node),
        "the kept node was deleted early"
    );
    assert!(
        env.api::<TpuSlice>()
            .get_opt("tpu-vm-pipeline-train")
            .await
            .unwrap()
            .is_some()
    );
    // Past the 30 minutes it goes.
    env.wait_gone::<TpuSlice>("tpu-vm-pipeline-train", Duration::from_secs(120))
        .await;
    env.until("the kept node deleted", STEP, async || {
        let nodes = env.gcp.nodes();
        if nodes.is_empty() { Ok(()) } else { Err(nodes) }
    })
    .await;
    let done = env
        .wait_for::<TrainingPipeline, _>("tpu-vm-pipeline", "keptSlice released", STEP, |tp| {
            let kept = tp.status.as_ref().and_then(|s| s.kept_slice.as_ref());
            kept.is_some_and(|k| k.released_time.is_some())
        })
        .await;
    assert_eq!(phase(&done), Phase::Failed);
}

/// The Console link format and the Logs Explorer link of every stage (issue 36 item 1):
/// `console.cloud.google.com/{path}?project={project}` and `logs/query;query={filter}`.
fn assert_links(links: Option<&Links>, console_path: &str, project: &str, in_query: &[&str]) {
    let links = links.expect("links");
    assert_eq!(
        links.console.as_deref(),
        Some(format!("https://console.cloud.google.com/{console_path}?project={project}").as_str())
    );
    let logs = links.logs.as_deref().expect("a logs link");
    let query = logs
        .strip_prefix("https://console.cloud.google.com/logs/query;query=")
        .and_then(|q| q.strip_suffix(&format!("?project={project}")))
        .unwrap_or_else(|| panic!("not a Logs Explorer link: {logs}"));
    let query = urlencoding::decode(query).unwrap();
    for term in in_query {
        assert!(query.contains(term), "{term} not in {query}");
    }
}

/// The `projects/{p}/locations/{l}/{collection}/{id}` parts of a cloud name.
fn name_parts(name: &str) -> (String, String, String) {
    let s: Vec<&str> = name.split('/').collect();
    (s[1].to_string(), s[3].to_string(), s[5].to_string())
}

/// Issue 36 item 1: the quickstart's status links its Dataproc batch and its Vertex job (each
/// stage, the PreprocessBatch child, and the top-level `links` for `-o wide`), in the formats
/// Google documents, from the moment the objects exist.
#[tokio::test]
async fn every_stage_links_its_console_page_and_its_logs() {
    let env = started().await;
    env.create(&quickstart()).await;
    let tp = wait_phase(&env, "quickstart", Phase::Succeeded).await;
    let st = tp.status.clone().unwrap();
    let stage = |n: StageName| st.stages.iter().find(|s| s.name == n).unwrap().clone();

    let pre = stage(StageName::Preprocess);
    let batch = pre
        .gcp_name
        .clone()
        .expect("the preprocess stage names its batch");
    let (p, region, id) = name_parts(&batch);
    assert_links(
        pre.links.as_ref(),
        &format!("dataproc/batches/{region}/{id}"),
        &p,
        &[
            "resource.type = \"cloud_dataproc_batch\"",
            &format!("resource.labels.batch_id = \"{id}\""),
        ],
    );
    let child = env
        .api::<PreprocessBatch>()
        .get("quickstart-preprocess")
        .await
        .unwrap();
    assert_eq!(
        child.status.unwrap().links,
        pre.links,
        "the child shows the same links"
    );

    let train = stage(StageName::Train);
    let job = st.custom_job_name.clone().unwrap();
    let (p, region, id) = name_parts(&job);
    assert_links(
        train.links.as_ref(),
        &format!("ai/platform/locations/{region}/training/{id}"),
        &p,
        &[
            "resource.type = \"ml_job\"",
            &format!("resource.labels.job_id = \"{id}\""),
        ],
    );
    assert_eq!(st.links, train.links, "the top-level links are the last stage's");
}

/// The TPU VM example without preprocessing or retries, created and training: the pipeline
/// then, and its node's full name (a failed workload ends the run).
async fn training_on_a_tpu_vm_without_retries(env: &TestEnv) -> (TrainingPipeline, String) {
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    tp.spec.max_retries = 0;
    env.create(&tp).await;
    let training = tpu_vm_training(env, "tpu-vm-pipeline").await;
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    (training, node)
}

/// Issue 36 items 1 and 3: a TPU VM run links its node and its workload's logs (the container
/// logs through docker's gcplogs driver, labelled with the slice), and when its container fails
/// the failure message and Event carry the container's last log lines, read from Cloud Logging.
#[tokio::test]
async fn a_failed_tpu_vm_runs_message_carries_its_last_log_lines() {
    let env = started().await;
    let (training, node) = training_on_a_tpu_vm_without_retries(&env).await;
    let (p, zone, id) = name_parts(&node);
    let slice = env
        .wait_for::<TpuSlice, _>("tpu-vm-pipeline-train", "links with the node", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.node_name.is_some() && st.links.is_some())
        })
        .await;
    let uid = slice.uid().unwrap();
    let slice_links = slice.status.as_ref().unwrap().links.clone();
    assert_links(
        slice_links.as_ref(),
        &format!("compute/tpus/details/{zone}/{id}"),
        &p,
        &[
            &format!("logName = \"projects/{p}/logs/gcplogs-docker-driver\""),
            &format!("jsonPayload.container.metadata.\"tpu-operator-slice\" = \"{uid}\""),
        ],
    );
    let tp = env
        .wait_for::<TrainingPipeline, _>("tpu-vm-pipeline", "the train stage's links", STEP, |tp| {
            tp.status.as_ref().is_some_and(|st| st.links.is_some())
        })
        .await;
    let st = tp.status.unwrap();
    let train = st.stages.iter().find(|s| s.name == StageName::Train).unwrap();
    assert_eq!(train.links, slice_links);
    assert_eq!(train.gcp_name.as_deref(), Some(node.as_str()));
    let _ = training;

    env.gcp
        .inject(Fault::FailTpuWorkload {
            node,
            exit_code: Some(1),
            message: None,
        })
        .unwrap();
    let failed = wait_phase(&env, "tpu-vm-pipeline", Phase::Failed).await;
    let msg = message(&failed);
    assert!(msg.contains("last log lines:"), "{msg}");
    assert!(
        msg.contains("\n  RuntimeError: simulated training failure (the container exits with code 1)"),
        "{msg}"
    );
    assert_eq!(
        msg.matches("Traceback").count(),
        1,
        "two hosts, one traceback shown: {msg}"
    );
    let events = env.wait_for_event("tpu-vm-pipeline", "Failed", STEP).await;
    assert!(
        events.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains("RuntimeError: simulated training failure"))),
        "{:?}",
        events.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
}

/// A tenant's training script chooses its last log line, and the failure message shows it to
/// whoever reads the pipeline's status and Events. A bidi override (Trojan Source) or a terminal
/// escape in it must not reach them: both become spaces, the visible text stays.
#[tokio::test]
async fn a_failed_runs_last_line_reaches_status_and_events_without_bidi_overrides_or_escapes() {
    let env = started().await;
    let (_, node) = training_on_a_tpu_vm_without_retries(&env).await;
    let hostile = "RuntimeError: exit 0 \u{202E}1 tixe\u{202C} \u{1b}[2Kdone\u{2066}";
    env.gcp
        .inject(Fault::FailTpuWorkload {
            node,
            exit_code: Some(1),
            message: Some(hostile.into()),
        })
        .unwrap();
    let failed = wait_phase(&env, "tpu-vm-pipeline", Phase::Failed).await;
    let clean = |text: &str| {
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n') || tpu_operator_api::text::is_invisible(c))
    };
    let msg = message(&failed);
    assert!(msg.contains("RuntimeError: exit 0  1 tixe   [2Kdone"), "{msg:?}");
    assert!(clean(&msg), "{msg:?}");
    let events = env.wait_for_event("tpu-vm-pipeline", "Failed", STEP).await;
    let notes: Vec<&str> = events.iter().filter_map(|e| e.note.as_deref()).collect();
    assert!(notes.iter().any(|n| n.contains("1 tixe")), "{notes:?}");
    assert!(notes.iter().all(|n| clean(n)), "{notes:?}");
}
