//! Issue 24: the checkpoint contract and training progress, end to end through the user's path
//! (TrainingPipeline → controllers → gcp-emulator → status). The emulator's simulated TPU VM
//! workload writes orbax-style checkpoints (`<CHECKPOINT_DIR>/<step>/…`) every `workloadCheckpoint`
//! of cloud time, continuing from the newest one when it restarts.

use std::{sync::Arc, time::Duration};

use gcp_emulator::Fault;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::TpuSlice,
    training_pipeline::{
        CheckpointStatus, PythonPackageSpec, StageName, TrainingPipeline, TrainingPipelinePhase as Phase,
    },
};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice, training_pipeline, training_pipeline::status::to_chrono},
    never_shutdown,
    runtime::metrics::PipelineLabels,
};

const STEP: Duration = Duration::from_secs(15);

async fn started() -> TestEnv {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env
}

fn tpu_vm(name: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.metadata.name = Some(name.into());
    tp.spec.preprocess = None;
    tp
}

fn checkpoint(tp: &TrainingPipeline) -> CheckpointStatus {
    tp.status
        .as_ref()
        .and_then(|s| s.checkpoint.clone())
        .unwrap_or_default()
}

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn train_attempts(tp: &TrainingPipeline) -> i32 {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
        .map(|s| s.attempts)
        .unwrap_or_default()
}

/// The `CHECKPOINT_DIR` the running node's startup script hands its container.
fn node_checkpoint_dir(env: &TestEnv) -> Option<String> {
    let nodes = env.gcp.nodes();
    let script = nodes.first()?["metadata"]["startup-script"].as_str()?.to_string();
    let start = script.find("CHECKPOINT_DIR=")? + "CHECKPOINT_DIR=".len();
    let rest = &script[start..];
    Some(rest[..rest.find('\'')?].to_string())
}

/// The steps of the complete checkpoints in the bucket, ascending.
fn steps(env: &TestEnv) -> Vec<u64> {
    let set: std::collections::BTreeSet<u64> = env
        .gcp
        .objects("demo-project-tpu-data")
        .iter()
        .filter_map(|o| o.name.strip_prefix("models/tpu-vm-run-1/checkpoints/"))
        .filter(|rest| rest.ends_with("/_CHECKPOINT_METADATA"))
        .filter_map(|rest| rest.split('/').next()?.parse().ok())
        .collect();
    set.into_iter().collect()
}

