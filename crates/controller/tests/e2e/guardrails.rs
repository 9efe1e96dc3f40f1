//! Guardrails end to end (issue 10): tenancy policy, chip quota, budgets, idle reaping and the
//! orphan sweeper, through the real controllers against kube-emulator (or the real control plane)
//! and gcp-emulator. Policies are keyed by the test's namespace (`env.ns`), which is `default`
//! on kube-emulator and a generated one on the real server.

use std::{sync::Arc, time::Duration};

use kube::api::DeleteParams;
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    preprocess_batch::PreprocessBatch, tpu_policy::TpuPolicy, tpu_slice::TpuSlice,
    training_pipeline::TrainingPipeline,
};
use tpu_operator_controller::Context;

use crate::tenant;

use tenant::{is_ready, slice, slice_stalled, stalled};

const STEP: Duration = Duration::from_secs(20);

/// A TpuPolicy selecting only the test's namespace.
fn policy(env: &TestEnv, rules: serde_json::Value) -> Option<TpuPolicy> {
    Some(tenant::policy(&env.ns, rules))
}

fn policy_name(env: &TestEnv) -> String {
    tenant::policy_name(&env.ns)
}

/// Where messages name the policy's field `f`.
fn denied_by(env: &TestEnv, f: &str) -> String {
    format!("TpuPolicy {}, spec.{f}:", policy_name(env))
}

/// Creates `policy` through the API, then starts the three controllers (a fresh context, as
/// the operator builds it, watching the policies).
async fn start(env: &mut TestEnv, policy: Option<TpuPolicy>) -> Arc<Context> {
    if let Some(p) = policy {
        tenant::create_policy(&env.client, &p).await;
    }
    tenant::start(env, None).await
}

/// Whether a Warning event with `reason` about `name` shows up (Events follow the status write,
/// so this waits for one). `step` advances the cloud clock between polls.
async fn has_warning(env: &TestEnv, name: &str, reason: &str, step: Duration) -> bool {
    env.wait_for_event(name, reason, step)
        .await
        .iter()
        .any(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
}

#[tokio::test]
async fn policy_refusals_make_no_cloud_call() {
    let mut env = TestEnv::start().await;
    let p = policy(
        &env,
        json!({
            "defaultProject": "team-project",
            "allowedProjects": ["team-project"],
            "allowedRegions": ["us-east5"],
            "allowedZones": ["us-east5-b"],
            "allowedAccelerators": [{"family": "v6e", "maxChips": 8}],
            "allowedCapacity": ["spot", "queued"],
        }),
    );
    start(&mut env, p).await;
    slices_breaking_a_rule_are_refused_before_any_tpu_call(&env).await;
    batch_in_a_forbidden_region_is_refused(&env).await;
    on_demand_vertex_pipeline_is_refused(&env).await;
    slice_within_the_rules_is_created_in_the_default_project(&env).await;
}

/// One slice per broken rule is Stalled PolicyDenied with a Warning event, and no TPU call is made.
async fn slices_breaking_a_rule_are_refused_before_any_tpu_call(env: &TestEnv) {
    let cases = [
        (
            "project",
            json!({"project": "someone-elses"}),
            "allowedProjects",
            "project \"someone-elses\"; allowed: team-project",
        ),
        (
            "zone",
            json!({"zone": "us-east5-a"}),
            "allowedZones",
            "zone \"us-east5-a\"; allowed: us-east5-b",
        ),
        (
            "family",
            json!({"acceleratorType": "v5p-8"}),
            "allowedAccelerators",
            "TPU v5p; allowed: v6e up to 8 chips",
        ),
        (
            "size",
            json!({"acceleratorType": "v6e-16"}),
            "allowedAccelerators",
            "16 chips of v6e",
        ),
        (
            "capacity",
            json!({"capacity": {"onDemand": {}}}),
            "allowedCapacity",
            "onDemand capacity; allowed: spot, queued",
        ),
    ];
    for (name, spec, _, _) in &cases {
        env.create(&slice(name, spec.clone())).await;
    }
    for (name, _, field, fragment) in &cases {
        let s: TpuSlice = env
            .wait_for(name, "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
            .await;
        let (reason, message) = slice_stalled(&s).unwrap();
        assert_eq!(reason, "PolicyDenied", "{name}: {message}");
        assert!(
            message.contains(&denied_by(env, field)) && message.contains(fragment),
            "{name}: {message}"
        );
        assert!(has_warning(env, name, "PolicyDenied", STEP).await, "{name}");
    }
    // Refused before any cloud read: not one TPU call.
    env.idle(Duration::from_millis(300), STEP).await;
    let tpu_calls: Vec<_> = env
        .gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "tpu")
        .collect();
    assert!(tpu_calls.is_empty(), "{tpu_calls:#?}");
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 0);
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 0);
}

