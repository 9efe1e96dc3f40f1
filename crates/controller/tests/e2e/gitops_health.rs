//! GitOps health judged by the real code: the controllers drive real objects into the states
//! Flux and Argo CD care about, each object is read back from the API server exactly as those
//! tools would see it, and `tests/gitops-judge` (Go) judges it with kstatus
//! (`sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute`, what Flux's `wait` / `healthChecks` use)
//! and with deploy/argocd/argocd-cm.yaml's Lua health scripts run in gopher-lua the way Argo CD
//! runs them. The table in `expected_health` is the one docs/gitops.md publishes.
//!
//! The judge is built by `tests/gitops-judge/build.sh` (cached outside the checkout). Without Go
//! this suite fails: it is the only check of the health rules users get, so it must not pass
//! silently where it did not run.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use gcp_emulator::{Code, Fault};
use kube::{
    Resource, ResourceExt,
    api::{DeleteParams, GetParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    naming::{self, ObjectIdentity},
    preprocess_batch::PreprocessBatch,
    tpu_slice::{TpuSlice, TpuSlicePhase},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_controller::{
    Context, FINALIZER,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

const STEP: Duration = Duration::from_secs(15);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the judge (a no-op when cached) and returns its path. Fails the test, never skips it,
/// when Go is missing or the build breaks.
fn judge_binary() -> PathBuf {
    let script = repo_root().join("tests/gitops-judge/build.sh");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}). The GitOps health suite judges statuses with kstatus and Argo CD's \
         gopher-lua, built from Go modules: install Go >= 1.26 (with access to the Go module \
         proxy) and run the tests again; see docs/testing.md, \"tests/gitops-judge\"",
        script.display(),
        out.status
    );
    let path = PathBuf::from(
        String::from_utf8(out.stdout)
            .expect("build.sh prints a path")
            .trim(),
    );
    eprintln!(
        "gitops-judge: {} ({:.1}s to build or find)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    path
}

/// One tool's answer.
#[derive(Debug, Clone, PartialEq)]
struct Verdict {
    status: String,
    message: String,
}

/// The judge's answer for one object: kstatus, what Argo CD shows, and the health script's own
/// answer (Argo CD overrides it for a deleting object; absent for a missing one).
#[derive(Debug)]
struct Judgement {
    kstatus: Verdict,
    argocd: Verdict,
    lua: Option<Verdict>,
    /// The Argo CD Notifications triggers of deploy/argocd/notifications-cm.yaml that fire for
    /// an application holding the object.
    notify: Vec<String>,
}

fn verdict(v: &Value) -> Verdict {
    assert!(v["error"].is_null(), "the judge reports an error: {v}");
    Verdict {
        status: v["status"].as_str().unwrap_or_default().to_owned(),
        message: v["message"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Judges `objects` (each an object as the API server returned it, or null for a missing one)
/// against the argocd-cm that users install.
fn judge(binary: &Path, objects: &[Value]) -> Vec<Judgement> {
    let cm = repo_root().join("deploy/argocd/argocd-cm.yaml");
    let notifications = repo_root().join("deploy/argocd/notifications-cm.yaml");
    let mut child = Command::new(binary)
        .arg("--argocd-cm")
        .arg(&cm)
        .arg("--notifications-cm")
        .arg(&notifications)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(objects).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "gitops-judge failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), objects.len(), "one judgement per object: {lines:#?}");
    lines
        .iter()
        .map(|j| Judgement {
            kstatus: verdict(&j["kstatus"]),
            argocd: verdict(&j["argocd"]),
            lua: (!j["lua"].is_null()).then(|| verdict(&j["lua"])),
            notify: j["notify"]
                .as_array()
                .map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
        })
        .collect()
}

/// The object exactly as the API server returns it (no round trip through our Rust types, which
/// could drop or default fields), or null when it does not exist.
async fn read_raw<K>(env: &TestEnv, name: &str) -> Value
where
    K: Resource<DynamicType = ()>,
{
    let request = kube::core::Request::new(K::url_path(&(), Some(&env.ns)))
        .get(name, &GetParams::default())
        .unwrap();
    match env.client.request::<Value>(request).await {
        Ok(obj) => obj,
        Err(kube::Error::Api(status)) if status.is_not_found() => Value::Null,
        Err(e) => panic!("read {name}: {e}"),
    }
}

fn slice(name: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": "us-east5-b",
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"onDemand": {}},
            "labels": {"team": "ml"}
        }
    }))
    .expect("TpuSlice fixture")
}