/// A spot TPU VM pipeline preempted mid-run: the recreated slice's workload gets the same
/// CHECKPOINT_DIR, status shows the newest checkpoint advancing before and after, and neither
/// the retry counter nor the attempt number moves.
#[tokio::test]
async fn preempted_tpu_vm_run_resumes_in_the_same_checkpoint_dir_and_progress_advances() {
    let env = started().await;
    env.create(&tpu_vm("ckpt-preempt")).await;
    let dir = "gs://demo-project-tpu-data/models/tpu-vm-run-1/checkpoints/";
    let before = env
        .wait_for::<TrainingPipeline, _>("ckpt-preempt", "a first checkpoint in status", STEP, |tp| {
            checkpoint(tp).latest_step.is_some()
        })
        .await;
    let first = checkpoint(&before);
    assert_eq!(first.dir.as_deref(), Some(dir));
    assert_eq!(phase(&before), Phase::Training);
    let step_before = first.latest_step.unwrap();
    assert!(first.latest_uri.as_deref().unwrap().starts_with(dir), "{first:?}");
    // The slice's workload and the node's startup script carry the directory.
    let slice: TpuSlice = env.api::<TpuSlice>().get("ckpt-preempt-train").await.unwrap();
    let workload_env = slice.spec.workload.unwrap().env;
    assert!(
        workload_env
            .iter()
            .any(|e| e.name == "CHECKPOINT_DIR" && e.value == dir),
        "{workload_env:?}"
    );
    assert_eq!(node_checkpoint_dir(&env).as_deref(), Some(dir));

    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp.inject(Fault::PreemptNode { name: node }).unwrap();
    // Everything the first incarnation wrote (status may show an older one yet).
    let written_before = steps(&env).last().copied().unwrap();
    assert!(written_before >= step_before as u64);
    // The second incarnation: a node created again, READY, with the same directory.
    let creates =
        || env.gcp.call_count("tpu", "nodes.create") + env.gcp.call_count("tpu", "queuedResources.create");
    env.wait_for::<TpuSlice, _>("ckpt-preempt-train", "the slice recreated", STEP, |_| {
        creates() >= 2 && env.gcp.nodes().first().is_some_and(|n| n["state"] == "READY")
    })
    .await;
    assert_eq!(node_checkpoint_dir(&env).as_deref(), Some(dir));
    // Progress after the recreation: a newer step than any before the preemption.
    let after = env
        .wait_for::<TrainingPipeline, _>(
            "ckpt-preempt",
            "a checkpoint of the second incarnation",
            STEP,
            |tp| {
                checkpoint(tp)
                    .latest_step
                    .is_some_and(|s| s as u64 > written_before)
            },
        )
        .await;
    let second = checkpoint(&after);
    assert_eq!(
        second.dir.as_deref(),
        Some(dir),
        "same CHECKPOINT_DIR across the preemption"
    );
    assert!(second.latest_time > first.latest_time, "{first:?} → {second:?}");
    let done = env
        .wait_for::<TrainingPipeline, _>("ckpt-preempt", "Succeeded", STEP, |tp| {
            phase(tp) == Phase::Succeeded
        })
        .await;
    assert_eq!(train_attempts(&done), 1, "the preemption used no retry");
    assert_eq!(done.status.as_ref().unwrap().attempts, 1);
    assert_eq!(checkpoint(&done).dir.as_deref(), Some(dir));
    // The resumed workload continued the step count: every step directory is a multiple of 100
    // and none was written twice.
    let steps = steps(&env);
    assert!(steps.len() >= 3, "{steps:?}");
    assert_eq!(
        steps,
        (1..=steps.len() as u64).map(|k| k * 100).collect::<Vec<_>>()
    );
}