/// A Dataproc batch in a region the namespace may not use is refused without a create.
async fn batch_in_a_forbidden_region_is_refused(env: &TestEnv) {
    let batch: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": "eu-batch"},
        "spec": {"region": "europe-west4", "pyspark": {"mainPythonFileUri": "gs://b/s.py"}}
    }))
    .unwrap();
    env.create(&batch).await;
    let b: PreprocessBatch = env
        .wait_for("eu-batch", "PolicyDenied", STEP, |b: &PreprocessBatch| {
            b.status.as_ref().and_then(|s| stalled(&s.conditions)).is_some()
        })
        .await;
    let (reason, message) = stalled(&b.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains("allowedRegions") && message.contains("europe-west4"),
        "{message}"
    );
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 0);
}

/// A Vertex pipeline on on-demand capacity (only spot and queued are allowed) is refused.
async fn on_demand_vertex_pipeline_is_refused(env: &TestEnv) {
    // The project comes from the namespace default.
    let tp: TrainingPipeline = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": "ondemand"},
        "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://team-project-data/models/a/"},
                 "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x2",
                                         "container": {"image": "us-docker.pkg.dev/p/r/t:1"}}}}
    }))
    .unwrap();
    env.create(&tp).await;
    let tp: TrainingPipeline = env
        .wait_for("ondemand", "PolicyDenied", STEP, |t: &TrainingPipeline| {
            t.status.as_ref().and_then(|s| stalled(&s.conditions)).is_some()
        })
        .await;
    let (reason, message) = stalled(&tp.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains("allowedCapacity") && message.contains("Vertex custom job"),
        "{message}"
    );
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
    assert!(has_warning(env, "ondemand", "PolicyDenied", STEP).await);
}

/// The same slice within the rules is created, in the namespace's default project.
async fn slice_within_the_rules_is_created_in_the_default_project(env: &TestEnv) {
    env.create(&slice("allowed", json!({}))).await;
    let s: TpuSlice = env.wait_for("allowed", "Ready", STEP, is_ready).await;
    let node = s.status.unwrap().node_name.unwrap();
    assert!(
        node.starts_with("projects/team-project/locations/us-east5-b/nodes/"),
        "{node}"
    );
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
}

#[tokio::test]
async fn chip_quota_counts_across_slices() {
    let mut env = TestEnv::start().await;
    let p = policy(&env, json!({"maxChips": 12}));
    start(&mut env, p).await;
    env.create(&slice("first", json!({}))).await;
    env.wait_for::<TpuSlice, _>("first", "Ready", STEP, is_ready)
        .await;

    env.create(&slice("second", json!({}))).await;
    let s: TpuSlice = env
        .wait_for("second", "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
        .await;
    let (reason, message) = slice_stalled(&s).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains("maxChips")
            && message.contains("already uses 8 (TpuSlice first (8 chips")
            && message.contains("allowed at once: 12"),
        "{message}"
    );
    // It stays refused (and uncreated) while the first one runs.
    env.idle(Duration::from_millis(500), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);

    env.api::<TpuSlice>()
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("first", STEP).await;
    let s: TpuSlice = env
        .wait_for("second", "Ready once first is gone", STEP, is_ready)
        .await;
    assert!(slice_stalled(&s).is_none());
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 2);
    assert_eq!(env.gcp.nodes().len(), 1);
}

/// Creates a TPU node directly through the TPU API, behind the operator's back.
async fn node_behind_the_back(ctx: &Context, id: &str, labels: &[(&str, &str)]) -> String {
    node_in(ctx, "us-east5-b", id, labels).await
}