fn batch(name: &str) -> PreprocessBatch {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "PreprocessBatch",
        "metadata": {"name": name},
        "spec": {
            "region": "us-central1",
            "pyspark": {
                "mainPythonFileUri": "gs://demo-data/scripts/tokenize.py",
                "args": ["gs://demo-data/raw/", "gs://demo-data/tokenized/"]
            },
            "runtime": {"version": "2.2"},
            "outputUri": "gs://demo-data/tokenized/",
            "maxRetries": 0
        }
    }))
    .expect("PreprocessBatch fixture")
}

/// The quickstart without preprocessing: Vertex AI training only.
fn pipeline(name: &str, suspend: bool) -> TrainingPipeline {
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some(name.into());
    tp.spec.preprocess = None;
    tp.spec.suspend = suspend;
    tp
}

fn spawn_controllers(env: &mut TestEnv, ctx: &Arc<Context>) {
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
}

fn condition_true(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], t: &str) -> bool {
    find_condition(conditions, t).is_some_and(|c| c.status == "True")
}

/// `<reason>: <message>` of a condition in a raw object, the text the health script shows.
fn reason_and_message(obj: &Value, t: &str) -> String {
    let c = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} condition in {obj:#}"));
    format!(
        "{}: {}",
        c["reason"].as_str().unwrap(),
        c["message"].as_str().unwrap()
    )
}

/// One state the suite drives an object into, and what both tools must say about it.
struct Expected {
    state: &'static str,
    kind: &'static str,
    kstatus: &'static str,
    argocd: &'static str,
    /// Argo CD Notifications triggers that fire (docs/gitops.md, "Notifications").
    notify: &'static [&'static str],
}

/// The published table (docs/gitops.md, "Expected health per state").
const fn expected_health() -> [Expected; 11] {
    [
        Expected {
            state: "just applied, no status yet",
            kind: "TpuSlice",
            kstatus: "Current",
            argocd: "Progressing",
            notify: &[],
        },
        Expected {
            state: "Ready (node READY and healthy)",
            kind: "TpuSlice",
            kstatus: "Current",
            argocd: "Healthy",
            notify: &[],
        },
        Expected {
            state: "running (Reconciling=True, training)",
            kind: "TrainingPipeline",
            kstatus: "InProgress",
            argocd: "Progressing",
            notify: &[],
        },
        Expected {
            state: "succeeded (Ready=True)",
            kind: "TrainingPipeline",
            kstatus: "Current",
            argocd: "Healthy",
            notify: &["on-tpu-operator-succeeded"],
        },
        Expected {
            state: "suspended (spec.suspend)",
            kind: "TrainingPipeline",
            kstatus: "InProgress",
            argocd: "Suspended",
            notify: &[],
        },
        Expected {
            state: "Stalled (Dataproc batch FAILED, no retries left)",
            kind: "PreprocessBatch",
            kstatus: "Failed",
            argocd: "Degraded",
            notify: &["on-tpu-operator-failed"],
        },
        Expected {
            state: "spec changed, observedGeneration < generation",
            kind: "TpuSlice",
            kstatus: "InProgress",
            argocd: "Progressing",
            notify: &[],
        },
        Expected {
            state: "deleting (deletionTimestamp, finalizer, cloud delete running)",
            kind: "TpuSlice",
            kstatus: "Terminating",
            argocd: "Progressing",
            notify: &[],
        },
        Expected {
            state: "gone (deleted, still in Git)",
            kind: "TpuSlice",
            kstatus: "NotFound",
            argocd: "Missing",
            notify: &[],
        },
        Expected {
            state: "deletion stuck (cloud delete refused: Stalled, finalizer held)",
            kind: "TpuSlice",
            kstatus: "Terminating",
            argocd: "Progressing",
            notify: &[],
        },
        Expected {
            state: "progress stalled (TPU VM run, no checkpoint within progressDeadline)",
            kind: "TrainingPipeline",
            kstatus: "InProgress",
            argocd: "Degraded",
            notify: &["on-tpu-operator-progress-stalled"],
        },
    ]
}

