//! The red-team suite's attacks that already hold (issue 32), kept holding: a tenant of one
//! namespace, with what the chart's aggregated `edit` role lets it write (its objects' spec,
//! metadata, labels, annotations, ownerReferences and finalizers; never their status), tries to
//! make the operator act outside its namespace's `TpuPolicy` or on another owner's cloud
//! resources. Each test plays one attack through the real path (CR → controller → gcp-emulator →
//! status) and asserts that nothing outside the policy reached the cloud: quota races, service
//! account look-alikes, foreign networks in short forms, adoption of another owner's node, label
//! spoofing, edits after admission, status forgery, name collisions across namespaces and
//! squatting a pipeline's child names.
//!
//! Runs on kube-emulator and, in CI, on the real kube-apiserver. A second tenant ("team B") is
//! the namespace `<env.ns>-b` with an operator context of its own scoped to it, so the
//! cross-namespace attacks run on the shared real server too (a context watching every namespace
//! would reconcile the other tests' objects there). Each team acts as its tenant
//! ([`crate::tenant::as_tenant`]): on the real server its namespace's `edit` ServiceAccount under
//! the chart's aggregated roles, so a write RBAC refuses (another namespace's objects, `status`)
//! is asserted refused; policies and namespaces are the administrator's. The escapes themselves are played in
//! `hostile_tenant.rs`, `hostile_references.rs` (network path traversal, foreign reservations,
//! images and buckets) and `sweeper.rs`.

use std::{sync::Arc, time::Duration};

use gcp_emulator::calls::CallRecord;
use k8s_openapi::{
    api::core::v1::Namespace,
    apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use test_kit::{ContextSpec, NamespacedObject, Polls, Tenant, TestEnv};
use tpu_operator_api::{
    conditions::{find_condition, types},
    preprocess_batch::PreprocessBatch,
    tpu_policy::TpuPolicy,
    tpu_slice::TpuSlice,
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_controller::{
    Context,
    governance::tenancy::WithoutPolicy,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

use crate::tenant::{as_tenant, as_tenant_in};

const STEP: Duration = Duration::from_secs(20);
const TEAM_A_SA: &str = "*@team-a.iam.gserviceaccount.com";

// ---------------------------------------------------------------------------------------------
// Fixtures

fn slice(name: &str, extra: Value) -> TpuSlice {
    let mut spec = json!({
        "zone": "us-east5-b",
        "acceleratorType": "v6e-8",
        "runtimeVersion": "v2-alpha-tpuv6e",
        "capacity": {"spot": {}},
    });
    merge(&mut spec, extra);
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("TpuSlice fixture")
}

/// A Vertex TPU pipeline (v6e, 2x2 = 4 chips unless `vertex_extra` says otherwise).
fn vertex_pipeline(name: &str, vertex_extra: Value) -> TrainingPipeline {
    let mut vertex = json!({"machineType": "ct6e-standard-4t", "tpuTopology": "2x2",
                            "container": {"image": "us-docker.pkg.dev/p/r/t:1"}});
    merge(&mut vertex, vertex_extra);
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": name},
        "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://team-a-data/models/$(PIPELINE_NAMESPACE)/$(PIPELINE_NAME)/"},
                 "training": {"vertex": vertex}}
    }))
    .expect("TrainingPipeline fixture")
}

/// A Vertex pipeline with a preprocessing stage (its child `<name>-preprocess`).
fn preprocessing_pipeline(name: &str) -> TrainingPipeline {
    let mut tp = vertex_pipeline(name, json!({}));
    tp.spec.artifacts.processed_data = Some("gs://team-a-data/processed/".into());
    tp.spec.preprocess = Some(
        serde_json::from_value(json!({"pyspark": {"mainPythonFileUri": "gs://team-a-data/s.py"}}))
            .expect("preprocess template"),
    );
    tp
}

/// A TPU VM pipeline training on a v6e-8 spot slice in us-east5-b (its child `<name>-train`).
fn tpu_vm_pipeline(name: &str) -> TrainingPipeline {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": name},
        "spec": {"region": "us-east5", "maxRetries": 1,
                 "artifacts": {"modelDir": "gs://team-a-data/models/vm/$(PIPELINE_NAME)/"},
                 "training": {"tpuVm": {
                     "slice": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                               "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
                     "container": {"image": "us-docker.pkg.dev/p/r/t:1"}}}}
    }))
    .expect("TrainingPipeline fixture")
}

fn batch(name: &str, spec_extra: Value) -> PreprocessBatch {
    let mut spec = json!({"region": "us-east5", "pyspark": {"mainPythonFileUri": "gs://team-a-data/s.py"}});
    merge(&mut spec, spec_extra);
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "PreprocessBatch",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("PreprocessBatch fixture")
}

fn merge(into: &mut Value, extra: Value) {
    for (k, v) in extra.as_object().expect("an object").clone() {
        into[k] = v;
    }
}

/// A TpuPolicy selecting only `ns`, named after it (policies are cluster-scoped: tests sharing a
/// real API server never see each other's).
fn policy(ns: &str, rules: Value) -> TpuPolicy {
    let mut spec = crate::tenant::every_bucket_unless_scoped(rules);
    spec["namespaces"] = json!([ns]);
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
        "metadata": {"name": format!("pol-{ns}")}, "spec": spec,
    }))
    .expect("policy")
}

/// How a refusal by `ns`'s policy names its field `f`.
fn denied_by(ns: &str, f: &str) -> String {
    format!("denied by TpuPolicy pol-{ns}, spec.{f}:")
}

async fn create_policy(client: &kube::Client, ns: &str, rules: Value) {
    Api::<TpuPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy(ns, rules))
        .await
        .expect("create the TpuPolicy");
}

fn spawn_controllers(env: &mut TestEnv, ctx: &Arc<Context>) {
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
}

/// Team A (`env.ns`): creates its policy, then starts the three controllers with a fresh context.
/// Returns team A's tenant, who plays the attacks.
async fn start(env: &mut TestEnv, rules: Value) -> Tenant {
    create_policy(&env.client, &env.ns, rules).await;
    let ctx = Arc::new(env.context().await);
    spawn_controllers(env, &ctx);
    as_tenant(env).await
}

