//! Issue 47 items 1, 2 and 6: each namespace acts with its own Google identity, through the real
//! path (CR → controllers → gcp-emulator with IAM per identity → status). The operator's own
//! principal may impersonate team-a's and team-b's service accounts
//! (`roles/iam.serviceAccountTokenCreator`); each team's account has a role on its own bucket
//! only. The emulator records the principal of every call.
//!
//! The two attacks of issue 47 (a declared input's existence probed in team-b's bucket, and a
//! `checkpointDir` in team-b's bucket showing team-b's newest step) passed on the code before
//! the identity change: with no bucket list, the operator read team-b's bucket as itself.

use std::time::Duration;

use gcp_emulator::CallRecord;
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};

use crate::tenant::{self, denied_by, stalled};

const STEP: Duration = Duration::from_secs(20);
const OPERATOR: &str = "tpu-operator@platform-proj.iam.gserviceaccount.com";
const TEAM_A: &str = "team-a@team-a-proj.iam.gserviceaccount.com";
const TEAM_B: &str = "team-b@team-b-proj.iam.gserviceaccount.com";

/// IAM as docs/policy.md sets it up: the operator impersonates each team's account; each account
/// has a role on its own bucket; team-b's bucket holds a secret input and a checkpoint.
fn iam(env: &TestEnv) {
    let gcp = &env.gcp;
    gcp.set_default_principal(OPERATOR);
    for (sa, bucket) in [(TEAM_A, "team-a-data"), (TEAM_B, "team-b-data")] {
        gcp.grant_token_creator(sa, &format!("serviceAccount:{OPERATOR}"));
        gcp.grant_bucket(
            bucket,
            "roles/storage.objectAdmin",
            &format!("serviceAccount:{sa}"),
        )
        .unwrap();
        // As docs/install.md granted the operator before issue 47: it can read every bucket the
        // objects name. What keeps team-a out of team-b's bucket is the identity the reads are
        // made as, not a missing grant.
        gcp.grant_bucket(
            bucket,
            "roles/storage.objectViewer",
            &format!("serviceAccount:{OPERATOR}"),
        )
        .unwrap();
    }
    gcp.put_object("team-a-data", "raw/part-0", "a", "text/plain");
    gcp.put_object("team-b-data", "secret-project/part-0", "b", "text/plain");
    gcp.put_object(
        "team-b-data",
        "ckpt/run-7/9000/_CHECKPOINT_METADATA",
        "{}",
        "application/json",
    );
}

fn batch(name: &str, input: &str) -> PreprocessBatch {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": name},
        "spec": {"project": "team-a-proj", "region": "us-east5",
                 "pyspark": {"mainPythonFileUri": "gs://team-a-data/s.py"},
                 "inputs": [input]}
    }))
    .unwrap()
}

fn storage_calls(env: &TestEnv) -> Vec<CallRecord> {
    env.gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "storage")
        .collect()
}

fn batch_stalled(b: &PreprocessBatch) -> Option<(String, String)> {
    stalled(&b.status.as_ref()?.conditions)
}

/// Team-a's batch reads its declared input as team-a's service account: every Cloud Storage call
/// the emulator recorded names team-a, and the token was minted by the operator's principal.
#[tokio::test]
async fn team_a_runs_with_team_a_s_service_account() {
    let mut env = TestEnv::start().await;
    iam(&env);
    tenant::start(&mut env, Some(json!({"googleServiceAccount": TEAM_A}))).await;
    env.create(&batch("own", "gs://team-a-data/raw/")).await;
    env.wait_for("own", "Succeeded", STEP, |b: &PreprocessBatch| {
        b.status
            .as_ref()
            .is_some_and(|s| s.phase == PreprocessBatchPhase::Succeeded)
    })
    .await;
    let reads = storage_calls(&env);
    assert!(!reads.is_empty());
    assert!(
        reads.iter().all(|c| c.principal == TEAM_A && c.status == 200),
        "{reads:#?}"
    );
    let mints: Vec<CallRecord> = env
        .gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "iamcredentials")
        .collect();
    assert_eq!(mints.len(), 1, "one token for the whole run: {mints:#?}");
    assert_eq!(mints[0].principal, OPERATOR);
    // The path as sent: the e-mail's `@` percent-encoded.
    let minted_for = TEAM_A.replace('@', "%40");
    assert!(
        mints[0]
            .path
            .ends_with(&format!("{minted_for}:generateAccessToken")),
        "{mints:#?}"
    );
    assert_eq!(env.gcp.tokens_minted(TEAM_A), 1);
}