#[tokio::test]
async fn kstatus_and_argocd_judge_the_statuses_the_controllers_write() {
    let started = Instant::now();
    // First, so a machine without Go fails before anything else runs.
    let judge_bin = judge_binary();
    let mut env = TestEnv::start().await;
    // The training job runs 30 minutes, not 5: the slice's wait before the pipeline's moves the
    // clock 15 s a poll, and a busy machine must still find the job running after it.
    let mut config = env.gcp.config();
    config.durations.job_run = Duration::from_secs(30 * 60);
    env.gcp.set_config(config);

    let just_applied = apply_before_any_controller_runs(&env).await;
    let ctx = env.ctx.clone();
    spawn_controllers(&mut env, &ctx);
    let ready = ready_slice(&env).await;
    let running = running_pipeline(&env).await;
    let stalled = stalled_batch(&env).await;
    let suspended = suspended_pipeline(&env).await;
    let succeeded = succeeded_pipeline(&env).await;
    let progress_stalled = progress_stalled_pipeline(&env).await;
    let stale = spec_changed_while_the_operator_is_stopped(&mut env).await;
    restart_and_catch_up(&mut env).await;
    let deleting = deleting_slice(&env).await;
    env.wait_gone::<TpuSlice>("health-slice", STEP).await;
    let gone = read_raw::<TpuSlice>(&env, "health-slice").await;
    assert!(gone.is_null());
    let stuck = deletion_stuck_on_a_refused_cloud_delete(&env).await;
    env.stop_all();
    env.gcp.clear_faults();

    let objects = [
        just_applied,
        ready,
        running,
        succeeded,
        suspended,
        stalled,
        stale,
        deleting,
        gone,
        stuck,
        progress_stalled,
    ];
    let judge_started = Instant::now();
    let verdicts = judge(&judge_bin, &objects);
    let judge_time = judge_started.elapsed();
    print_measured_table(&verdicts);
    verdicts_match_the_published_table(&verdicts, &objects);
    let (first_ten, _) = objects.split_at(10);
    argocd_and_kstatus_messages_say_why(&verdicts[..10], first_ten.try_into().unwrap());
    let stalled_progress = &verdicts[10].argocd.message;
    assert!(
        stalled_progress.starts_with("ProgressStalled: "),
        "Argo CD says why: {stalled_progress}"
    );

    eprintln!(
        "gitops health: judged {} objects in {:.2}s; whole test {:.1}s",
        objects.len(),
        judge_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// Creates every object before any controller runs; returns the slice as a GitOps tool sees it.
async fn apply_before_any_controller_runs(env: &TestEnv) -> Value {
    env.create(&slice("health-slice")).await;
    let just_applied = read_raw::<TpuSlice>(env, "health-slice").await;
    assert!(just_applied["status"].is_null(), "{just_applied:#}");

    env.create(&slice("health-stuck")).await;
    let created = env.create(&batch("health-stalled")).await;
    let id = ObjectIdentity::new(&env.ns, created.name_any(), created.uid().unwrap());
    env.gcp
        .inject(Fault::FailBatch {
            name: naming::dataproc_batch_id(&id, 1),
            message: Some("Job failed with exit code 137".into()),
        })
        .unwrap();
    env.create(&pipeline("health-train", false)).await;
    env.create(&pipeline("health-suspended", true)).await;
    just_applied
}

/// The slice once Ready (node READY and healthy).
async fn ready_slice(env: &TestEnv) -> Value {
    let s = env
        .wait_for::<TpuSlice, _>("health-slice", "Ready", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| condition_true(&st.conditions, types::READY))
        })
        .await;
    assert_eq!(s.status.unwrap().phase, TpuSlicePhase::Ready);
    read_raw::<TpuSlice>(env, "health-slice").await
}