/// Team B: the namespace `<env.ns>-b` with its own policy `rules` and the three controllers of
/// an operator context scoped to it (same cluster id, same cloud). Returns team B's tenant (its
/// `ns` is the namespace).
async fn start_team_b(env: &mut TestEnv, rules: Value) -> Tenant {
    let ns = format!("{}-b", env.ns);
    let namespaces = Api::<Namespace>::all(env.client.clone());
    if namespaces.get_opt(&ns).await.expect("get namespace").is_none() {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .expect("create team B's namespace");
    }
    create_policy(&env.client, &ns, rules).await;
    let spec = ContextSpec {
        cluster_id: "test-cluster".into(),
        default_project: "demo-project".into(),
        namespace: Some(ns.clone()),
        concurrency: 8,
        polls: Polls::fast(),
        tenancy: Some(WithoutPolicy::Allow),
    };
    let ctx = Arc::new(spec.build(&env.client, &env.gcp).await.expect("team B's context"));
    spawn_controllers(env, &ctx);
    as_tenant_in(env, &ns).await
}

// ---------------------------------------------------------------------------------------------
// Reading verdicts

/// The kinds whose kstatus conditions the tests read.
trait Conditioned: NamespacedObject {
    fn conditions(&self) -> &[Condition];
}

impl Conditioned for TpuSlice {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Conditioned for TrainingPipeline {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Conditioned for PreprocessBatch {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// `Stalled=True`'s (reason, message).
fn stalled<K: Conditioned>(o: &K) -> Option<(String, String)> {
    find_condition(o.conditions(), types::STALLED)
        .filter(|c| c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

fn is_ready<K: Conditioned>(o: &K) -> bool {
    find_condition(o.conditions(), types::READY).is_some_and(|c| c.status == "True")
}

/// Polls `name` in `ns` until `pred` holds, advancing the cloud clock by `step` between polls
/// (bounded by the suite's wait limit, as `TestEnv::wait_for_in`).
async fn wait_in<K: NamespacedObject>(
    env: &TestEnv,
    ns: &str,
    name: &str,
    what: &str,
    step: Duration,
    pred: impl Fn(&K) -> bool,
) -> K {
    env.wait_for_in(ns, name, &format!("{ns}/{name}: {what}"), step, pred)
        .await
}

/// Waits for `name` (in `env.ns`) to be refused by the controller, and returns the message.
async fn wait_denied<K: Conditioned>(env: &TestEnv, name: &str) -> String {
    let o: K = wait_in(env, &env.ns, name, "PolicyDenied", STEP, |o: &K| {
        stalled(o).is_some()
    })
    .await;
    let (reason, message) = stalled(&o).expect("stalled");
    assert_eq!(reason, "PolicyDenied", "{name}: {message}");
    message
}

async fn wait_ready<K: Conditioned>(env: &TestEnv, ns: &str, name: &str) -> K {
    wait_in(env, ns, name, "Ready", STEP, is_ready::<K>).await
}

/// Creates `obj` as `tenant` expecting the API server itself to refuse it (a CRD validation rule,
/// 422, not RBAC), and returns the server's message.
async fn api_refuses<K: NamespacedObject>(tenant: &Tenant, obj: &K) -> String {
    let api = tenant.api::<K>();
    match api.create(&PostParams::default(), obj).await {
        Err(kube::Error::Api(e)) if e.code == 422 => e.message,
        other => panic!(
            "{:?} was not refused by the API server: {other:?}",
            obj.meta().name
        ),
    }
}

/// A merge patch of `name`'s main resource (what a tenant's `kubectl patch` / `apply` sends).
async fn tenant_patch<K: NamespacedObject>(
    tenant: &Tenant,
    name: &str,
    patch: &Value,
) -> Result<K, kube::Error> {
    tenant
        .api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// The node `name` (full resource name) as gcp-emulator holds it.
fn cloud_node(env: &TestEnv, name: &str) -> Option<Value> {
    env.gcp.nodes().into_iter().find(|n| n["name"] == name)
}

/// Every mutating TPU call (create, patch, delete of nodes and queued resources) on a path
/// containing `needle`.
fn tpu_writes_on(env: &TestEnv, needle: &str) -> Vec<CallRecord> {
    env.gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "tpu" && c.http_method != "GET" && c.path.contains(needle))
        .collect()
}

/// Creates, billable or not, anywhere in the cloud: TPU nodes and queued resources, Dataproc
/// batches, Vertex custom jobs, Compute Engine instances.
fn cloud_creates(env: &TestEnv) -> u64 {
    env.gcp
        .call_counts()
        .iter()
        .filter(|(k, _)| k.ends_with(".create") || k.ends_with(".insert"))
        .filter(|(k, _)| !k.starts_with("storage."))
        .map(|(_, n)| n)
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Quota races

/// With `maxChips: 8` and nothing running, four 8-chip slices are created at the same instant:
/// the namespace's admission lock and usage book let exactly one through. One node is ever
/// created; the other three are refused (`maxChips`, naming the winner) and stay refused while
/// it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_racing_for_one_quota_get_one_node() {
    const RACERS: usize = 4;
    let mut env = TestEnv::start().await;
    let tenant = start(&mut env, json!({"maxChips": 8})).await;
    let api = tenant.api::<TpuSlice>();
    let creates = (0..RACERS).map(|i| {
        let (api, s) = (api.clone(), slice(&format!("racer-{i}"), json!({})));
        tokio::spawn(async move { api.create(&PostParams::default(), &s).await })
    });
    for created in futures::future::join_all(creates).await {
        created.expect("join").expect("create a racer");
    }
    let (winner, denied) = env
        .until("one racer Ready, the others refused", STEP, async || {
            let all = api.list(&Default::default()).await.unwrap().items;
            let ready: Vec<_> = all.iter().filter(|s| is_ready(*s)).collect();
            let denied: Vec<_> = all.iter().filter_map(stalled).collect();
            let seen = format!("{} Ready, {} refused", ready.len(), denied.len());
            assert!(ready.len() <= 1, "{seen}");
            if ready.len() == 1 && denied.len() == RACERS - 1 {
                Ok((ready[0].name_any(), denied))
            } else {
                Err(seen)
            }
        })
        .await;
    for (reason, message) in &denied {
        assert_eq!(reason, "PolicyDenied", "{message}");
        assert!(
            message.contains(&denied_by(&env.ns, "maxChips"))
                && message.contains(&format!("TpuSlice {winner} (8 chips")),
            "{message}"
        );
    }
    // The losers look again every poll_capacity: still refused while the winner runs.
    env.idle(Duration::from_secs(1), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1, "one node, ever");
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 0);
    assert_eq!(env.gcp.nodes().len(), 1);
    let ready = api.list(&Default::default()).await.unwrap().items;
    assert_eq!(ready.iter().filter(|s| is_ready(*s)).count(), 1);
}

/// The same race across kinds: an 8-chip Vertex pipeline (ct6e 2x4) and an 8-chip slice created
/// at once under `maxChips: 8`. Both controllers admit under the same namespace lock: exactly one
/// of the Vertex job and the node is created, the other object is refused. The cloud clock stands
/// still, so the winner keeps holding its chips (a queued job, a provisioning node) throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_racing_a_slice_for_one_quota_gets_one_create() {
    let mut env = TestEnv::start().await;
    let tenant = start(&mut env, json!({"maxChips": 8})).await;
    let (pipelines, slices) = (tenant.api::<TrainingPipeline>(), tenant.api::<TpuSlice>());
    let pp = PostParams::default();
    let (job, node) = (
        vertex_pipeline("racer-job", json!({"tpuTopology": "2x4"})),
        slice("racer-node", json!({})),
    );
    let (p, s) = tokio::join!(pipelines.create(&pp, &job), slices.create(&pp, &node));
    p.expect("create the pipeline");
    s.expect("create the slice");
    let creates = |env: &TestEnv| {
        env.gcp.call_count("vertex", "customJobs.create") + env.gcp.call_count("tpu", "nodes.create")
    };
    let denial = env
        .until("one create, the other refused", Duration::ZERO, async || {
            let p = pipelines.get("racer-job").await.unwrap();
            let s = slices.get("racer-node").await.unwrap();
            let verdicts = [stalled(&p), stalled(&s)];
            let refused: Vec<_> = verdicts.iter().flatten().collect();
            let seen = format!("{verdicts:?}; creates {:?}", env.gcp.call_counts());
            assert!(refused.len() < 2 && creates(&env) <= 1, "{seen}");
            if refused.len() == 1 && creates(&env) == 1 {
                Ok(refused[0].clone())
            } else {
                Err(seen)
            }
        })
        .await;
    assert_eq!(denial.0, "PolicyDenied", "{}", denial.1);
    assert!(denial.1.contains(&denied_by(&env.ns, "maxChips")), "{}", denial.1);
    env.idle(Duration::from_secs(1), Duration::ZERO).await;
    assert_eq!(creates(&env), 1, "{:?}", env.gcp.call_counts());
    assert_eq!(env.gcp.custom_jobs().len() + env.gcp.nodes().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Identity and networks

/// `allowedServiceAccounts: ["*@team-a.iam.gserviceaccount.com"]` against e-mails that look like
/// team A's: a longer domain, a domain ending in `team-a`, upper case around a foreign domain, a
/// trailing dot, the default account, for slices, a Vertex pipeline and a Dataproc batch. Each
/// is refused by the controller before any create; an empty e-mail or local part is refused by
/// the API server. A real team-A account in upper case is team A's (e-mails compare without
/// case) and is the only thing created.
#[tokio::test]
async fn service_account_look_alikes_are_refused() {
    let mut env = TestEnv::start().await;
    let tenant = start(&mut env, json!({"allowedServiceAccounts": [TEAM_A_SA]})).await;
    let look_alikes = [
        ("sa-longer", "x@team-a.iam.gserviceaccount.com.evil.com"),
        ("sa-hyphen", "x@evil-team-a.iam.gserviceaccount.com"),
        ("sa-glued", "x@evilteam-a.iam.gserviceaccount.com"),
        ("sa-upper", "X@TEAM-A.IAM.GSERVICEACCOUNT.COM.EVIL.COM"),
        ("sa-dot", "x@team-a.iam.gserviceaccount.com."),
        (
            "sa-sub",
            "x@team-a.iam.gserviceaccount.com.team-a.iam.gserviceaccount.co",
        ),
    ];
    let sa = |email: &str| json!({"serviceAccount": {"email": email}});
    for (name, email) in look_alikes {
        tenant.create(&slice(name, sa(email))).await;
    }
    tenant.create(&slice("sa-default", json!({}))).await;
    let vertex = vertex_pipeline(
        "sa-vertex",
        json!({"serviceAccount": "trainer@team-a.iam.gserviceaccount.com.evil.com"}),
    );
    tenant.create(&vertex).await;
    let etl = batch(
        "sa-batch",
        json!({"execution": {"serviceAccount": "etl@evil-team-a.iam.gserviceaccount.com"}}),
    );
    tenant.create(&etl).await;

    let field = denied_by(&env.ns, "allowedServiceAccounts");
    for (name, email) in look_alikes {
        let message = wait_denied::<TpuSlice>(&env, name).await;
        assert!(
            message.contains(&field) && message.contains(&format!("service account \"{email}\"")),
            "{name}: {message}"
        );
    }
    let message = wait_denied::<TpuSlice>(&env, "sa-default").await;
    assert!(
        message.contains("the service's default service account"),
        "{message}"
    );
    for message in [
        wait_denied::<TrainingPipeline>(&env, "sa-vertex").await,
        wait_denied::<PreprocessBatch>(&env, "sa-batch").await,
    ] {
        assert!(message.contains(&field), "{message}");
    }
    for email in ["", "@team-a.iam.gserviceaccount.com"] {
        let message = api_refuses(&tenant, &slice("sa-empty", sa(email))).await;
        assert!(message.contains("serviceAccount.email"), "{message}");
    }

    tenant
        .create(&slice("sa-real", sa("Trainer@TEAM-A.iam.gserviceaccount.com")))
        .await;
    let real: TpuSlice = wait_ready(&env, &env.ns, "sa-real").await;
    let node = cloud_node(&env, &real.status.unwrap().node_name.unwrap()).unwrap();
    assert_eq!(
        node["serviceAccount"]["email"],
        "Trainer@TEAM-A.iam.gserviceaccount.com"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(cloud_creates(&env), 1, "{:?}", env.gcp.call_counts());
}

/// `allowedNetworks` / `allowedSubnetworks: ["team-a-*"]` in project `team-a-proj` against
/// foreign networks in the short and full forms (path traversal and foreign hosts are in
/// `hostile_references.rs`): another name, a name that only starts like team A's, team A's name
/// in another project (by path and by URL), foreign subnetworks, for all three kinds. Each is
/// refused before any create; team A's own network is the only thing created.
#[tokio::test]
async fn foreign_networks_in_short_forms_are_refused() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"defaultProject": "team-a-proj", "allowedProjects": ["team-a-proj"],
               "allowedNetworks": ["team-a-*"], "allowedSubnetworks": ["team-a-*"]}),
    )
    .await;
    let net = |network: &str, subnetwork: Option<&str>| {
        let mut config = json!({"network": network});
        if let Some(s) = subnetwork {
            config["subnetwork"] = json!(s);
        }
        json!({"networkConfig": config})
    };
    let other_project = "projects/team-b-proj/global/networks/team-a-net";
    let cases = [
        ("net-bare", net("team-b-net", None), "allowedNetworks"),
        (
            "net-global",
            net("global/networks/team-b-net", None),
            "allowedNetworks",
        ),
        ("net-lookalike", net("team-ab-net", None), "allowedNetworks"),
        ("net-project", net(other_project, None), "allowedNetworks"),
        (
            "sub-bare",
            net("team-a-net", Some("team-b-sub")),
            "allowedSubnetworks",
        ),
        (
            "sub-project",
            net(
                "team-a-net",
                Some("projects/team-b-proj/regions/us-east5/subnetworks/team-a-sub"),
            ),
            "allowedSubnetworks",
        ),
    ];
    for (name, spec, _) in &cases {
        tenant.create(&slice(name, spec.clone())).await;
    }
    let url = format!("https://www.googleapis.com/compute/v1/{other_project}");
    tenant
        .create(&batch(
            "net-batch",
            json!({"execution": {"networkUri": other_project}}),
        ))
        .await;
    tenant
        .create(&batch("url-batch", json!({"execution": {"networkUri": url}})))
        .await;
    tenant
        .create(&batch(
            "sub-batch",
            json!({"execution": {"subnetworkUri": "team-b-sub"}}),
        ))
        .await;
    tenant
        .create(&vertex_pipeline("net-vertex", json!({"network": other_project})))
        .await;

