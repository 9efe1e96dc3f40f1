//! Kueue admits a TrainingPipeline's training stage: the real Kueue manager on the real
//! kube-apiserver (as in `kueue.rs`, whose helpers these tests share), the pipeline, TpuSlice and
//! PreprocessBatch controllers in-process, gcp-emulator behind Google's clients.

use std::time::Duration;

use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject},
};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::describing,
    tpu_slice::TpuSlice,
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

use super::kueue::{
    STEP, ZONE, priority_class, queue, queued, ready, resource, slice, start_idle, visibility,
};

/// The env with Kueue's integration on and the three controllers running.
async fn start() -> Option<TestEnv> {
    let mut env = start_idle().await?;
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(env.ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    Some(env)
}

/// The quickstart's Vertex training (ct6e-standard-4t 2x2: 4 v6e chips, Spot), no
/// preprocessing, in LocalQueue `queue` (`None`: no queue label).
pub(super) fn vertex_pipeline(name: &str, queue: Option<&str>) -> TrainingPipeline {
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some(name.into());
    tp.metadata.namespace = None;
    tp.metadata.labels = queue.map(|q| [("kueue.x-k8s.io/queue-name".to_string(), q.to_string())].into());
    tp.spec.preprocess = None;
    tp
}

/// TPU VM training on an 8-chip v6e Spot slice, `maxRetries: 0` (a counted retry would fail it),
/// in LocalQueue `queue` at WorkloadPriorityClass `priority`.
fn tpu_vm_pipeline(name: &str, queue: &str, priority: &str) -> TrainingPipeline {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": name, "labels": {
            "kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": priority}},
        "spec": {"project": "demo-project", "region": "us-east5", "maxRetries": 0,
                 "artifacts": {"modelDir": "gs://demo-project-tpu-data/models/kueue-vm/"},
                 "training": {"tpuVm": {
                     "slice": {"zone": ZONE, "acceleratorType": "v6e-8",
                               "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
                     "container": {"image": "us-docker.pkg.dev/demo-project/trainers/jax-trainer:1.0"}}}}
    }))
    .expect("TrainingPipeline fixture")
}

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn reason(tp: &TrainingPipeline) -> String {
    tp.status
        .as_ref()
        .and_then(|s| describing(&s.conditions))
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn kueue(tp: &TrainingPipeline) -> tpu_operator_api::kueue::KueueStatus {
    tp.status
        .as_ref()
        .and_then(|s| s.kueue.clone())
        .unwrap_or_default()
}

fn train_attempts(tp: &TrainingPipeline) -> i32 {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
        .map_or(0, |s| s.attempts)
}

/// The `CHECKPOINT_DIR` the pipeline's training slice hands its container.
async fn checkpoint_dir(env: &TestEnv, slice: &str) -> String {
    let s: TpuSlice = env.api::<TpuSlice>().get(slice).await.expect("training slice");
    let env_vars = s.spec.workload.expect("a training workload").env;
    env_vars
        .into_iter()
        .find(|e| e.name == "CHECKPOINT_DIR")
        .map(|e| e.value)
        .expect("CHECKPOINT_DIR")
}

/// A team's 8 chips are held by a running slice: the pipeline's training waits in Kueue, with
/// its position and Kueue's reason, and no Vertex job is created; when the slice goes, the
/// pipeline is admitted and trains; when it succeeds its Workload is deleted at once, which
/// admits the slice that waited behind it.
#[tokio::test]
async fn a_pipeline_waits_for_quota_and_its_finished_run_frees_it() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    env.create(&slice("hog", "tpu", None)).await;
    env.wait_for::<TpuSlice, _>("hog", "hog Ready", STEP, ready).await;

    env.create(&vertex_pipeline("train", Some("tpu"))).await;
    let waiting: TrainingPipeline = env
        .wait_for("train", "training queued with Kueue's reason", STEP, |tp| {
            reason(tp) == "QueuedInKueue"
                && tp
                    .status
                    .as_ref()
                    .and_then(|s| s.message.as_deref())
                    .is_some_and(|m| m.contains("insufficient unused quota"))
                && (!visibility() || kueue(tp).position.is_some())
        })
        .await;
    assert_eq!(phase(&waiting), Phase::Waiting);
    let k = kueue(&waiting);
    assert!(!k.admitted && k.local_queue == "tpu", "{k:?}");
    if visibility() {
        assert_eq!(k.position, Some(1), "{k:?}");
    }
    assert_eq!(
        env.gcp.call_count("vertex", "customJobs.create"),
        0,
        "nothing created before admission"
    );
    assert_eq!(
        waiting.status.as_ref().unwrap().attempts,
        0,
        "no attempt recorded while queued"
    );

    env.api::<TpuSlice>()
        .delete("hog", &DeleteParams::default())
        .await
        .expect("delete hog");
    env.wait_gone::<TpuSlice>("hog", STEP).await;
    let training: TrainingPipeline = env
        .wait_for("train", "admitted and training", STEP, |tp| {
            kueue(tp).admitted && matches!(phase(tp), Phase::Provisioning | Phase::Training)
        })
        .await;
    let workload = kueue(&training).workload;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 1);
    // 4 chips run; an 8-chip slice waits behind the pipeline until its run is over.
    env.create(&slice("next", "tpu", None)).await;
    env.wait_for::<TpuSlice, _>("next", "next queued", STEP, queued)
        .await;
    env.wait_for::<TrainingPipeline, _>("train", "Succeeded", STEP, |tp| phase(tp) == Phase::Succeeded)
        .await;
    env.wait_for::<TpuSlice, _>("next", "next admitted once the run is over", STEP, ready)
        .await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.ns, &resource("Workload", "workloads"));
    assert!(
        workloads
            .get_opt(&workload)
            .await
            .expect("get workload")
            .is_none(),
        "the finished pipeline's Workload is deleted"
    );
}