/// The pipeline while it trains (Reconciling=True).
async fn running_pipeline(env: &TestEnv) -> Value {
    env.wait_for::<TrainingPipeline, _>("health-train", "training", STEP, |tp| {
        tp.status.as_ref().is_some_and(|st| {
            st.phase == TrainingPipelinePhase::Training && condition_true(&st.conditions, types::RECONCILING)
        })
    })
    .await;
    read_raw::<TrainingPipeline>(env, "health-train").await
}

/// The batch once Stalled (its Dataproc batch FAILED, no retries left).
async fn stalled_batch(env: &TestEnv) -> Value {
    env.wait_for::<PreprocessBatch, _>("health-stalled", "Stalled", STEP, |b| {
        b.status
            .as_ref()
            .is_some_and(|st| condition_true(&st.conditions, types::STALLED))
    })
    .await;
    read_raw::<PreprocessBatch>(env, "health-stalled").await
}

/// The pipeline created with `spec.suspend`, once Suspended.
async fn suspended_pipeline(env: &TestEnv) -> Value {
    env.wait_for::<TrainingPipeline, _>("health-suspended", "Suspended", STEP, |tp| {
        tp.status
            .as_ref()
            .is_some_and(|st| st.phase == TrainingPipelinePhase::Suspended)
    })
    .await;
    read_raw::<TrainingPipeline>(env, "health-suspended").await
}

/// The training pipeline once Succeeded (Ready=True).
async fn succeeded_pipeline(env: &TestEnv) -> Value {
    env.wait_for::<TrainingPipeline, _>("health-train", "Succeeded", STEP, |tp| {
        tp.status.as_ref().is_some_and(|st| {
            st.phase == TrainingPipelinePhase::Succeeded && condition_true(&st.conditions, types::READY)
        })
    })
    .await;
    read_raw::<TrainingPipeline>(env, "health-train").await
}

/// A TPU VM pipeline whose workload writes no checkpoint within its `progressDeadline` (the
/// emulated workload runs six hours and never checkpoints), once ProgressStalled=True.
async fn progress_stalled_pipeline(env: &TestEnv) -> Value {
    let mut config = env.gcp.config();
    config.durations.tpu_workload = Duration::from_secs(6 * 3600);
    config.durations.workload_checkpoint = Duration::ZERO;
    env.gcp.set_config(config);
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.metadata.name = Some("health-stuck".into());
    tp.spec.preprocess = None;
    tp.spec.training.progress_deadline = Some("20m".into());
    env.create(&tp).await;
    env.wait_for::<TrainingPipeline, _>("health-stuck", "ProgressStalled=True", STEP, |tp| {
        tp.status
            .as_ref()
            .is_some_and(|st| condition_true(&st.conditions, "ProgressStalled"))
    })
    .await;
    read_raw::<TrainingPipeline>(env, "health-stuck").await
}