/// A spot v6e-8 node created directly in `zone` of `demo-project`.
async fn node_in(ctx: &Context, zone: &str, id: &str, labels: &[(&str, &str)]) -> String {
    use tpu_operator_gcp::tpu_v2::model::{Node, SchedulingConfig};
    let node = Node::new()
        .set_accelerator_type("v6e-8")
        .set_runtime_version("v2-alpha-tpuv6e")
        .set_scheduling_config(SchedulingConfig::new().set_spot(true))
        .set_labels(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let parent = format!("projects/demo-project/locations/{zone}");
    ctx.gcp
        .tpu
        .create_node(&parent, id, node)
        .await
        .expect("create a node directly");
    format!("{parent}/nodes/{id}")
}

/// The node `name` as gcp-emulator holds it, if it exists.
fn cloud_node(env: &TestEnv, name: &str) -> Option<serde_json::Value> {
    env.gcp.nodes().into_iter().find(|n| n["name"] == name)
}

/// Issue 20: `spec.adoptNodeId` names any node the operator can reach. A node carrying another
/// owner's operator labels is never adopted (even without a tenancy policy): not relabelled, not
/// rewritten, and not deleted with the slice.
#[tokio::test]
async fn adoption_of_another_owners_node_is_refused_and_the_node_left_alone() {
    let mut env = TestEnv::start().await;
    let p = policy(&env, json!({"allowAdoption": true}));
    let ctx = start(&mut env, p).await;
    let theirs = [
        ("managed-by", "tpu-operator"),
        ("tpu-operator-cluster", "test-cluster"),
        ("tpu-operator-namespace", "team-b"),
        ("tpu-operator-name", "their-slice"),
        ("tpu-operator-uid", "0badc0de-0000-4000-8000-000000000000"),
    ];
    let node = node_in(&ctx, "us-east5-b", "team-b-node", &theirs).await;
    env.create(&slice("grab", json!({"adoptNodeId": "team-b-node"})))
        .await;
    let s: TpuSlice = env
        .wait_for("grab", "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
        .await;
    let (reason, message) = slice_stalled(&s).unwrap();
    assert_eq!(reason, "PolicyDenied", "{message}");
    assert!(
        message.starts_with("adoption refused: node ")
            && message.contains("tpu-operator-uid=0badc0de-0000-4000-8000-000000000000")
            && message.contains("owner: team-b/their-slice"),
        "{message}"
    );
    assert!(has_warning(&env, "grab", "PolicyDenied", STEP).await);
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.patch"), 0, "never relabelled");
    assert_eq!(
        cloud_node(&env, &node).unwrap()["labels"]["tpu-operator-name"],
        "their-slice"
    );

    // Deleting the refused slice leaves the other owner's node in place.
    env.api::<TpuSlice>()
        .delete("grab", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("grab", STEP).await;
    env.idle(Duration::from_millis(200), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
    assert!(
        cloud_node(&env, &node).is_some(),
        "the other owner's node is kept"
    );
}

/// Issue 20: adoption goes through the namespace's policy: refused where `allowAdoption` is not
/// set, refused outside the allowed zones (before any cloud call), refused when the node itself
/// breaks a rule (its real service account), and allowed for an unlabelled node within the
/// rules, which is then the slice's (labelled, and deleted with it).
#[tokio::test]
async fn adoption_follows_the_namespace_policy() {
    let mut env = TestEnv::start().await;

    let rules = json!({
        "allowAdoption": true,
        "allowedZones": ["us-east5-b"],
        "allowedAccelerators": [{"family": "v6e", "maxChips": 8}],
        "allowedServiceAccounts": ["*-compute@developer.gserviceaccount.com"],
    });
    let p = policy(&env, rules);
    let ctx = start(&mut env, p).await;
    let elsewhere = node_in(&ctx, "us-east5-a", "zone-a-node", &[]).await;
    let free = node_in(&ctx, "us-east5-b", "free-node", &[("team", "ml")]).await;
    env.idle(Duration::from_millis(100), STEP).await;
    let calls_before = env.gcp.call_count("tpu", "nodes.get");

    env.create(&slice(
        "wrong-zone",
        json!({"zone": "us-east5-a", "adoptNodeId": "zone-a-node"}),
    ))
    .await;
    let s: TpuSlice = env
        .wait_for("wrong-zone", "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
        .await;
    let (reason, message) = slice_stalled(&s).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains(&denied_by(&env, "allowedZones")) && message.contains("zone \"us-east5-a\""),
        "{message}"
    );
    env.idle(Duration::from_millis(200), STEP).await;
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.get"),
        calls_before,
        "refused before the node is read"
    );

    env.create(&slice("ours", json!({"adoptNodeId": "free-node"})))
        .await;
    let s: TpuSlice = env.wait_for("ours", "Ready", STEP, is_ready).await;
    assert_eq!(s.status.unwrap().node_name.as_deref(), Some(free.as_str()));
    env.until("the adopted node labelled", STEP, async || {
        cloud_node(&env, &free).unwrap()["labels"]["managed-by"] == "tpu-operator"
    })
    .await;
    let uid = env
        .api::<TpuSlice>()
        .get("ours")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert_eq!(
        cloud_node(&env, &free).unwrap()["labels"]["tpu-operator-uid"],
        uid.as_str()
    );
    env.api::<TpuSlice>()
        .delete("ours", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("ours", STEP).await;
    assert!(
        cloud_node(&env, &free).is_none(),
        "an adopted node is deleted with its slice"
    );
    assert!(cloud_node(&env, &elsewhere).is_some());
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        2,
        "only the test's own"
    );
}

/// Issue 20: a namespace whose policy does not say `allowAdoption: true` adopts nothing (refused
/// before the node is read) and deleting the slice leaves the node alone.
#[tokio::test]
async fn adoption_needs_allow_adoption() {
    let mut env = TestEnv::start().await;

    let p = policy(&env, json!({"allowedZones": ["us-east5-b"]}));
    let ctx = start(&mut env, p).await;
    let node = node_in(&ctx, "us-east5-b", "someone-elses", &[]).await;
    env.create(&slice("not-allowed", json!({"adoptNodeId": "someone-elses"})))
        .await;
    let s: TpuSlice = env
        .wait_for("not-allowed", "PolicyDenied", STEP, |s| {
            slice_stalled(s).is_some()
        })
        .await;
    let (_, message) = slice_stalled(&s).unwrap();
    assert!(message.contains(&denied_by(&env, "allowAdoption")), "{message}");
    env.idle(Duration::from_millis(200), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.patch"), 0);
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.get"),
        0,
        "refused before any read"
    );
    env.api::<TpuSlice>()
        .delete("not-allowed", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("not-allowed", STEP).await;
    assert!(cloud_node(&env, &node).is_some());
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
}

/// Issue 20: where adoption is allowed, the node is judged as the cloud reports it: one that runs
/// as the project's default compute account, which the namespace may not use, is refused.
#[tokio::test]
async fn adoption_judges_the_nodes_own_service_account() {
    let mut env = TestEnv::start().await;
    let p = policy(
        &env,
        json!({"allowAdoption": true, "allowedServiceAccounts": ["*@team.iam.gserviceaccount.com"]}),
    );
    let ctx = start(&mut env, p).await;
    let node = node_in(&ctx, "us-east5-b", "default-sa", &[]).await;
    env.create(&slice(
        "sa",
        json!({"adoptNodeId": "default-sa",
               "serviceAccount": {"email": "trainer@team.iam.gserviceaccount.com"}}),
    ))
    .await;
    let s: TpuSlice = env
        .wait_for("sa", "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
        .await;
    let (_, message) = slice_stalled(&s).unwrap();
    assert!(
        message.contains("allowedServiceAccounts:")
            && message.contains("-compute@developer.gserviceaccount.com"),
        "{message}"
    );
    env.idle(Duration::from_millis(200), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.patch"), 0);
    assert!(
        cloud_node(&env, &node).unwrap()["labels"]
            .get("managed-by")
            .is_none()
    );
}

/// Issue 20: service accounts and networks, for all three kinds, refused before any create.
#[tokio::test]
async fn service_accounts_and_networks_are_checked_for_all_three_kinds() {
    let mut env = TestEnv::start().await;

    let p = policy(
        &env,
        json!({
            "allowedServiceAccounts": ["*@team.iam.gserviceaccount.com"],
            "allowedNetworks": ["default", "team-*"],
            "allowedSubnetworks": ["team-*"],
        }),
    );
    start(&mut env, p).await;
    slices_with_a_forbidden_account_or_network_are_refused(&env).await;
    batch_with_a_forbidden_account_is_refused(&env).await;
    vertex_pipelines_with_a_forbidden_account_or_network_are_refused(&env).await;
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 0);
    assert_eq!(env.gcp.call_count("dataproc", "batches.create"), 0);
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
    slice_with_an_allowed_account_on_the_default_network_is_created(&env).await;
}

/// Slices running as a forbidden account, or on a forbidden network or subnetwork, are refused.
async fn slices_with_a_forbidden_account_or_network_are_refused(env: &TestEnv) {
    let field = |f: &str| denied_by(env, f);
    let cases = [
        (
            "owner-sa",
            json!({"serviceAccount": {"email": "owner@demo-project.iam.gserviceaccount.com"}}),
            field("allowedServiceAccounts"),
            "runs as service account \"owner@demo-project.iam.gserviceaccount.com\"",
        ),
        (
            "default-sa",
            json!({}),
            field("allowedServiceAccounts"),
            "the service's default service account",
        ),
        (
            "other-vpc",
            json!({"serviceAccount": {"email": "t@team.iam.gserviceaccount.com"},
                   "networkConfig": {"network": "projects/prod-host/global/networks/prod"}}),
            field("allowedNetworks"),
            "network \"projects/prod-host/global/networks/prod\"",
        ),
        (
            "other-subnet",
            json!({"serviceAccount": {"email": "t@team.iam.gserviceaccount.com"},
                   "networkConfig": {"network": "team-net", "subnetwork": "prod-subnet"}}),
            field("allowedSubnetworks"),
            "subnetwork \"projects/demo-project/regions/us-east5/subnetworks/prod-subnet\"",
        ),
    ];
    for (name, spec, _, _) in &cases {
        env.create(&slice(name, spec.clone())).await;
    }
    for (name, _, field, fragment) in &cases {
        let s: TpuSlice = env
            .wait_for(name, "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
            .await;
        let (reason, message) = slice_stalled(&s).unwrap();
        assert_eq!(reason, "PolicyDenied", "{name}: {message}");
        assert!(
            message.contains(field.as_str()) && message.contains(fragment),
            "{name}: {message}"
        );
    }
}

/// A Dataproc batch running as a forbidden service account is refused.
async fn batch_with_a_forbidden_account_is_refused(env: &TestEnv) {
    let batch: PreprocessBatch = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": "sa-batch"},
        "spec": {"region": "us-east5", "pyspark": {"mainPythonFileUri": "gs://b/s.py"},
                 "execution": {"serviceAccount": "owner@demo-project.iam.gserviceaccount.com",
                               "subnetworkUri": "team-subnet"}}
    }))
    .unwrap();
    env.create(&batch).await;
    let b: PreprocessBatch = env
        .wait_for("sa-batch", "PolicyDenied", STEP, |b: &PreprocessBatch| {
            b.status.as_ref().and_then(|s| stalled(&s.conditions)).is_some()
        })
        .await;
    let (reason, message) = stalled(&b.status.unwrap().conditions).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains(&denied_by(env, "allowedServiceAccounts"))
            && message.contains("owner@demo-project.iam.gserviceaccount.com"),
        "{message}"
    );
}

/// A Vertex TPU pipeline named `name`, with `vertex_extra` merged into its `training.vertex`.
fn vertex_pipeline(name: &str, vertex_extra: serde_json::Value) -> TrainingPipeline {
    let mut vertex = json!({"machineType": "ct6e-standard-4t", "tpuTopology": "2x2",
                            "container": {"image": "us-docker.pkg.dev/p/r/t:1"}});
    for (k, v) in vertex_extra.as_object().unwrap() {
        vertex[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": name},
        "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://team-data/models/$(PIPELINE_NAME)/"},
                 "training": {"vertex": vertex}}
    }))
    .unwrap()
}

