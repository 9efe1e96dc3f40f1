//! Issue 21 item 6: a Dataproc batch that outlives its `execution.ttl` is terminated by the
//! service (gcp-emulator models the discovery doc's "unconditionally terminated"), and the
//! PreprocessBatch status carries Dataproc's own reason rather than a generic failure.

use std::time::Duration;

use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::preprocess_batch::{PreprocessBatch, PreprocessBatchPhase};
use tpu_operator_controller::{kinds::preprocess_batch, never_shutdown};

const STEP: Duration = Duration::from_secs(30);

#[tokio::test]
async fn batch_terminated_at_its_ttl_fails_with_dataprocs_reason() {
    let mut env = TestEnv::start().await;
    let mut cfg = env.gcp.config();
    cfg.durations.batch_run = Duration::from_secs(3600);
    env.gcp.set_config(cfg);
    env.spawn(preprocess_batch::run(env.ctx.clone(), never_shutdown()));
    let ppb: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "PreprocessBatch",
        "metadata": {"name": "ttl"},
        "spec": {
            "region": "us-central1",
            "pyspark": {
                "mainPythonFileUri": "gs://demo-data/scripts/tokenize.py",
                "args": ["gs://demo-data/raw/", "gs://demo-data/tokenized/"]
            },
            "execution": {"ttl": "10m"},
            "outputUri": "gs://demo-data/tokenized/",
        }
    }))
    .unwrap();
    env.create(&ppb).await;
    env.idle(Duration::from_millis(300), Duration::from_secs(1)).await;
    let b: PreprocessBatch = env
        .wait_for("ttl", "Failed", STEP, |b: &PreprocessBatch| {
            b.status.as_ref().map(|s| s.phase) == Some(PreprocessBatchPhase::Failed)
        })
        .await;
    let st = b.status.unwrap();
    let text = format!("{:?} {:?}", st.message, st.state_message);
    assert!(text.contains("ttl of 600s"), "{text}");
}