/// Attack 1 of issue 47: team-a declares inputs in team-b's bucket, one that exists and one that
/// does not. No policy lists buckets. Both are refused by IAM alike: status says permission
/// denied, naming team-a's identity and team-b's bucket, and nothing tells the two apart.
#[tokio::test]
async fn team_a_cannot_probe_team_b_s_inputs_even_without_a_bucket_list() {
    let mut env = TestEnv::start().await;
    iam(&env);
    tenant::start(&mut env, Some(json!({"googleServiceAccount": TEAM_A}))).await;
    env.create(&batch("probe-exists", "gs://team-b-data/secret-project/"))
        .await;
    env.create(&batch("probe-missing", "gs://team-b-data/no-such-project/"))
        .await;
    let mut messages = Vec::new();
    for name in ["probe-exists", "probe-missing"] {
        let b: PreprocessBatch = env
            .wait_for(name, "Stalled", STEP, |b: &PreprocessBatch| {
                batch_stalled(b).is_some()
            })
            .await;
        let (reason, message) = batch_stalled(&b).unwrap();
        assert_eq!(reason, "PermissionDenied", "{name}: {message}");
        assert!(
            message.contains(&format!("as {TEAM_A}")) && message.contains("gs://team-b-data/"),
            "{name}: {message}"
        );
        assert!(!message.contains("do not exist"), "{name}: {message}");
        messages.push(
            message
                .replace("secret-project", "X")
                .replace("no-such-project", "X"),
        );
    }
    assert_eq!(messages[0], messages[1], "the two probes read the same");
    assert_eq!(env.gcp.batches().len(), 0, "no batch ran on a probed input");
    let denied: Vec<CallRecord> = storage_calls(&env);
    assert!(
        denied.iter().all(|c| c.principal == TEAM_A && c.status == 403),
        "{denied:#?}"
    );
}

/// Attack 2 of issue 47: team-a's pipeline points `checkpointDir` at team-b's bucket. Listing it
/// as team-a is refused, so team-b's newest step never reaches team-a's status.
#[tokio::test]
async fn a_checkpoint_dir_in_team_b_s_bucket_shows_nothing_of_team_b() {
    let mut env = TestEnv::start().await;
    iam(&env);
    tenant::start(&mut env, Some(json!({"googleServiceAccount": TEAM_A}))).await;
    let tp: TrainingPipeline = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": "probe-ckpt"},
        "spec": {"project": "team-a-proj", "region": "us-east5",
                 "artifacts": {"modelDir": "gs://team-a-data/models/m/",
                               "checkpointDir": "gs://team-b-data/ckpt/run-7/"},
                 "training": {"tpuVm": {
                     "slice": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                               "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
                     "container": {"image": "us-docker.pkg.dev/p/r/t:1"}}}}
    }))
    .unwrap();
    env.create(&tp).await;
    env.wait_for(
        "probe-ckpt",
        "a checkpoint listing while training",
        STEP,
        |tp: &TrainingPipeline| {
            tp.status.as_ref().is_some_and(|s| {
                s.phase == TrainingPipelinePhase::Training
                    && s.checkpoint.as_ref().is_some_and(|c| c.checked_time.is_some())
            })
        },
    )
    .await;
    env.idle(Duration::from_millis(500), STEP).await;
    let tp: TrainingPipeline = env.api().get("probe-ckpt").await.unwrap();
    let ckpt = tp.status.unwrap().checkpoint.unwrap();
    assert_eq!(ckpt.latest_step, None, "{ckpt:?}");
    assert_eq!(ckpt.latest_uri, None, "{ckpt:?}");
    let listings: Vec<CallRecord> = storage_calls(&env)
        .into_iter()
        .filter(|c| c.path.contains("/b/team-b-data/"))
        .collect();
    assert!(!listings.is_empty());
    assert!(
        listings.iter().all(|c| c.principal == TEAM_A && c.status == 403),
        "{listings:#?}"
    );
}

/// Secure by default: a policy with neither `googleServiceAccount` nor `allowedBuckets` refuses
/// every Cloud Storage location before any call, naming the field and the fix.
#[tokio::test]
async fn a_policy_without_identity_or_bucket_list_refuses_storage_locations() {
    let mut env = TestEnv::start().await;
    iam(&env);
    // `null`: the fixture leaves `allowedBuckets` out (see `tenant::policy`).
    tenant::start(&mut env, Some(json!({"maxChips": 8, "allowedBuckets": null}))).await;
    env.create(&batch("no-identity", "gs://team-b-data/secret-project/"))
        .await;
    let b: PreprocessBatch = env
        .wait_for("no-identity", "Stalled", STEP, |b: &PreprocessBatch| {
            batch_stalled(b).is_some()
        })
        .await;
    let (reason, message) = batch_stalled(&b).unwrap();
    assert_eq!(reason, "PolicyDenied", "{message}");
    assert!(
        message.contains(&denied_by(&env.ns, "googleServiceAccount"))
            && message.contains("spec.allowedBuckets")
            && message.contains("names Cloud Storage location \"gs://team-"),
        "{message}"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert!(storage_calls(&env).is_empty(), "{:#?}", storage_calls(&env));
}