/// Vertex pipelines running as a forbidden account, or on a forbidden network, are refused.
async fn vertex_pipelines_with_a_forbidden_account_or_network_are_refused(env: &TestEnv) {
    let field = |f: &str| denied_by(env, f);
    let vertex_cases = [
        (
            "vertex-sa",
            json!({"serviceAccount": "owner@demo-project.iam.gserviceaccount.com"}),
            field("allowedServiceAccounts"),
            "Vertex custom job",
        ),
        (
            "vertex-vpc",
            json!({"serviceAccount": "t@team.iam.gserviceaccount.com",
                   "network": "projects/123456/global/networks/prod"}),
            field("allowedNetworks"),
            "network \"projects/123456/global/networks/prod\"",
        ),
    ];
    for (name, extra, _, _) in &vertex_cases {
        env.create(&vertex_pipeline(name, extra.clone())).await;
    }
    for (name, _, field, fragment) in &vertex_cases {
        let tp: TrainingPipeline = env
            .wait_for(name, "PolicyDenied", STEP, |t: &TrainingPipeline| {
                t.status.as_ref().and_then(|s| stalled(&s.conditions)).is_some()
            })
            .await;
        let (reason, message) = stalled(&tp.status.unwrap().conditions).unwrap();
        assert_eq!(reason, "PolicyDenied", "{name}: {message}");
        assert!(
            message.contains(field.as_str()) && message.contains(fragment),
            "{name}: {message}"
        );
    }
}