    for (name, _, field) in &cases {
        let message = wait_denied::<TpuSlice>(&env, name).await;
        assert!(message.contains(&denied_by(&env.ns, field)), "{name}: {message}");
    }
    for name in ["net-batch", "url-batch"] {
        let message = wait_denied::<PreprocessBatch>(&env, name).await;
        assert!(
            message.contains(&denied_by(&env.ns, "allowedNetworks")),
            "{name}: {message}"
        );
    }
    // A slice's network is a name or a path: the URL form is refused by the CRD.
    let message = api_refuses(&tenant, &slice("net-url", net(&url, None))).await;
    assert!(message.contains("spec.networkConfig.network"), "{message}");
    let message = wait_denied::<PreprocessBatch>(&env, "sub-batch").await;
    assert!(
        message.contains(&denied_by(&env.ns, "allowedSubnetworks")),
        "{message}"
    );
    let message = wait_denied::<TrainingPipeline>(&env, "net-vertex").await;
    assert!(
        message.contains(&denied_by(&env.ns, "allowedNetworks")),
        "{message}"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(cloud_creates(&env), 0, "{:?}", env.gcp.call_counts());

    tenant
        .create(&slice("own-net", net("team-a-net", Some("team-a-sub"))))
        .await;
    wait_ready::<TpuSlice>(&env, &env.ns, "own-net").await;
    assert_eq!(cloud_creates(&env), 1, "{:?}", env.gcp.call_counts());
    let calls = env.gcp.calls();
    let foreign: Vec<_> = calls.iter().filter(|c| c.path.contains("team-b")).collect();
    assert!(foreign.is_empty(), "{foreign:#?}");
}

// ---------------------------------------------------------------------------------------------
// Adoption

/// A slice of team B, Ready: its namespace, uid and full node name.
async fn team_b_slice(env: &TestEnv, team_b: &Tenant, name: &str) -> (String, String) {
    team_b.create(&slice(name, json!({}))).await;
    let s: TpuSlice = wait_ready(env, &team_b.ns, name).await;
    (s.uid().unwrap(), s.status.unwrap().node_name.unwrap())
}

/// The node id (last segment) of a full node name.
fn node_id(node: &str) -> &str {
    node.rsplit('/').next().unwrap()
}

/// Deletes team A's slice `name` and waits until it is gone.
async fn delete_slice(env: &TestEnv, tenant: &Tenant, name: &str) {
    tenant
        .api::<TpuSlice>()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    env.wait_gone::<TpuSlice>(name, STEP).await;
}

/// Where team A's policy allows adoption, `adoptNodeId` naming a node the operator created for
/// another object (team B's slice, and a sibling slice in team A's own namespace) is refused,
/// naming the owner; the nodes are never relabelled nor deleted, not even when the refused
/// slices are deleted. Team A cannot read team B's slice (RBAC): it has the node's id from the
/// cloud project the teams share, not from Kubernetes.
#[tokio::test]
async fn adopting_a_node_the_operator_made_for_another_object_is_refused() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({})).await;
    let ns_b = team_b.ns.clone();
    let tenant = start(&mut env, json!({"allowAdoption": true})).await;
    let (their_uid, theirs) = team_b_slice(&env, &team_b, "theirs").await;
    tenant
        .refused_by_rbac(
            "reading team B's slice (its node name, its uid)",
            tenant.api_in::<TpuSlice>(&ns_b).get("theirs"),
        )
        .await;
    tenant.create(&slice("sibling", json!({}))).await;
    let sibling: TpuSlice = wait_ready(&env, &env.ns, "sibling").await;
    let sibling_node = sibling.status.unwrap().node_name.unwrap();
    let before = [theirs.as_str(), sibling_node.as_str()].map(|n| cloud_node(&env, n).unwrap());

