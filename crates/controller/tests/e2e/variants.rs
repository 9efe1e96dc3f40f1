//! Variants of one pipeline (issue 35 item 5), end to end against kube-emulator and gcp-emulator:
//! a `generateName` sweep whose artifact URIs name `$(PIPELINE_NAME)` gets a directory per
//! variant; two live pipelines writing one model directory run one after the other, the second
//! `Stalled` with reason `ArtifactsInUse` and no cloud create until the first finished; an
//! unknown placeholder is refused at admission.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use kube::{ResourceExt, api::PostParams};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, reasons, types},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    Context,
    governance::tenancy::WithoutPolicy,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

/// Emulated time per poll, as in training_pipeline.rs: a Vertex job (6 min) finishes in a few
/// dozen polls.
const STEP: Duration = Duration::from_secs(15);
const BUCKET: &str = "demo-project-tpu-data";

async fn started() -> TestEnv {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env
}

/// The quickstart without preprocessing, writing its model to `model_dir`.
fn vertex_only(model_dir: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.spec.preprocess = None;
    tp.spec.artifacts.processed_data = None;
    tp.spec.artifacts.model_dir = model_dir.into();
    tp
}

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

async fn wait_phase(env: &TestEnv, name: &str, want: Phase) -> TrainingPipeline {
    env.wait_for::<TrainingPipeline, _>(name, &format!("{name} phase {want:?}"), STEP, |tp| {
        phase(tp) == want
    })
    .await
}

fn model_uri(tp: &TrainingPipeline) -> String {
    let outputs = tp.status.as_ref().and_then(|s| s.outputs.clone());
    outputs.and_then(|o| o.model_uri).unwrap_or_default()
}

/// The Vertex job's `baseOutputDirectory` of the pipeline with UID `uid`.
fn job_output_dir(env: &TestEnv, uid: &str) -> String {
    let jobs = env.gcp.custom_jobs();
    let job = jobs
        .iter()
        .find(|j| j["labels"]["tpu-operator-uid"] == uid)
        .unwrap_or_else(|| panic!("no Vertex job of {uid}"));
    job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Five variants made with `generateName`, all with `modelDir: .../models/$(PIPELINE_NAME)/`
/// as written: each succeeds with its own model, in its own directory. Before placeholders they
/// shared the literal directory `models/$(PIPELINE_NAME)/` and reported the same model.
#[tokio::test]
async fn a_generate_name_sweep_of_five_gets_a_model_directory_each() {
    let env = started().await;
    let mut names = Vec::new();
    for _ in 0..5 {
        let mut tp = vertex_only("gs://demo-project-tpu-data/models/$(PIPELINE_NAME)/");
        tp.metadata.name = None;
        tp.metadata.generate_name = Some("sweep-".into());
        names.push(env.create(&tp).await.name_any());
    }
    let mut uris = BTreeSet::new();
    for name in &names {
        let tp = wait_phase(&env, name, Phase::Succeeded).await;
        let uri = model_uri(&tp);
        assert_eq!(uri, format!("gs://{BUCKET}/models/{name}/model/"), "{name}");
        assert_eq!(
            job_output_dir(&env, &tp.uid().unwrap()),
            format!("gs://{BUCKET}/models/{name}/"),
            "the Vertex job writes the expanded modelDir"
        );
        assert!(
            env.gcp
                .object(BUCKET, &format!("models/{name}/model/saved_model.pb"))
                .is_some(),
            "{name}'s model is in its own directory"
        );
        uris.insert(uri);
    }
    assert_eq!(uris.len(), 5, "five distinct models: {uris:?}");
    let models: BTreeSet<String> = env
        .gcp
        .objects(BUCKET)
        .into_iter()
        .map(|o| o.name)
        .filter(|n| n.ends_with("/model/saved_model.pb"))
        .collect();
    assert_eq!(models.len(), 5, "{models:?}");
    assert!(
        models.iter().all(|n| !n.contains("$(")),
        "no placeholder reached the bucket: {models:?}"
    );
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 5);
}