/// Within the rules: an allowed account on the project's default network is created.
async fn slice_with_an_allowed_account_on_the_default_network_is_created(env: &TestEnv) {
    env.create(&slice(
        "allowed",
        json!({"serviceAccount": {"email": "trainer@team.iam.gserviceaccount.com"}}),
    ))
    .await;
    env.wait_for::<TpuSlice, _>("allowed", "Ready", STEP, is_ready)
        .await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
}

#[tokio::test]
async fn orphan_sweeper_reports_then_deletes_only_our_orphans() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use tpu_operator_controller::sweeper::{Mode, SUMMARY_CONFIGMAP, Sweeper, SweeperConfig};

    let mut env = TestEnv::start().await;
    let ctx = start(&mut env, None).await;
    env.create(&slice("kept", json!({}))).await;
    let kept = env.wait_for::<TpuSlice, _>("kept", "Ready", STEP, is_ready).await;
    let kept_node = kept.status.unwrap().node_name.unwrap();

    let ns = env.ns.clone();
    let ours = |cluster: &'static str| {
        vec![
            ("managed-by", "tpu-operator"),
            ("tpu-operator-cluster", cluster),
            ("tpu-operator-namespace", ns.as_str()),
            ("tpu-operator-name", "forgotten"),
            ("tpu-operator-uid", "0badc0de-0000-4000-8000-000000000000"),
        ]
    };
    let orphan = node_behind_the_back(&ctx, "orphan", &ours("test-cluster")).await;
    let unlabelled = node_behind_the_back(&ctx, "unlabelled", &[("team", "ml")]).await;
    let foreign = node_behind_the_back(&ctx, "other-cluster", &ours("another-cluster")).await;
    env.idle(Duration::from_millis(50), STEP).await;

    let config = SweeperConfig {
        mode: Mode::Report,
        projects: vec!["demo-project".into()],
        zones: vec!["us-east5-b".into()],
        regions: vec!["us-east5".into()],
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    };
    // Report mode: found, reported (metric, summary ConfigMap, Warning event), never deleted.
    let report = Sweeper::new(config.clone()).sweep(&ctx).await.expect("sweep");
    let names: Vec<_> = report.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, [orphan.as_str()], "{report:#?}");
    assert!(
        report.deleted.is_empty() && report.errors.is_empty(),
        "{report:#?}"
    );
    let cm = env
        .api::<ConfigMap>()
        .get(SUMMARY_CONFIGMAP)
        .await
        .expect("summary ConfigMap");
    let data = cm.data.unwrap();
    assert_eq!(data["count"], "1");
    assert!(
        data["orphans"].contains(&orphan) && data["orphans"].contains("uid=0badc0de"),
        "{data:?}"
    );
    let gauge = ctx
        .metrics
        .orphans
        .get_or_create(&tpu_operator_controller::runtime::metrics::OrphanLabels { kind: "tpu.node" })
        .get();
    assert_eq!(gauge, 1);
    assert!(has_warning(&env, SUMMARY_CONFIGMAP, "OrphanFound", Duration::ZERO).await);

    // Delete mode: only after the grace period.
    let sweeper = Sweeper::new(SweeperConfig {
        mode: Mode::Delete,
        grace: Duration::from_secs(15 * 60),
        ..config
    });
    let first = sweeper.sweep(&ctx).await.expect("sweep");
    assert_eq!(first.orphans.len(), 1);
    assert!(first.deleted.is_empty(), "grace period: {first:#?}");
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
    env.gcp.clock().advance(Duration::from_secs(14 * 60));
    assert!(sweeper.sweep(&ctx).await.unwrap().deleted.is_empty());
    env.gcp.clock().advance(Duration::from_secs(2 * 60));
    let due = sweeper.sweep(&ctx).await.expect("sweep");
    assert_eq!(due.deleted, std::slice::from_ref(&orphan), "{due:#?}");
    // Its deletion ends in emulated time: waited for with the clock moving, not for 200 ms of
    // real time (which a busy machine filled with too few steps to end it).
    let left = env
        .until("the orphan's node deleted", STEP, async || {
            let left: Vec<String> = env
                .gcp
                .nodes()
                .iter()
                .map(|n| n["name"].as_str().unwrap().to_string())
                .collect();
            if left.contains(&orphan) {
                Err(left)
            } else {
                Ok(left)
            }
        })
        .await;
    for keep in [&unlabelled, &foreign, &kept_node] {
        assert!(left.contains(keep), "{keep} must be left alone: {left:?}");
    }
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 1);
    assert!(sweeper.sweep(&ctx).await.unwrap().orphans.is_empty());
    assert!(has_warning(&env, SUMMARY_CONFIGMAP, "OrphanDeleted", Duration::ZERO).await);
}