    tenant
        .create(&slice("grab", json!({"adoptNodeId": node_id(&theirs)})))
        .await;
    tenant
        .create(&slice(
            "grab-sibling",
            json!({"adoptNodeId": node_id(&sibling_node)}),
        ))
        .await;
    let message = wait_denied::<TpuSlice>(&env, "grab").await;
    assert!(
        message.starts_with(&format!("adoption refused: node {theirs} carries label"))
            && message.contains(&format!("owner: {ns_b}/theirs uid {their_uid}")),
        "{message}"
    );
    let message = wait_denied::<TpuSlice>(&env, "grab-sibling").await;
    assert!(
        message.contains(&format!("owner: {}/sibling", env.ns)),
        "{message}"
    );
    delete_slice(&env, &tenant, "grab").await;
    delete_slice(&env, &tenant, "grab-sibling").await;
    env.idle(Duration::from_millis(300), STEP).await;

    for (node, before) in [theirs.as_str(), sibling_node.as_str()].iter().zip(before) {
        let writes = tpu_writes_on(&env, node_id(node));
        assert!(writes.iter().all(|c| c.method == "nodes.create"), "{writes:#?}");
        let now = cloud_node(&env, node).expect("the node is kept");
        assert_eq!(now["labels"], before["labels"], "never relabelled");
        assert_eq!(now["metadata"], before["metadata"], "never rewritten");
    }
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 2, "theirs and sibling");
}