/// Two live pipelines with one modelDir: the second waits, `Stalled` for `ArtifactsInUse`
/// naming the first, with no cloud create while the first runs, and runs once it finished.
/// Before, both trained into one directory at once.
#[tokio::test]
async fn a_second_live_pipeline_on_the_same_model_dir_waits_for_the_first() {
    let env = started().await;
    let shared = "gs://demo-project-tpu-data/models/shared/";
    let mut first = vertex_only(shared);
    first.metadata.name = Some("a-first".into());
    env.create(&first).await;
    crate::vertex_training::training(&env, "a-first").await;
    let creates = env.gcp.call_count("vertex", "customJobs.create");
    assert_eq!(creates, 1);

    let mut second = vertex_only(shared);
    second.metadata.name = Some("b-second".into());
    env.create(&second).await;
    let stalled = env
        .wait_for::<TrainingPipeline, _>("b-second", "Stalled for ArtifactsInUse", Duration::ZERO, |tp| {
            let conditions = tp
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            find_condition(conditions, types::STALLED)
                .is_some_and(|c| c.status == "True" && c.reason == reasons::ARTIFACTS_IN_USE)
        })
        .await;
    let message = stalled
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    let first_ref = format!("TrainingPipeline {}/a-first", env.ns);
    assert!(
        message.contains(&first_ref),
        "names the other pipeline: {message}"
    );
    assert!(message.contains("spec.artifacts.modelDir"), "{message}");
    assert_eq!(phase(&stalled), Phase::Waiting);
    assert!(
        phase(&env.api::<TrainingPipeline>().get("a-first").await.unwrap()) == Phase::Training,
        "the first still runs"
    );
    assert_eq!(
        env.gcp.call_count("vertex", "customJobs.create"),
        creates,
        "no cloud create for the waiting pipeline"
    );
    env.wait_for_event("b-second", reasons::ARTIFACTS_IN_USE, Duration::ZERO)
        .await;

    wait_phase(&env, "a-first", Phase::Succeeded).await;
    let second = wait_phase(&env, "b-second", Phase::Succeeded).await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    let conditions = &second.status.as_ref().unwrap().conditions;
    let stalled = find_condition(conditions, types::STALLED).unwrap();
    assert_eq!(stalled.status, "False", "{stalled:?}");
}

/// The waiting pipeline is woken when the first one finishes, not at its next stable poll: with
/// `--poll-stable` at 10 min it still starts within the test's minute (before the wake it would
/// have waited the full interval after the first finished).
#[tokio::test]
async fn a_waiting_pipeline_is_woken_when_the_first_finishes() {
    let mut env = TestEnv::start().await;
    let slow_stable = test_kit::ContextSpec {
        cluster_id: "test-cluster".into(),
        default_project: "demo-project".into(),
        namespace: Some(env.ns.clone()),
        concurrency: 8,
        polls: test_kit::Polls {
            stable: Duration::from_secs(600),
            ..test_kit::Polls::fast()
        },
        tenancy: Some(WithoutPolicy::Allow),
    };
    let ctx = Arc::new(slow_stable.build(&env.client, &env.gcp).await.unwrap());
    env.spawn(training_pipeline::run(ctx, never_shutdown()));
    let shared = "gs://demo-project-tpu-data/models/woken/";
    let mut first = vertex_only(shared);
    first.metadata.name = Some("a-first".into());
    env.create(&first).await;
    crate::vertex_training::training(&env, "a-first").await;
    let mut second = vertex_only(shared);
    second.metadata.name = Some("b-second".into());
    env.create(&second).await;
    env.wait_for::<TrainingPipeline, _>("b-second", "Stalled", Duration::ZERO, |tp| {
        tp.status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains("a-first"))
    })
    .await;
    wait_phase(&env, "a-first", Phase::Succeeded).await;
    wait_phase(&env, "b-second", Phase::Succeeded).await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
}