/// A run that stops writing checkpoints is reported once its progressDeadline passes:
/// ProgressStalled=True, one Warning Event, the gauge and the counter; the run itself, its
/// attempts, its slice and its kstatus conditions are left as they were.
#[tokio::test]
async fn a_run_without_new_checkpoints_is_reported_after_its_progress_deadline_and_left_running() {
    let env = started().await;
    let mut config = env.gcp.config();
    config.durations.tpu_workload = Duration::from_secs(6 * 3600);
    env.gcp.set_config(config);
    let mut tp = tpu_vm("ckpt-stall");
    tp.spec.training.progress_deadline = Some("20m".into());
    env.create(&tp).await;
    let healthy = env
        .wait_for::<TrainingPipeline, _>("ckpt-stall", "checkpoints in status", STEP, |tp| {
            checkpoint(tp).latest_step.is_some_and(|s| s >= 200)
        })
        .await;
    let stalled_cond = |tp: &TrainingPipeline| {
        find_condition(&tp.status.as_ref().unwrap().conditions, "ProgressStalled").cloned()
    };
    let c = stalled_cond(&healthy).expect("ProgressStalled is reported while a deadline is set");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CheckpointRecent")
    );
    let labels = PipelineLabels {
        namespace: env.ns.clone(),
        name: "ckpt-stall".into(),
    };
    assert_eq!(env.ctx.metrics.training_stalled.get_or_create(&labels).get(), 0);

    // The workload hangs: it writes no more checkpoints.
    let mut config = env.gcp.config();
    config.durations.workload_checkpoint = Duration::ZERO;
    env.gcp.set_config(config);
    let creates = env.gcp.call_count("tpu", "nodes.create");
    let stalled = env
        .wait_for::<TrainingPipeline, _>("ckpt-stall", "ProgressStalled=True", STEP, |tp| {
            stalled_cond(tp).is_some_and(|c| c.status == "True")
        })
        .await;
    let c = stalled_cond(&stalled).unwrap();
    assert_eq!(c.reason, "NoRecentCheckpoint");
    assert!(c.message.contains("progressDeadline 20m"), "{}", c.message);
    let last = checkpoint(&stalled);
    let since = stalled
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "ProgressStalled");
    // Reported no earlier than the deadline after the newest checkpoint.
    let newest = to_chrono(last.latest_time.as_ref().unwrap());
    let reported = to_chrono(&since.unwrap().last_transition_time);
    assert!(
        reported - newest > chrono::Duration::minutes(20),
        "{newest} → {reported}"
    );
    let events = env.wait_for_event("ckpt-stall", "ProgressStalled", STEP).await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("ProgressStalled"))
        .unwrap();
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(env.ctx.metrics.training_stalled.get_or_create(&labels).get(), 1);
    let stall_count = env
        .ctx
        .metrics
        .training_stalls
        .get_or_create(&tpu_operator_controller::runtime::metrics::SpendLabels {
            namespace: env.ns.clone(),
        })
        .get();
    assert_eq!(stall_count, 1);

    // Nothing else changes, now or while it stays stalled.
    env.idle(Duration::from_millis(800), STEP).await;
    let later: TrainingPipeline = env.api().get("ckpt-stall").await.unwrap();
    let st = later.status.as_ref().unwrap();
    assert_eq!(phase(&later), Phase::Training);
    assert_eq!((train_attempts(&later), st.attempts), (1, 1));
    assert!(stalled_cond(&later).is_some_and(|c| c.status == "True"));
    let kstatus = |t: &str| find_condition(&st.conditions, t).map(|c| c.status.clone());
    assert_eq!(kstatus(types::STALLED).as_deref(), Some("False"));
    assert_eq!(kstatus(types::RECONCILING).as_deref(), Some("True"));
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), creates);
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
    assert_eq!(env.gcp.nodes()[0]["state"], "READY");
    let events = env.wait_for_event("ckpt-stall", "ProgressStalled", STEP).await;
    let stall_events: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ProgressStalled"))
        .collect();
    assert_eq!(stall_events.len(), 1, "one Event per stall");
    assert!(
        stall_events[0].series.is_none(),
        "published once, not repeated: {:?}",
        stall_events[0].series
    );
    assert_eq!(
        env.ctx
            .metrics
            .training_stalls
            .get_or_create(&tpu_operator_controller::runtime::metrics::SpendLabels {
                namespace: env.ns.clone(),
            })
            .get(),
        1
    );
}