/// Where team A's policy does not set `allowAdoption`, adopting team B's node is refused for
/// that reason, and the node is left as it was.
#[tokio::test]
async fn adoption_without_allow_adoption_is_refused() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({"allowAdoption": true})).await;
    let tenant = start(&mut env, json!({"maxChips": 64})).await;
    let (_, theirs) = team_b_slice(&env, &team_b, "theirs").await;
    let before = cloud_node(&env, &theirs).unwrap();
    tenant
        .create(&slice("grab", json!({"adoptNodeId": node_id(&theirs)})))
        .await;
    let message = wait_denied::<TpuSlice>(&env, "grab").await;
    assert!(
        message.contains(&denied_by(&env.ns, "allowAdoption")),
        "{message}"
    );
    delete_slice(&env, &tenant, "grab").await;
    env.idle(Duration::from_millis(300), STEP).await;
    let writes = tpu_writes_on(&env, node_id(&theirs));
    assert!(writes.iter().all(|c| c.method == "nodes.create"), "{writes:#?}");
    assert_eq!(cloud_node(&env, &theirs).unwrap()["labels"], before["labels"]);
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
}

// ---------------------------------------------------------------------------------------------
// Label spoofing

/// Team A writes team B's slice's identity labels (`managed-by`, `tpu-operator-*`) into what
/// becomes cloud labels and node metadata: a slice's `spec.labels` and `spec.metadata` (at create
/// and by a later patch), a batch's and a Vertex job's labels. The API server refuses every one
/// (the CRDs reserve those keys). The same labels on the Kubernetes object's own metadata are
/// just labels: the node team A gets carries team A's identity, and team B's node is untouched.
#[tokio::test]
async fn spoofed_identity_labels_are_refused_and_the_owners_node_untouched() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({})).await;
    let ns_b = team_b.ns.clone();
    let tenant = start(&mut env, json!({})).await;
    let (victim_uid, victim) = team_b_slice(&env, &team_b, "victim").await;
    let before = cloud_node(&env, &victim).unwrap();
    let identity = json!({
        "managed-by": "tpu-operator", "tpu-operator-cluster": "test-cluster",
        "tpu-operator-namespace": ns_b, "tpu-operator-name": "victim",
        "tpu-operator-uid": victim_uid,
    });
    let ns = env.ns.clone();
    let spoofs = [
        api_refuses(&tenant, &slice("spoof-labels", json!({"labels": identity}))).await,
        api_refuses(
            &tenant,
            &slice("spoof-managed", json!({"labels": {"managed-by": "tpu-operator"}})),
        )
        .await,
        api_refuses(&tenant, &batch("spoof-batch", json!({"labels": identity}))).await,
        api_refuses(
            &tenant,
            &vertex_pipeline("spoof-job", json!({"labels": identity})),
        )
        .await,
    ];
    for message in &spoofs {
        assert!(
            message.contains("reserved for the operator's identity labels"),
            "{message}"
        );
    }
    let done_uri = json!({"metadata": {"tpu-operator-done-uri": "gs://team-b-data/models/"}});
    let message = api_refuses(&tenant, &slice("spoof-metadata", done_uri.clone())).await;
    assert!(message.contains("'tpu-operator-*' are reserved"), "{message}");

    // The same keys on the Kubernetes object's metadata, and a later patch of spec.labels.
    let mut legit = slice("legit", json!({"labels": {"team": "a"}}));
    legit.metadata.labels = serde_json::from_value(identity.clone()).unwrap();
    tenant.create(&legit).await;
    let legit: TpuSlice = wait_ready(&env, &ns, "legit").await;
    for patch in [json!({"spec": {"labels": identity}}), json!({"spec": done_uri})] {
        let refused = tenant_patch::<TpuSlice>(&tenant, "legit", &patch).await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
            "{refused:?}"
        );
    }
    env.idle(Duration::from_millis(300), STEP).await;
    let node = cloud_node(&env, legit.status.as_ref().unwrap().node_name.as_ref().unwrap()).unwrap();
    let labels = &node["labels"];
    assert_eq!(labels["tpu-operator-uid"], legit.uid().unwrap().as_str());
    assert_eq!(labels["tpu-operator-namespace"], ns.as_str());
    assert_eq!(labels["tpu-operator-name"], "legit");
    assert_eq!(labels["team"], "a");
    assert!(
        node["metadata"].get("tpu-operator-done-uri").is_none(),
        "{node:#}"
    );
    let writes = tpu_writes_on(&env, node_id(&victim));
    assert!(writes.iter().all(|c| c.method == "nodes.create"), "{writes:#?}");
    let after = cloud_node(&env, &victim).expect("team B's node is kept");
    assert_eq!(
        after["labels"], before["labels"],
        "team B's node is not relabelled"
    );
    assert_eq!(after["metadata"], before["metadata"]);
    assert_eq!(cloud_creates(&env), 2, "victim and legit only");
}

// ---------------------------------------------------------------------------------------------
// Edits after admission