#[tokio::test]
async fn budget_refuses_new_slices_while_running_ones_keep_running_and_cost_accrues() {
    let mut env = TestEnv::start().await;
    // One v6e-8 spot slice is $10.80/h at the built-in list prices; two would be $21.60/h.
    let p = policy(&env, json!({"maxSpendPerHourUsd": 15}));
    let ctx = start(&mut env, p).await;
    env.create(&slice("running", json!({}))).await;
    let s = env
        .wait_for::<TpuSlice, _>("running", "Ready", STEP, is_ready)
        .await;
    let cost = s.status.unwrap().estimated_cost.expect("estimatedCost");
    assert_eq!(
        (cost.per_hour_usd, cost.price_key.as_deref()),
        (10.8, Some("tpu-v6e-spot"))
    );

    // An hour of READY time later the estimate has grown by about $10.80.
    let before = cost.so_far_usd;
    env.gcp.clock().advance(Duration::from_secs(3600));
    // The clock stands still while waiting (step zero): advancing it per poll would add however
    // many steps a loaded machine needs before the next status refresh.
    let s = env
        .wait_for::<TpuSlice, _>("running", "an hour accrued", Duration::ZERO, |s| {
            s.status
                .as_ref()
                .and_then(|st| st.estimated_cost.as_ref())
                .is_some_and(|c| c.so_far_usd >= before + 10.8 - 0.005) // rounded to cents
        })
        .await;
    let so_far = s.status.unwrap().estimated_cost.unwrap().so_far_usd;
    assert!(so_far < before + 10.8 + 1.0, "{so_far}");

    env.create(&slice("second", json!({}))).await;
    let s: TpuSlice = env
        .wait_for("second", "PolicyDenied", STEP, |s| slice_stalled(s).is_some())
        .await;
    let (reason, message) = slice_stalled(&s).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains(
            "maxSpendPerHourUsd: budget: TpuSlice (v6e-8 in us-east5-b) would add $10.80/h to the $10.80/h"
        ) && message.contains("budget: $15.00/h"),
        "{message}"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        1,
        "the refused slice made no create call"
    );
    let nodes = env.gcp.nodes();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["state"], "READY", "the running slice keeps running");
    let running: TpuSlice = env.api().get("running").await.unwrap();
    assert!(is_ready(&running));

    let labels = tpu_operator_controller::runtime::metrics::SpendLabels {
        namespace: env.ns.clone(),
    };
    assert_eq!(ctx.metrics.spend_per_hour_usd.get_or_create(&labels).get(), 10.8);
    assert!(ctx.metrics.spend_usd.get_or_create(&labels).get() >= 10.8);
}