/// A placeholder the controller does not know is refused at admission, naming the field and the
/// placeholders it takes; nothing is stored.
#[tokio::test]
async fn an_unknown_placeholder_is_refused_at_admission() {
    let env = TestEnv::start().await;
    let mut tp = vertex_only("gs://demo-project-tpu-data/models/$(PIPELINE_NAM)/");
    tp.metadata.name = Some("typo".into());
    tp.metadata.namespace = Some(env.ns.clone());
    let err = env
        .api::<TrainingPipeline>()
        .create(&PostParams::default(), &tp)
        .await
        .expect_err("an unknown placeholder is refused");
    let text = err.to_string();
    assert!(text.contains("spec.artifacts.modelDir"), "{text}");
    assert!(
        text.contains("$(PIPELINE_NAME), $(PIPELINE_NAMESPACE), $(PIPELINE_UID)"),
        "{text}"
    );
    assert!(
        env.api::<TrainingPipeline>()
            .get_opt("typo")
            .await
            .unwrap()
            .is_none()
    );
}

/// The cross-namespace squat: team A points one pipeline at team B's bucket root, which team
/// A's own policy refuses. Its directory claim holds nothing: the squatter is `PolicyDenied`
/// (never `ArtifactsInUse`, so it learns nothing of team B's directories), and team B's pipeline
/// under that bucket trains at once. Before, the claim was taken before the policy check and
/// counted across namespaces, and every team B pipeline under the bucket waited forever.
///
/// One operator watching both namespaces (a cluster-wide context): on a shared real API server
/// it would reconcile other tests' objects, so there the test says so and returns.
#[tokio::test]
async fn a_claim_its_own_policy_refuses_makes_no_other_team_wait() {
    let mut env = TestEnv::start().await;
    if matches!(test_kit::target(), Ok(test_kit::Target::Real { .. })) {
        eprintln!("NOTICE: needs a cluster-wide operator, which a shared real API server cannot host here");
        return;
    }
    let team_a = format!("{}-a", env.ns);
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": team_a}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("team A's namespace");
    let policy = |ns: &str, bucket: &str| -> tpu_operator_api::tpu_policy::TpuPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1beta1",
            "kind": "TpuPolicy",
            "metadata": {"name": format!("pol-{ns}")},
            "spec": {"namespaces": [ns], "allowedBuckets": [bucket]},
        }))
        .unwrap()
    };
    let policies = kube::Api::<tpu_operator_api::tpu_policy::TpuPolicy>::all(env.client.clone());
    for p in [policy(&team_a, "team-a-data"), policy(&env.ns, BUCKET)] {
        policies.create(&PostParams::default(), &p).await.expect("policy");
    }
    let spec = test_kit::ContextSpec {
        cluster_id: "test-cluster".into(),
        default_project: "demo-project".into(),
        namespace: None,
        concurrency: 8,
        polls: test_kit::Polls::fast(),
        tenancy: Some(WithoutPolicy::Allow),
    };
    let ctx = Arc::new(spec.build(&env.client, &env.gcp).await.expect("context"));
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));

    let mut squat = vertex_only(&format!("gs://{BUCKET}/"));
    squat.metadata.name = Some("squat".into());
    squat.metadata.namespace = Some(team_a.clone());
    kube::Api::<TrainingPipeline>::namespaced(env.client.clone(), &team_a)
        .create(&PostParams::default(), &squat)
        .await
        .expect("team A's pipeline");
    let squat: TrainingPipeline = env
        .wait_for_in(&team_a, "squat", "Stalled", STEP, |tp: &TrainingPipeline| {
            let conditions = tp
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            find_condition(conditions, types::STALLED).is_some_and(|c| c.status == "True")
        })
        .await;
    let stalled = find_condition(&squat.status.unwrap().conditions, types::STALLED)
        .cloned()
        .unwrap();
    assert_eq!(stalled.reason, reasons::POLICY_DENIED, "{stalled:?}");

    // Creation times have whole seconds: the squatter must be the older one, as in the attack.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let mut victim = vertex_only(&format!("gs://{BUCKET}/models/victim/"));
    victim.metadata.name = Some("victim".into());
    env.create(&victim).await;
    let victim = crate::vertex_training::training(&env, "victim").await;
    let conditions = &victim.status.as_ref().unwrap().conditions;
    assert!(
        find_condition(conditions, types::STALLED).is_none_or(|c| c.reason != reasons::ARTIFACTS_IN_USE),
        "team B waited for a claim team A's policy refuses: {conditions:?}"
    );
    assert_eq!(
        env.gcp.call_count("vertex", "customJobs.create"),
        1,
        "team B's job only"
    );
}