/// A Ready slice admitted by a tight policy is edited towards what the policy forbids: another
/// zone, a bigger or other accelerator, a topology instead of a type, on-demand capacity,
/// another project, service account or network, adopting a node. The CRD's immutability rules
/// refuse every edit (422): the slice keeps its generation, no second node is ever created, and
/// the running node keeps its zone and shape. A Vertex pipeline's training is immutable too.
#[tokio::test]
async fn edits_after_admission_cannot_move_or_grow_what_runs() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"allowedZones": ["us-east5-b"], "allowedCapacity": ["spot"], "maxChips": 8,
               "allowedAccelerators": [{"family": "v6e", "maxChips": 8}],
               "allowedServiceAccounts": [TEAM_A_SA, "default"]}),
    )
    .await;
    tenant.create(&slice("running", json!({}))).await;
    let running: TpuSlice = wait_ready(&env, &env.ns, "running").await;
    let node_name = running.status.unwrap().node_name.unwrap();
    let edits = [
        json!({"zone": "us-east5-a"}),
        json!({"acceleratorType": "v6e-16"}),
        json!({"acceleratorType": "v5p-8"}),
        json!({"acceleratorType": null, "acceleratorConfig": {"type": "V6E", "topology": "4x4"}}),
        json!({"capacity": {"onDemand": {}, "spot": null}}),
        json!({"project": "someone-elses"}),
        json!({"serviceAccount": {"email": "owner@demo-project.iam.gserviceaccount.com"}}),
        json!({"networkConfig": {"network": "projects/team-b-proj/global/networks/prod"}}),
        json!({"adoptNodeId": "someone-elses-node"}),
    ];
    for edit in edits {
        let got = tenant_patch::<TpuSlice>(&tenant, "running", &json!({"spec": edit})).await;
        match got {
            Err(kube::Error::Api(e)) if e.code == 422 => {
                assert!(e.message.contains("immutable"), "{edit}: {}", e.message);
            }
            other => panic!("{edit} was not refused: {other:?}"),
        }
    }
    tenant.create(&vertex_pipeline("job", json!({}))).await;
    let grow = json!({"spec": {"training": {"vertex": {"tpuTopology": "4x4"}}}});
    let got = tenant_patch::<TrainingPipeline>(&tenant, "job", &grow).await;
    assert!(
        matches!(&got, Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("immutable")),
        "{got:?}"
    );
    env.idle(Duration::from_millis(500), STEP).await;
    let running: TpuSlice = env.api().get("running").await.unwrap();
    assert_eq!(running.metadata.generation, Some(1));
    assert!(is_ready(&running));
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1, "no second node");
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);
    let node = cloud_node(&env, &node_name).unwrap();
    assert_eq!(node["acceleratorType"], "v6e-8");
    assert!(node_name.contains("/locations/us-east5-b/"), "{node_name}");
    // The pipeline itself asks for on-demand capacity, which this policy refuses.
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
}

// ---------------------------------------------------------------------------------------------
// Status forgery

/// Status is a subresource: what a tenant writes under `status` through the main resource (a
/// create, a merge patch, a replace) is dropped by the API server, and RBAC refuses the tenant
/// `/status` itself (the chart's aggregated roles grant it read only; asserted on the real
/// server). With `maxChips: 8`, a running slice whose tenant
/// "marks it Failed" still counts: the next 8-chip slice is refused naming it, and one node runs.
#[tokio::test]
async fn forged_status_is_dropped_and_the_slice_still_counts() {
    let mut env = TestEnv::start().await;
    let tenant = start(&mut env, json!({"maxChips": 8})).await;
    let forged = json!({"phase": "Failed", "chips": 0, "nodeState": "DELETED",
                        "nodeName": "projects/demo-project/locations/us-east5-b/nodes/not-mine"});
    let mut with_status = serde_json::to_value(slice("running", json!({}))).unwrap();
    with_status["status"] = forged.clone();
    let with_status: TpuSlice = serde_json::from_value(with_status).unwrap();
    let created = tenant.create(&with_status).await;
    assert!(
        created.status.as_ref().is_none_or(|s| s.node_name.is_none()),
        "a status sent with the create is dropped: {:?}",
        created.status
    );
    let running: TpuSlice = wait_ready(&env, &env.ns, "running").await;
    let node = running.status.as_ref().unwrap().node_name.clone().unwrap();
    assert!(!node.ends_with("/not-mine"), "{node}");

    let patched: TpuSlice = tenant_patch(&tenant, "running", &json!({"status": forged}))
        .await
        .expect("a main-resource patch carrying status is accepted, its status ignored");
    assert!(is_ready(&patched), "{:?}", patched.status);
    let mut replaced: TpuSlice = tenant.api().get("running").await.unwrap();
    let st = replaced.status.as_mut().unwrap();
    st.phase = serde_json::from_value(json!("Failed")).unwrap();
    st.conditions.clear();
    st.chips = Some(0);
    let replaced = tenant
        .api::<TpuSlice>()
        .replace("running", &PostParams::default(), &replaced)
        .await
        .expect("replace the main resource");
    assert!(is_ready(&replaced), "{:?}", replaced.status);
    tenant
        .refused_by_rbac(
            "writing its slice's status subresource",
            tenant.api::<TpuSlice>().patch_status(
                "running",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": forged})),
            ),
        )
        .await;

    tenant.create(&slice("second", json!({}))).await;
    let message = wait_denied::<TpuSlice>(&env, "second").await;
    assert!(
        message.contains(&denied_by(&env.ns, "maxChips")) && message.contains("TpuSlice running (8 chips"),
        "{message}"
    );
    env.idle(Duration::from_millis(500), STEP).await;
    assert!(stalled(&env.api::<TpuSlice>().get("second").await.unwrap()).is_some());
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
    assert_eq!(env.gcp.nodes().len(), 1);
}

/// Team B's Vertex pipeline `name`, with its job created: the job's full name.
async fn team_b_job(env: &TestEnv, team_b: &Tenant, name: &str) -> String {
    team_b.create(&vertex_pipeline(name, json!({}))).await;
    let tp: TrainingPipeline = wait_in(
        env,
        &team_b.ns,
        name,
        "a job",
        Duration::ZERO,
        |tp: &TrainingPipeline| tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some()),
    )
    .await;
    tp.status.unwrap().custom_job_name.unwrap()
}

/// Every mutating Vertex call (cancel, delete) on the job `name`.
fn vertex_writes_on(env: &TestEnv, name: &str) -> Vec<CallRecord> {
    env.gcp
        .calls()
        .into_iter()
        .filter(|c| c.service == "vertex" && c.http_method != "GET" && c.path.contains(name))
        .collect()
}

/// Deletes team A's pipeline `name` and waits until it is gone (its jobs cancelled and deleted).
async fn delete_pipeline(env: &TestEnv, tenant: &Tenant, name: &str) {
    tenant
        .api::<TrainingPipeline>()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    env.wait_gone::<TrainingPipeline>(name, STEP).await;
}