/// Flux's own API types accept the shipped Flux manifests (an unknown or misplaced field fails).
#[test]
fn the_flux_manifests_are_valid_flux_objects() {
    let judge = judge_binary();
    for file in [
        "deploy/flux/kustomizations.yaml",
        "deploy/flux/notifications.yaml",
    ] {
        let out = Command::new(&judge)
            .arg("--flux")
            .arg(repo_root().join(file))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The slice after a spec change the stopped controllers cannot have seen (generation 2, observed 1).
async fn spec_changed_while_the_operator_is_stopped(env: &mut TestEnv) -> Value {
    // The controllers are stopped (as in a rollout of the operator) when the change is applied,
    // so the object is read with generation 2 and observedGeneration 1, deterministically.
    env.stop_all();
    tokio::time::sleep(Duration::from_millis(200)).await;
    env.api::<TpuSlice>()
        .patch(
            "health-slice",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"labels": {"team": "research"}}})),
        )
        .await
        .unwrap();
    let stale = read_raw::<TpuSlice>(env, "health-slice").await;
    assert_eq!(stale["metadata"]["generation"], 2, "{stale:#}");
    assert_eq!(stale["status"]["observedGeneration"], 1, "{stale:#}");
    stale
}

/// The operator is back (a fresh context) and catches up with generation 2.
async fn restart_and_catch_up(env: &mut TestEnv) {
    let ctx = Arc::new(env.context().await);
    spawn_controllers(env, &ctx);
    env.wait_for::<TpuSlice, _>("health-slice", "observed generation 2", STEP, |s| {
        s.status.as_ref().is_some_and(|st| {
            st.observed_generation == Some(2) && condition_true(&st.conditions, types::READY)
        })
    })
    .await;
}

/// The slice while it is deleted: deletionTimestamp, finalizer, the node's cloud delete running.
async fn deleting_slice(env: &TestEnv) -> Value {
    // The clock stands still (step zero) while we wait for the controller's Deleting status, so
    // the node's 60 s cloud delete cannot finish and the finalizer must still be there when it is
    // read.
    env.api::<TpuSlice>()
        .delete("health-slice", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_for::<TpuSlice, _>("health-slice", "Deleting", Duration::ZERO, |s| {
        s.status
            .as_ref()
            .is_some_and(|st| st.phase == TpuSlicePhase::Deleting)
    })
    .await;
    let deleting = read_raw::<TpuSlice>(env, "health-slice").await;
    assert!(
        deleting["metadata"]["deletionTimestamp"].is_string(),
        "{deleting:#}"
    );
    assert!(
        deleting["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER)),
        "{deleting:#}"
    );
    let node = deleting["status"]["nodeName"].clone();
    assert!(
        env.gcp.nodes().iter().any(|n| n["name"] == node),
        "the cloud delete is still running: {node} in {:#?}",
        env.gcp.nodes()
    );
    deleting
}

/// A deletion that cannot finish: the cloud refuses the node delete, Stalled, the finalizer held.
async fn deletion_stuck_on_a_refused_cloud_delete(env: &TestEnv) -> Value {
    // The controller reports Stalled (PermissionDenied) while the finalizer holds the object.
    env.wait_for::<TpuSlice, _>("health-stuck", "Ready", STEP, |s| {
        s.status
            .as_ref()
            .is_some_and(|st| condition_true(&st.conditions, types::READY))
    })
    .await;
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.delete".into(),
            count: 1_000_000,
            code: Code::PermissionDenied,
            message: None,
        })
        .unwrap();
    env.api::<TpuSlice>()
        .delete("health-stuck", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_for::<TpuSlice, _>("health-stuck", "Stalled while deleting", STEP, |s| {
        s.status.as_ref().is_some_and(|st| {
            st.phase == TpuSlicePhase::Deleting && condition_true(&st.conditions, types::STALLED)
        })
    })
    .await;
    read_raw::<TpuSlice>(env, "health-stuck").await
}

/// Prints the measured table, for docs/gitops.md.
fn print_measured_table(verdicts: &[Judgement]) {
    eprintln!("| state | kind | kstatus | Argo CD | Argo CD message | health.lua alone | notifications |");
    eprintln!("|---|---|---|---|---|---|---|");
    for (e, v) in expected_health().iter().zip(verdicts) {
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            e.state,
            e.kind,
            v.kstatus.status,
            v.argocd.status,
            v.argocd.message,
            v.lua.as_ref().map_or("-", |l| l.status.as_str()),
            v.notify.join(", ")
        );
    }
}