/// The Vertex guide's shape: a Python package on a prebuilt image, with user labels next to the
/// operator's identity labels, web access and restarts, reaches Succeeded; the job carries the
/// attempt's CHECKPOINT_DIR and its progress shows in status.
#[tokio::test]
async fn vertex_python_package_with_user_labels_reaches_succeeded() {
    let env = started().await;
    // A 30-minute run: several checkpoint listings (every 3 min of cloud time) happen while it
    // runs, however fast the test clock moves against the controllers' real-time requeues.
    let mut config = env.gcp.config();
    config.durations.job_run = Duration::from_secs(1800);
    env.gcp.set_config(config);
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("pkg".into());
    tp.spec.preprocess = None;
    let v = tp.spec.training.vertex.as_mut().unwrap();
    v.container = None;
    v.python_package_spec = Some(PythonPackageSpec {
        executor_image_uri: "us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-17.cp310:latest".into(),
        package_uris: vec!["gs://demo-project-tpu-data/trainer-0.1.tar.gz".into()],
        python_module: "trainer.task".into(),
        args: vec!["--checkpoint-dir=$(CHECKPOINT_DIR)".into()],
        env: Vec::new(),
    });
    v.labels = [("team", "ml-platform"), ("cost-center", "research")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.enable_web_access = true;
    v.scheduling.as_mut().unwrap().restart_job_on_worker_restart = true;
    env.create(&tp).await;
    // The running job's simulated training checkpoints into the CHECKPOINT_DIR it was given,
    // and status shows it while the job runs.
    let running = env
        .wait_for::<TrainingPipeline, _>("pkg", "a checkpoint while the job runs", STEP, |tp| {
            checkpoint(tp).latest_step.is_some()
        })
        .await;
    assert_eq!(phase(&running), Phase::Training);
    // Issue 36: `enableWebAccess` shows each replica's interactive shell in the stage's links.
    let shell = |tp: &TrainingPipeline| {
        let st = tp.status.as_ref().unwrap();
        let train = st.stages.iter().find(|s| s.name == StageName::Train).unwrap();
        train
            .links
            .as_ref()
            .and_then(|l| l.web_access.get("workerpool0-0").cloned())
    };
    let uri = shell(&running).expect("the running job's web access URI");
    assert!(
        uri.ends_with(".aiplatform-training.googleusercontent.com"),
        "{uri}"
    );
    assert!(
        checkpoint(&running)
            .latest_uri
            .unwrap()
            .starts_with("gs://demo-project-tpu-data/models/quickstart/checkpoints/")
    );
    let done = env
        .wait_for::<TrainingPipeline, _>("pkg", "Succeeded", STEP, |tp| {
            matches!(phase(tp), Phase::Succeeded | Phase::Failed)
        })
        .await;
    assert_eq!(phase(&done), Phase::Succeeded, "{:?}", done.status);
    assert_eq!(shell(&done), Some(uri), "the finished run keeps its links");
    let jobs = env.gcp.custom_jobs();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job["labels"]["team"], "ml-platform");
    assert_eq!(job["labels"]["cost-center"], "research");
    assert_eq!(job["labels"]["managed-by"], "tpu-operator");
    assert_eq!(job["labels"]["tpu-operator-name"], "pkg");
    let spec = &job["jobSpec"];
    assert_eq!(spec["enableWebAccess"], true);
    assert_eq!(spec["scheduling"]["restartJobOnWorkerRestart"], true);
    let pkg = &spec["workerPoolSpecs"][0]["pythonPackageSpec"];
    assert_eq!(pkg["pythonModule"], "trainer.task");
    let ckpt = "gs://demo-project-tpu-data/models/quickstart/checkpoints/";
    assert_eq!(pkg["args"][0], format!("--checkpoint-dir={ckpt}"));
    assert!(
        pkg["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "CHECKPOINT_DIR" && e["value"] == ckpt),
        "{pkg}"
    );
    assert!(spec["workerPoolSpecs"][0].get("containerSpec").is_none());
}

/// `checkpointsOnRetry: StartClean`: the retry after a failed attempt gets a directory of its
/// own (`attempt-2/`), status follows it, and the failed attempt's checkpoints stay where they
/// were; with the default (Resume) the retry would get the first directory again.
#[tokio::test]
async fn a_start_clean_retry_gets_its_own_checkpoint_dir() {
    use tpu_operator_api::training_pipeline::CheckpointsOnRetry;
    let env = started().await;
    let mut tp = tpu_vm("ckpt-clean");
    tp.spec.artifacts.checkpoints_on_retry = CheckpointsOnRetry::StartClean;
    env.create(&tp).await;
    let base = "gs://demo-project-tpu-data/models/tpu-vm-run-1/checkpoints/";
    let first = env
        .wait_for::<TrainingPipeline, _>("ckpt-clean", "a checkpoint of attempt 1", STEP, |tp| {
            checkpoint(tp).latest_step.is_some()
        })
        .await;
    assert_eq!(checkpoint(&first).dir, Some(format!("{base}attempt-1/")));
    assert_eq!(node_checkpoint_dir(&env), Some(format!("{base}attempt-1/")));
    // The first attempt's container fails when it exits.
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_string();
    env.gcp
        .inject(Fault::FailTpuWorkload {
            node,
            exit_code: None,
            message: None,
        })
        .unwrap();
    let retried = env
        .wait_for::<TrainingPipeline, _>("ckpt-clean", "the retry's directory in status", STEP, |tp| {
            checkpoint(tp).dir.as_deref() == Some(&format!("{base}attempt-2/"))
        })
        .await;
    env.gcp.clear_faults();
    assert_eq!(train_attempts(&retried), 2);
    let second = env
        .wait_for::<TrainingPipeline, _>("ckpt-clean", "a checkpoint of attempt 2", STEP, |tp| {
            checkpoint(tp).latest_step.is_some() && phase(tp) == Phase::Training
        })
        .await;
    let ckpt = checkpoint(&second);
    assert!(
        ckpt.latest_uri
            .as_deref()
            .unwrap()
            .starts_with(&format!("{base}attempt-2/")),
        "{ckpt:?}"
    );
    // Attempt 2 started from scratch: its first checkpoint is step 100 again.
    let objects = env.gcp.objects("demo-project-tpu-data");
    assert!(
        objects
            .iter()
            .any(|o| o.name == "models/tpu-vm-run-1/checkpoints/attempt-2/100/_CHECKPOINT_METADATA"),
        "{:?}",
        objects.iter().map(|o| &o.name).collect::<Vec<_>>()
    );
    assert_eq!(node_checkpoint_dir(&env), Some(format!("{base}attempt-2/")));
    assert!(
        objects
            .iter()
            .any(|o| o.name.starts_with("models/tpu-vm-run-1/checkpoints/attempt-1/")),
        "attempt 1's checkpoints are left in place"
    );
}

/// Machine type / topology combinations Vertex refuses, and the new Vertex shapes' rules, are
/// refused by the API server at create (the CRD's CEL rules), naming the field; nothing reaches
/// Vertex.
#[tokio::test]
async fn vertex_shapes_vertex_would_refuse_are_refused_at_admission_naming_the_field() {
    use kube::api::PostParams;
    use tpu_operator_api::{accelerator::VertexMachineType, common::ContainerSpec};
    let env = started().await;
    let base = || {
        let mut tp: TrainingPipeline =
            test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
        tp.metadata.name = Some("refused".into());
        // The example says `namespace: default`; the real API server refuses a body whose
        // namespace differs from the request's (400), before any validation.
        tp.metadata.namespace = Some(env.ns.clone());
        tp.spec.preprocess = None;
        tp
    };
    type Edit = fn(&mut tpu_operator_api::training_pipeline::VertexTraining);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "8-chip machine, 4-chip topology",
            |v| {
                v.machine_type = VertexMachineType::Ct6eStandard8t;
                v.tpu_topology = Some("2x2".into());
            },
            "spec.training.vertex.tpuTopology",
        ),
        (
            "v5p machine, 2-D topology",
            |v| {
                v.machine_type = VertexMachineType::Ct5pHightpu4t;
                v.tpu_topology = Some("2x2".into());
            },
            "spec.training.vertex.tpuTopology",
        ),
        (
            "cloud-tpu with a topology",
            |v| v.machine_type = VertexMachineType::CloudTpu,
            "spec.training.vertex.tpuTopology",
        ),
        (
            "container and python package",
            |v| {
                v.python_package_spec = Some(PythonPackageSpec {
                    executor_image_uri: "us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-17.cp310:latest"
                        .into(),
                    package_uris: vec!["gs://b/trainer.tar.gz".into()],
                    python_module: "trainer.task".into(),
                    ..Default::default()
                });
                v.container = Some(ContainerSpec {
                    image: "us-docker.pkg.dev/p/r/t:1".into(),
                    ..Default::default()
                });
            },
            "spec.training.vertex.container",
        ),
        (
            "an identity label",
            |v| {
                v.labels.insert("tpu-operator-uid".into(), "forged".into());
            },
            "spec.training.vertex.labels",
        ),
        (
            "a tensorboard without a service account",
            |v| {
                v.tensorboard = Some("projects/p/locations/us-east5/tensorboards/1".into());
                v.service_account = None;
            },
            "spec.training.vertex.tensorboard",
        ),
    ];
    for (what, edit, field) in cases {
        let mut tp = base();
        edit(tp.spec.training.vertex.as_mut().unwrap());
        let err = env
            .api::<TrainingPipeline>()
            .create(&PostParams::default(), &tp)
            .await
            .expect_err(what);
        let kube::Error::Api(status) = err else {
            panic!("{what}: not an API refusal: {err}");
        };
        assert_eq!(status.code, 422, "{what}: {status:?}");
        assert!(status.message.contains(field), "{what}: {}", status.message);
    }
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
}