/// A pipeline deletes the job its status records, so a tenant that could write
/// `status.customJobName` could have team B's job cancelled. It cannot: the name sent with the
/// create and in a main-resource patch is dropped, RBAC refuses the tenant the status subresource
/// (asserted on the real server), the pipeline runs its own job, and deleting it cancels and
/// deletes that job only; team B's is never written to.
#[tokio::test]
async fn a_forged_job_name_in_status_never_reaches_another_teams_job() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({})).await;
    let tenant = start(&mut env, json!({})).await;
    let theirs = team_b_job(&env, &team_b, "their-run").await;
    let forged = json!({"phase": "Training", "customJobName": theirs, "attempts": 1});
    let mut forger = serde_json::to_value(vertex_pipeline("forger", json!({}))).unwrap();
    forger["status"] = forged.clone();
    let created = tenant
        .create(&serde_json::from_value::<TrainingPipeline>(forger).unwrap())
        .await;
    assert!(
        created
            .status
            .as_ref()
            .is_none_or(|s| s.custom_job_name.is_none()),
        "{:?}",
        created.status
    );
    let patched: TrainingPipeline = tenant_patch(&tenant, "forger", &json!({"status": forged}))
        .await
        .expect("a main-resource patch carrying status is accepted, its status ignored");
    assert_ne!(
        patched.status.and_then(|s| s.custom_job_name).as_deref(),
        Some(theirs.as_str())
    );
    tenant
        .refused_by_rbac(
            "writing status.customJobName through the status subresource",
            tenant.api::<TrainingPipeline>().patch_status(
                "forger",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": forged})),
            ),
        )
        .await;
    let tp: TrainingPipeline = wait_in(
        &env,
        &env.ns,
        "forger",
        "its own job",
        Duration::ZERO,
        |tp: &TrainingPipeline| tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some()),
    )
    .await;
    let own = tp.status.unwrap().custom_job_name.unwrap();
    assert_ne!(own, theirs);
    delete_pipeline(&env, &tenant, "forger").await;
    assert!(
        vertex_writes_on(&env, &theirs).is_empty(),
        "{:#?}",
        vertex_writes_on(&env, &theirs)
    );
    assert!(
        !vertex_writes_on(&env, &own).is_empty(),
        "the forger's own job was cleaned up"
    );
    assert!(env.gcp.custom_jobs().iter().any(|j| j["name"] == theirs.as_str()));
}

// ---------------------------------------------------------------------------------------------
// Name collisions

/// Same names in two namespaces, and names whose `<namespace>-<name>` read alike (`<ns>/b-train`
/// and `<ns>-b/train`): node ids carry a hash of each object's UID, so every slice gets a node of
/// its own, labelled with its own namespace and UID. Deleting team A's slices deletes exactly
/// their nodes; team B's slice of the same name stays Ready on its node. Team A reaching into team
/// B's namespace by name (delete, overwrite, create) is refused by RBAC.
#[tokio::test]
async fn same_names_in_two_namespaces_never_share_a_node() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({})).await;
    let ns_b = team_b.ns.clone();
    let tenant = start(&mut env, json!({})).await;
    let ns = env.ns.clone();
    let (b_uid, b_node) = team_b_slice(&env, &team_b, "train").await;
    let mut a_nodes = Vec::new();
    for name in ["train", "b-train"] {
        tenant.create(&slice(name, json!({}))).await;
        let s: TpuSlice = wait_ready(&env, &ns, name).await;
        let node = s.status.as_ref().unwrap().node_name.clone().unwrap();
        let labels = cloud_node(&env, &node).unwrap()["labels"].clone();
        assert_eq!(labels["tpu-operator-namespace"], ns.as_str(), "{node}");
        assert_eq!(labels["tpu-operator-uid"], s.uid().unwrap().as_str(), "{node}");
        a_nodes.push(node);
    }
    let readable = format!("{ns_b}-train-");
    assert!(
        node_id(&a_nodes[1]).starts_with(&readable) && node_id(&b_node).starts_with(&readable),
        "the two read alike: {} {b_node}",
        a_nodes[1]
    );
    let mut all = vec![b_node.clone(), a_nodes[0].clone(), a_nodes[1].clone()];
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 3, "three slices, three nodes: {all:?}");
    assert_eq!(
        cloud_node(&env, &b_node).unwrap()["labels"]["tpu-operator-uid"],
        b_uid.as_str()
    );

    let theirs = tenant.api_in::<TpuSlice>(&ns_b);
    tenant
        .refused_by_rbac(
            "deleting team B's slice of the same name",
            theirs.delete("train", &DeleteParams::default()),
        )
        .await;
    tenant
        .refused_by_rbac(
            "patching team B's slice of the same name",
            theirs.patch(
                "train",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"suspend": true}})),
            ),
        )
        .await;
    tenant
        .refused_by_rbac(
            "creating a slice in team B's namespace",
            theirs.create(&PostParams::default(), &slice("c-train", json!({}))),
        )
        .await;
    for name in ["train", "b-train"] {
        delete_slice(&env, &tenant, name).await;
    }
    env.idle(Duration::from_millis(300), STEP).await;
    let left: Vec<_> = env.gcp.nodes().iter().map(|n| n["name"].clone()).collect();
    assert_eq!(left, [json!(b_node)], "only team B's node is left");
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 2);
    let writes = tpu_writes_on(&env, node_id(&b_node));
    assert!(writes.iter().all(|c| c.method == "nodes.create"), "{writes:#?}");
    let theirs: TpuSlice = Api::namespaced(env.client.clone(), &ns_b)
        .get("train")
        .await
        .unwrap();
    assert!(is_ready(&theirs), "{:?}", theirs.status);
}

/// Pipelines of the same name in two namespaces: their Vertex jobs are found by UID label, so
/// deleting team A's `train` cancels and deletes team A's job only; team B's `train` keeps its.
#[tokio::test]
async fn same_named_pipelines_in_two_namespaces_never_share_a_job() {
    let mut env = TestEnv::start().await;
    let team_b = start_team_b(&mut env, json!({})).await;
    let ns_b = team_b.ns.clone();
    let tenant = start(&mut env, json!({})).await;
    let theirs = team_b_job(&env, &team_b, "train").await;
    tenant.create(&vertex_pipeline("train", json!({}))).await;
    let tp: TrainingPipeline = wait_in(
        &env,
        &env.ns,
        "train",
        "its job",
        Duration::ZERO,
        |tp: &TrainingPipeline| tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some()),
    )
    .await;
    let own = tp.status.unwrap().custom_job_name.unwrap();
    assert_ne!(own, theirs);
    delete_pipeline(&env, &tenant, "train").await;
    assert!(
        vertex_writes_on(&env, &theirs).is_empty(),
        "{:#?}",
        vertex_writes_on(&env, &theirs)
    );
    assert!(!vertex_writes_on(&env, &own).is_empty());
    let jobs = env.gcp.custom_jobs();
    assert!(jobs.iter().any(|j| j["name"] == theirs.as_str()), "{jobs:#?}");
    let theirs_now: TrainingPipeline = Api::namespaced(env.client.clone(), &ns_b)
        .get("train")
        .await
        .unwrap();
    assert_eq!(
        theirs_now.status.and_then(|s| s.custom_job_name).as_deref(),
        Some(theirs.as_str())
    );
}