/// Every object is of the table's kind, and both tools' statuses are the table's.
fn verdicts_match_the_published_table(verdicts: &[Judgement], objects: &[Value]) {
    let mut wrong = Vec::new();
    for ((e, v), obj) in expected_health().iter().zip(verdicts).zip(objects) {
        if !obj.is_null() {
            assert_eq!(obj["kind"], e.kind, "{}", e.state);
        }
        if (v.kstatus.status.as_str(), v.argocd.status.as_str()) != (e.kstatus, e.argocd) {
            wrong.push(format!(
                "{} ({}): want kstatus {} / Argo CD {}, got {:?} / {:?}",
                e.state, e.kind, e.kstatus, e.argocd, v.kstatus, v.argocd
            ));
        }
        if v.notify != e.notify {
            wrong.push(format!(
                "{} ({}): want notifications {:?}, got {:?}",
                e.state, e.kind, e.notify, v.notify
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "verdicts differ from the table:\n{}",
        wrong.join("\n")
    );
}

/// The messages the tools show say why, in the conditions' own words.
fn argocd_and_kstatus_messages_say_why(verdicts: &[Judgement], objects: &[Value; 10]) {
    let [
        just_applied,
        ready,
        running,
        succeeded,
        suspended,
        stalled,
        stale,
        deleting,
        _gone,
        stuck,
    ] = verdicts
    else {
        unreachable!()
    };
    let [
        _,
        ready_obj,
        running_obj,
        succeeded_obj,
        _,
        stalled_obj,
        _,
        deleting_obj,
        _,
        stuck_obj,
    ] = objects;
    // Argo CD shows the message: it must say why, in the condition's own words.
    assert_eq!(
        just_applied.argocd.message,
        "Waiting for the operator to report status"
    );
    assert_eq!(ready.argocd.message, reason_and_message(ready_obj, "Ready"));
    assert_eq!(
        running.argocd.message,
        reason_and_message(running_obj, "Reconciling")
    );
    assert_eq!(
        succeeded.argocd.message,
        reason_and_message(succeeded_obj, "Ready")
    );
    assert!(!suspended.argocd.message.is_empty());
    assert_eq!(stalled.argocd.message, reason_and_message(stalled_obj, "Stalled"));
    assert!(
        stalled.argocd.message.contains("exit code 137"),
        "{:?}",
        stalled.argocd
    );
    // kstatus (what `flux get kustomizations` prints for a failed health check) carries the
    // Stalled condition's message too.
    assert!(
        stalled.kstatus.message.contains("exit code 137"),
        "{:?}",
        stalled.kstatus
    );
    assert_eq!(
        stale.argocd.message,
        "Waiting for the operator to observe generation 2"
    );
    // A deleting object is Progressing "Pending deletion" in Argo CD before any health script
    // runs; the script alone agrees on Progressing and says why (the controller's Deleting
    // condition).
    assert_eq!(deleting.argocd.message, "Pending deletion");
    let lua = deleting.lua.clone().expect("the script ran");
    assert_eq!(lua.status, "Progressing");
    assert_eq!(lua.message, reason_and_message(deleting_obj, "Reconciling"));
    // A deletion that cannot finish is Degraded only in the script's eyes: Argo CD shows "Pending
    // deletion" and kstatus Terminating, so neither tool surfaces the PermissionDenied. Users
    // find it in the object's conditions and Events (docs/gitops.md).
    assert_eq!(stuck.argocd.message, "Pending deletion");
    let lua = stuck.lua.clone().expect("the script ran");
    assert_eq!(
        (lua.status.as_str(), lua.message),
        ("Degraded", reason_and_message(stuck_obj, "Stalled"))
    );
    assert!(
        reason_and_message(stuck_obj, "Stalled").starts_with("PermissionDenied: "),
        "{stuck_obj:#}"
    );
}
