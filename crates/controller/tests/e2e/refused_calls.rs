//! Issue 33, item 4: a cloud call Google refuses (403), read or write, on every kind, reaches the
//! object's status as `Stalled=True`, reason `PermissionDenied`, naming the service, the method and
//! the permission to grant. Before, a refused read left the pass with an error and the status as it
//! was: a TpuSlice whose first `nodes.get` was refused had no status at all (kstatus: Current, so
//! Flux `wait` passed), and a pipeline whose `customJobs.list` was refused stayed "Running".

use std::time::Duration;

use gcp_emulator::{Code, Fault};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{tpu_slice::TpuSlice, training_pipeline::TrainingPipeline};

use crate::tenant;

use tenant::stalled;

const STEP: Duration = Duration::from_secs(15);

fn start(env: &mut TestEnv) {
    let ctx = env.ctx.clone();
    tenant::spawn_controllers(env, &ctx);
}

fn refuse(env: &TestEnv, service: &str, method: &str) {
    env.gcp
        .inject(Fault::FailCalls {
            service: service.into(),
            method: method.into(),
            count: 1_000,
            code: Code::PermissionDenied,
            message: None,
        })
        .unwrap();
}

#[tokio::test]
async fn a_slice_whose_first_read_is_refused_says_so_in_status() {
    let mut env = TestEnv::start().await;
    start(&mut env);
    refuse(&env, "tpu", "nodes.get");
    let slice: TpuSlice = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
        "metadata": {"name": "unreadable"},
        "spec": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                 "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
    }))
    .unwrap();
    env.create(&slice).await;
    let s: TpuSlice = env
        .wait_for("unreadable", "a PermissionDenied status", STEP, |s: &TpuSlice| {
            s.status.as_ref().and_then(|st| stalled(&st.conditions)).is_some()
        })
        .await;
    let (reason, message) = stalled(&s.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PermissionDenied");
    assert!(
        message.contains("tpu nodes.get")
            && message.contains("tpu.nodes.get")
            && message.contains("roles/tpu.admin"),
        "names the service, the method, the permission and the role: {message}"
    );
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        0,
        "nothing created blind"
    );
}

#[tokio::test]
async fn a_running_pipeline_whose_job_listing_is_refused_is_not_left_running() {
    let mut env = TestEnv::start().await;
    start(&mut env);
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("blind".into());
    tp.spec.preprocess = None;
    env.create(&tp).await;
    crate::vertex_training::training(&env, "blind").await;
    refuse(&env, "vertex", "customJobs.list");
    refuse(&env, "vertex", "customJobs.get");
    let tp: TrainingPipeline = env
        .wait_for(
            "blind",
            "a PermissionDenied status",
            STEP,
            |tp: &TrainingPipeline| {
                tp.status
                    .as_ref()
                    .and_then(|st| stalled(&st.conditions))
                    .is_some()
            },
        )
        .await;
    let (reason, message) = stalled(&tp.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PermissionDenied");
    assert!(
        message.contains("aiplatform.customJobs.") && message.contains("roles/aiplatform.user"),
        "{message}"
    );
}

#[tokio::test]
async fn a_batch_whose_input_check_is_refused_says_so_in_status() {
    use tpu_operator_api::preprocess_batch::PreprocessBatch;
    let mut env = TestEnv::start().await;
    start(&mut env);
    refuse(&env, "storage", "objects.get");
    refuse(&env, "storage", "objects.list");
    let mut b: PreprocessBatch =
        test_kit::from_yaml(include_str!("../../../../examples/preprocess-batch.yaml"));
    b.metadata.name = Some("unchecked".into());
    b.metadata.namespace = None;
    env.create(&b).await;
    let b: PreprocessBatch = env
        .wait_for(
            "unchecked",
            "a PermissionDenied status",
            STEP,
            |b: &PreprocessBatch| b.status.as_ref().and_then(|st| stalled(&st.conditions)).is_some(),
        )
        .await;
    let (reason, message) = stalled(&b.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PermissionDenied");
    assert!(
        message.contains("storage.objects.") && message.contains("roles/storage.objectViewer on the bucket"),
        "{message}"
    );
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 0);
}