// ---------------------------------------------------------------------------------------------
// Child squatting

fn phase(tp: &TrainingPipeline) -> TrainingPipelinePhase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// Before a pipeline exists, the tenant creates objects with the names its children will have
/// (`<name>-preprocess`, `<name>-train`), each asking for what the policy forbids. The pipelines
/// do not take them over: each fails with `ChildNotOwned` naming the child, creates nothing, and
/// leaves the squatter as it was (no ownerReference added); the squatters are refused on their
/// own. Not one cloud create.
#[tokio::test]
async fn squatted_child_names_stop_the_pipeline_without_adoption() {
    let mut env = TestEnv::start().await;
    let tenant = start(
        &mut env,
        json!({"allowedRegions": ["us-east5"], "allowedZones": ["us-east5-b"]}),
    )
    .await;
    tenant
        .create(&batch("pre-preprocess", json!({"region": "europe-west4"})))
        .await;
    tenant
        .create(&slice("vm-train", json!({"zone": "us-east5-a"})))
        .await;
    tenant.create(&preprocessing_pipeline("pre")).await;
    tenant.create(&tpu_vm_pipeline("vm")).await;

    for (name, child) in [
        ("pre", "PreprocessBatch pre-preprocess"),
        ("vm", "TpuSlice vm-train"),
    ] {
        let tp: TrainingPipeline = wait_in(&env, &env.ns, name, "Failed", STEP, |tp| {
            phase(tp) == TrainingPipelinePhase::Failed
        })
        .await;
        let (reason, message) = stalled(&tp).expect("stalled");
        assert_eq!(reason, "ChildNotOwned", "{name}: {message}");
        assert!(
            message.contains(&format!("{child} exists and is not owned by this pipeline")),
            "{name}: {message}"
        );
    }
    let message = wait_denied::<PreprocessBatch>(&env, "pre-preprocess").await;
    assert!(
        message.contains(&denied_by(&env.ns, "allowedRegions")),
        "{message}"
    );
    let message = wait_denied::<TpuSlice>(&env, "vm-train").await;
    assert!(message.contains(&denied_by(&env.ns, "allowedZones")), "{message}");
    env.idle(Duration::from_millis(500), STEP).await;
    let squatter: PreprocessBatch = env.api().get("pre-preprocess").await.unwrap();
    assert!(squatter.owner_references().is_empty());
    let squatter: TpuSlice = env.api().get("vm-train").await.unwrap();
    assert!(squatter.owner_references().is_empty());
    assert_eq!(cloud_creates(&env), 0, "{:?}", env.gcp.call_counts());
}

/// The tenant squats `<name>-train` with a forged controller ownerReference to the pipeline (its
/// UID read back before the controllers run), asking for a zone the policy forbids. The pipeline
/// takes the squatter for its child, but the squatter is judged by the policy as any slice is:
/// refused, no node outside the policy. The pipeline releases it and trains on a slice of its
/// own, within the policy.
#[tokio::test]
async fn a_squatter_with_a_forged_owner_reference_is_still_judged_by_the_policy() {
    let mut env = TestEnv::start().await;
    create_policy(
        &env.client,
        &env.ns,
        json!({"allowedZones": ["us-east5-b"], "maxChips": 8}),
    )
    .await;
    let tenant = as_tenant(&env).await;
    let tp = tenant.create(&tpu_vm_pipeline("forge")).await;
    let mut squatter = slice("forge-train", json!({"zone": "us-east5-a"}));
    squatter.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "tpu-operator.dev/v1beta1".into(),
        kind: "TrainingPipeline".into(),
        name: "forge".into(),
        uid: tp.uid().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let squatter = tenant.create(&squatter).await;
    let ctx = Arc::new(env.context().await);
    spawn_controllers(&mut env, &ctx);

    // The squatter is judged by the policy. Its refusal is read from its Event: the pipeline,
    // which takes the stalled slice for its own, may delete it before a poll sees its status
    // (seen on a loaded machine).
    let events = env.wait_for_event("forge-train", "PolicyDenied", STEP).await;
    let refusal = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("PolicyDenied"))
        .expect("a PolicyDenied Event");
    assert_eq!(
        refusal.regarding.as_ref().and_then(|r| r.uid.clone()),
        squatter.uid(),
        "the squatter's own refusal"
    );
    let note = refusal.note.clone().unwrap_or_default();
    assert!(note.contains(&denied_by(&env.ns, "allowedZones")), "{note}");
    // Whatever the pipeline does next, its train child is never the squatter with a node.
    let own: TpuSlice = wait_in(
        &env,
        &env.ns,
        "forge-train",
        "the pipeline's own slice",
        STEP,
        |s: &TpuSlice| s.uid() != squatter.uid(),
    )
    .await;
    assert_eq!(own.spec.zone, "us-east5-b");
    let owner = &own.owner_references()[0];
    assert_eq!(owner.uid, tp.uid().unwrap(), "created by the pipeline itself");
    // The pipeline's success is what proves its own slice ran: the slice itself may come and
    // go (Ready, then deleted when training ends) between two polls on a loaded machine.
    wait_ready::<TrainingPipeline>(&env, &env.ns, "forge").await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1, "its own node only");
    // Releasing the refused squatter looks up its own node id there (a 404), nothing more.
    let outside = tpu_writes_on(&env, "/us-east5-a/");
    assert!(outside.is_empty(), "{outside:#?}");
    assert!(
        env.gcp
            .nodes()
            .iter()
            .all(|n| n["name"].as_str().unwrap().contains("/us-east5-b/")),
        "{:#?}",
        env.gcp.nodes()
    );
}