/// A low-priority TPU VM pipeline is training when a high-priority slice needs its quota. Its
/// slice carries the pipeline's Kueue labels and is gated like any slice: Kueue evicts it, its
/// node is deleted, the eviction is counted on the slice; the pipeline waits without failing.
/// When the urgent slice goes, the slice is admitted again and recreates its node, and training
/// goes on in the same CHECKPOINT_DIR: one attempt, no retry spent (`maxRetries: 0`).
#[tokio::test]
async fn an_evicted_tpu_vm_run_stops_billing_and_comes_back_without_spending_a_retry() {
    let Some(env) = start().await else { return };
    let mut config = env.gcp.config();
    config.durations.tpu_workload = Duration::from_secs(6 * 3600);
    env.gcp.set_config(config);
    queue(&env, "tpu", 8, None).await;
    let (low, high) = (format!("low-{}", env.ns), format!("high-{}", env.ns));
    priority_class(&env, &low, 100).await;
    priority_class(&env, &high, 1000).await;
    env.create(&tpu_vm_pipeline("run", "tpu", &low)).await;
    env.wait_for::<TrainingPipeline, _>("run", "training", STEP, |tp| phase(tp) == Phase::Training)
        .await;
    let child: TpuSlice = env
        .api::<TpuSlice>()
        .get("run-train")
        .await
        .expect("training slice");
    assert_eq!(
        child.labels().get("kueue.x-k8s.io/priority-class"),
        Some(&low),
        "the slice queues at the pipeline's priority"
    );
    let first_node = child.status.as_ref().and_then(|s| s.node_name.clone());
    assert!(child.status.unwrap().kueue.unwrap().admitted);
    let dir = checkpoint_dir(&env, "run-train").await;

    env.create(&slice("urgent", "tpu", Some(&high))).await;
    env.wait_for::<TpuSlice, _>("run-train", "evicted and its node gone", STEP, |s| {
        s.status
            .as_ref()
            .and_then(|st| st.kueue.as_ref())
            .is_some_and(|k| k.evictions == 1 && k.stopped)
    })
    .await;
    env.wait_for::<TpuSlice, _>("urgent", "urgent Ready", STEP, ready)
        .await;
    assert_eq!(
        env.gcp.nodes().len(),
        1,
        "only the urgent slice's node bills: {:#?}",
        env.gcp.nodes()
    );
    let waiting: TrainingPipeline = env.api().get("run").await.expect("pipeline");
    assert!(
        matches!(phase(&waiting), Phase::Waiting | Phase::Provisioning),
        "{:?}: {:?}",
        phase(&waiting),
        waiting.status.as_ref().and_then(|s| s.message.clone())
    );
    assert!(!env.wait_for_event("run-train", "Evicted", STEP).await.is_empty());

    env.api::<TpuSlice>()
        .delete("urgent", &DeleteParams::default())
        .await
        .expect("delete urgent");
    let back: TpuSlice = env
        .wait_for("run-train", "admitted again, on a new node", STEP, |s| {
            ready(s) && s.status.as_ref().and_then(|st| st.node_name.clone()) != first_node
        })
        .await;
    assert_eq!(back.status.unwrap().kueue.unwrap().evictions, 1);
    let resumed: TrainingPipeline = env
        .wait_for("run", "training again", STEP, |tp| phase(tp) == Phase::Training)
        .await;
    let st = resumed.status.as_ref().unwrap();
    assert_eq!(st.attempts, 1, "the same attempt: the slice recreated its node");
    assert_eq!(train_attempts(&resumed), 1, "the eviction spent no retry");
    assert_eq!(st.kueue, None, "the slice holds the Kueue view of a TPU VM run");
    assert_eq!(
        checkpoint_dir(&env, "run-train").await,
        dir,
        "same CHECKPOINT_DIR"
    );
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        3,
        "the first node, the urgent slice's, the recreated one"
    );
}
