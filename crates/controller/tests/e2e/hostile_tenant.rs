//! The red-team suite (issue 32): a tenant of one namespace, with what the chart's aggregated
//! `edit` role lets it write (its own objects' specs, metadata, ownerReferences, labels and
//! finalizers; never their status), tries to make the operator spend past its namespace's
//! `TpuPolicy` or to hurt another namespace. Each test plays one attack through the real path
//! (CR → controller → gcp-emulator → status) and asserts that nothing outside the policy reached
//! the cloud. Runs on kube-emulator and, in CI, on the real kube-apiserver
//! (scripts/ci-control-plane.sh); the tests that count API requests need kube-emulator's
//! in-process router and say so on the real server. The tenant's requests go through
//! [`tenant::as_tenant`]: on the real server the namespace's `edit` ServiceAccount under the
//! chart's aggregated roles, so what RBAC refuses it is refused here too; the policies (and the
//! orphan's removal from the cloud) are the administrator's. References to other projects' networks,
//! reservations, images and buckets are played in `hostile_references.rs`; the sweeper's in
//! `sweeper.rs`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;
use test_kit::{ContextSpec, Polls, Tenant, TestEnv};
use tpu_operator_api::{tpu_policy::TpuPolicy, tpu_slice::TpuSlice};
use tpu_operator_controller::{
    governance::tenancy::{WithoutPolicy, book::LISTING_TTL},
    kinds::tpu_slice,
    never_shutdown,
};

use crate::tenant;

use tenant::{as_tenant, create_policy, is_ready, policy, slice, slice_stalled as stalled};

const STEP: Duration = Duration::from_secs(20);

async fn merge_patch(tenant: &Tenant, name: &str, patch: serde_json::Value) {
    tenant
        .api::<TpuSlice>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch as the tenant");
}

/// Attack 1: with `maxChips: 8` and a running 8-chip slice, the tenant points the running slice's
/// ownerReferences at a refused slice, hoping usage skips "the refused slice's children". Usage
/// leaves out only the admitted object's own UID: the refused slice stays refused and uncreated.
#[tokio::test]
async fn an_owner_reference_to_a_refused_slice_does_not_lift_the_quota() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"maxChips": 8}))).await;
    let tenant = as_tenant(&env).await;
    tenant.create(&slice("running", json!({}))).await;
    env.wait_for::<TpuSlice, _>("running", "Ready", STEP, is_ready)
        .await;
    tenant.create(&slice("refused", json!({}))).await;
    let refused: TpuSlice = env
        .wait_for("refused", "PolicyDenied", STEP, |s| stalled(s).is_some())
        .await;
    assert!(stalled(&refused).unwrap().1.contains("maxChips"));

    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
        "name": "refused", "uid": refused.uid().unwrap(), "controller": true,
    }]}});
    merge_patch(&tenant, "running", owner).await;
    // Past the usage book's listing (taken before the patch, reused for LISTING_TTL; it counts
    // the running slice as admitted by its own UID until then, so a shorter wait proves nothing),
    // then touch the refused slice, so it is looked at again at once against a new listing.
    env.idle(LISTING_TTL + Duration::from_secs(1), STEP).await;
    merge_patch(
        &tenant,
        "refused",
        json!({"metadata": {"labels": {"retry": "now"}}}),
    )
    .await;
    env.idle(Duration::from_secs(2), STEP).await;

    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        1,
        "16 chips must never run under maxChips 8"
    );
    let refused: TpuSlice = env.api().get("refused").await.unwrap();
    let (reason, message) = stalled(&refused).expect("still refused");
    assert_eq!(reason, "PolicyDenied");
    assert!(message.contains("TpuSlice running (8 chips"), "{message}");
}

/// Attack 2a: `deletionPolicy: Orphan` in a namespace whose policy does not set `allowOrphan` is
/// refused before anything is created: deleting such an object would free its quota and budget
/// while the node keeps billing.
#[tokio::test]
async fn orphan_deletion_policy_needs_allow_orphan() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"maxChips": 8}))).await;
    as_tenant(&env)
        .await
        .create(&slice("launder", json!({"deletionPolicy": "Orphan"})))
        .await;
    let s: TpuSlice = env
        .wait_for("launder", "PolicyDenied", STEP, |s| stalled(s).is_some())
        .await;
    let (reason, message) = stalled(&s).unwrap();
    assert_eq!(reason, "PolicyDenied");
    assert!(
        message.contains("spec.allowOrphan") && message.contains("deletionPolicy: Delete"),
        "the message names the field and the fix: {message}"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 0);
}

/// Attack 2b: admitted with `Delete`, then edited to `Orphan` and deleted. The deletion follows
/// the policy as it is at deletion: the node is deleted, nothing keeps billing outside the quota.
#[tokio::test]
async fn orphan_set_after_admission_still_deletes_the_node() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"maxChips": 8}))).await;
    let tenant = as_tenant(&env).await;
    tenant.create(&slice("edited", json!({}))).await;
    env.wait_for::<TpuSlice, _>("edited", "Ready", STEP, is_ready)
        .await;
    merge_patch(&tenant, "edited", json!({"spec": {"deletionPolicy": "Orphan"}})).await;
    tenant
        .api::<TpuSlice>()
        .delete("edited", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("edited", STEP).await;
    assert!(
        env.gcp.nodes().is_empty(),
        "the node must not outlive its slice: {:?}",
        env.gcp.nodes()
    );
}

/// The same laundering where the policy allows orphans: the node is left, as the user asked, and
/// keeps counting against the namespace's quota (it still bills) until it is gone from the cloud,
/// as the sweeper sees it.
#[tokio::test]
async fn an_allowed_orphan_keeps_counting_until_it_is_gone() {
    use tpu_operator_controller::sweeper::{Mode, Sweeper, SweeperConfig};
    let mut env = TestEnv::start().await;
    let ctx = tenant::start(&mut env, Some(json!({"allowOrphan": true, "maxChips": 8}))).await;
    let tenant = as_tenant(&env).await;
    tenant
        .create(&slice("kept", json!({"deletionPolicy": "Orphan"})))
        .await;
    env.wait_for::<TpuSlice, _>("kept", "Ready", STEP, is_ready).await;
    tenant
        .api::<TpuSlice>()
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("kept", STEP).await;
    assert_eq!(env.gcp.nodes().len(), 1, "orphaned by an allowed policy");
    assert_eq!(env.gcp.call_count("tpu", "nodes.delete"), 0);

    // The orphan still holds 8 chips: the next slice waits.
    tenant.create(&slice("next", json!({}))).await;
    let next: TpuSlice = env
        .wait_for("next", "PolicyDenied", STEP, |s| stalled(s).is_some())
        .await;
    let message = stalled(&next).unwrap().1;
    assert!(
        message.contains("orphaned node of deleted TpuSlice kept (8 chips"),
        "{message}"
    );
    // A sweep still finds it: it keeps counting.
    let sweeper = Sweeper::new(SweeperConfig {
        mode: Mode::Report,
        report_namespace: env.ns.clone(),
        projects: vec!["demo-project".into()],
        zones: vec!["us-east5-b".into()],
        ..SweeperConfig::default()
    });
    let report = sweeper.sweep(&ctx).await.expect("sweep");
    assert_eq!(report.orphans.len(), 1, "{report:#?}");
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);

    // An administrator deletes the orphan; the next sweep no longer finds it, and the quota frees.
    let node = env.gcp.nodes()[0]["name"].as_str().unwrap().to_owned();
    ctx.gcp.tpu.delete_node(&node).await.expect("delete the orphan");
    // Gone before the sweep, however few clock steps a busy machine fits in a stretch of time.
    env.until("the orphan's node deleted", STEP, async || {
        env.gcp.nodes().is_empty()
    })
    .await;
    sweeper.sweep(&ctx).await.expect("sweep");
    env.wait_for::<TpuSlice, _>("next", "Ready once the orphan is gone", STEP, is_ready)
        .await;
}

/// Attack 3: a flood of refused objects in `team-a` must not slow `team-b` down nor cost a
/// namespace listing per refusal. Against main this listed team-a's three kinds on every refusal
/// of every object (thousands of lists here) while every worker waited on team-a's lock. Counts
/// requests, so it needs kube-emulator's in-process router (the real server: see the benchmark,
/// docs/benchmarks.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_flood_in_one_namespace_does_not_hold_another() {
    const FLOOD: usize = 150;
    if test_kit::target().expect("target").is_real() {
        eprintln!("NOTICE: counts requests through kube-emulator's router; skipped on the real server");
        return;
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kube = test_kit::emulators::kube_with_crds().expect("kube-emulator");
    let lists = Arc::new(AtomicUsize::new(0));
    let client = counting_client(&kube, lists.clone());
    for ns in ["team-a", "team-b"] {
        create_namespace(&client, ns).await;
    }
    let gcp = test_kit::emulators::gcp_manual(test_kit::start_time()).await;
    create_policy(&client, &policy("team-a", json!({"maxChips": 8}))).await;
    let ctx = Arc::new(
        ContextSpec {
            cluster_id: "test-cluster".into(),
            default_project: "demo-project".into(),
            namespace: None,
            concurrency: 8,
            polls: Polls::fast(),
            tenancy: Some(WithoutPolicy::Allow),
        }
        .build(&client, &gcp)
        .await
        .expect("context"),
    );
    let controller = tokio::spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    let team_a = Api::<TpuSlice>::namespaced(client.clone(), "team-a");
    team_a
        .create(&Default::default(), &slice("holder", json!({})))
        .await
        .unwrap();
    wait_slice(&team_a, &gcp, "holder", is_ready).await;
    for i in 0..FLOOD {
        team_a
            .create(&Default::default(), &slice(&format!("flood-{i}"), json!({})))
            .await
            .unwrap();
    }
    let last = format!("flood-{}", FLOOD - 1);
    wait_slice(&team_a, &gcp, &last, |s| stalled(s).is_some()).await;

    let before = lists.load(Ordering::Relaxed);
    let team_b = Api::<TpuSlice>::namespaced(client.clone(), "team-b");
    let started = Instant::now();
    team_b
        .create(&Default::default(), &slice("innocent", json!({})))
        .await
        .unwrap();
    wait_slice(&team_b, &gcp, "innocent", is_ready).await;
    let took = started.elapsed();
    // Let the flood retry for a while longer: its refusals must read the usage book, not list.
    idle(&gcp, Duration::from_secs(2)).await;
    let listed = lists.load(Ordering::Relaxed) - before;
    eprintln!(
        "team-b Ready in {took:?} beside {FLOOD} refused slices; team-a TpuSlice lists meanwhile: {listed}"
    );
    assert!(
        listed <= 20,
        "{listed} listings of team-a's TpuSlices in {:?}: a refusal must not list its namespace",
        started.elapsed()
    );
    assert_eq!(
        gcp.call_count("tpu", "nodes.create"),
        2,
        "holder and innocent only"
    );
    controller.abort();
}

/// A client of `kube` that counts LIST requests of team-a's TpuSlices (watches excluded).
fn counting_client(kube: &kube_emulator::KubeEmulator, lists: Arc<AtomicUsize>) -> kube::Client {
    let service = tower::ServiceBuilder::new()
        .map_request(move |req: http::Request<kube::client::Body>| {
            let path = req.uri().path();
            let query = req.uri().query().unwrap_or_default();
            if req.method() == http::Method::GET
                && path.ends_with("/namespaces/team-a/tpuslices")
                && !query.contains("watch=")
            {
                lists.fetch_add(1, Ordering::Relaxed);
            }
            req
        })
        .service(kube.router());
    kube::Client::new(service, "default")
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .expect("create namespace");
}

async fn wait_slice(
    api: &Api<TpuSlice>,
    gcp: &gcp_emulator::Emulator,
    name: &str,
    pred: fn(&TpuSlice) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(s) = api.get_opt(name).await.unwrap()
            && pred(&s)
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {name}");
        gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn idle(gcp: &gcp_emulator::Emulator, real: Duration) {
    let end = Instant::now() + real;
    while Instant::now() < end {
        gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Attack 10 (the annotation): `spec` locations are held to `allowedBuckets` (hostile_references.rs),
/// and so is the `tpu-operator.dev/done-uri` annotation, which a tenant writes as freely: the
/// operator would list marker files in another team's bucket with its own identity on every pass.
/// A forbidden one is ignored: no Cloud Storage call at all, the slice runs.
#[tokio::test]
async fn a_done_uri_annotation_in_another_teams_bucket_is_never_read() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"allowedBuckets": ["team-a-*"]}))).await;
    let tenant = as_tenant(&env).await;
    let mut s = slice("peek", json!({"idleTimeout": "1h"}));
    s.metadata.annotations = Some(
        [(
            "tpu-operator.dev/done-uri".to_string(),
            "gs://team-b-models/run-7/DONE".to_string(),
        )]
        .into(),
    );
    tenant.create(&s).await;
    env.wait_for::<TpuSlice, _>("peek", "Ready", STEP, is_ready).await;
    env.idle(Duration::from_millis(500), STEP).await;
    let storage: u64 = env
        .gcp
        .call_counts()
        .iter()
        .filter(|(k, _)| k.starts_with("storage."))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(storage, 0, "{:?}", env.gcp.call_counts());
}

/// Attack 11 (the policy itself): the namespace's quota is a TpuPolicy, so the shortest way past
/// it is to change the policy: raise its `maxChips`, delete it (this operator allows namespaces
/// no policy selects), write a laxer one naming the namespace, forge its usage in status, or label
/// the namespace into a laxer policy's `namespaceSelector`. The tenant may read its policy and
/// live usage (the chart's `rbac.policyReaders`), and RBAC refuses every one of those writes (on
/// kube-emulator, which has no RBAC, only the read and the quota are checked). The quota still
/// holds afterwards: a second 8-chip slice is refused.
#[tokio::test]
async fn a_tenant_reads_its_policy_but_cannot_rewrite_it_or_relabel_into_another() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"maxChips": 8}))).await;
    // Another team's laxer policy, for namespaces labelled `tier: <gold>`.
    let gold = format!("gold-{}", env.ns);
    let lax: TpuPolicy = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
        "metadata": {"name": gold},
        "spec": {"namespaceSelector": {"matchLabels": {"tier": gold}}, "maxChips": 64,
                 "allowedBuckets": ["*"]},
    }))
    .unwrap();
    create_policy(&env.client, &lax).await;
    let tenant = as_tenant(&env).await;
    let own = tenant::policy_name(&env.ns);
    let policies = Api::<TpuPolicy>::all(tenant.client.clone());
    let read = policies
        .get(&own)
        .await
        .expect("the tenant reads its own policy (rbac.policyReaders)");
    assert_eq!(read.spec.max_chips, Some(8));
    policies
        .list(&Default::default())
        .await
        .expect("and lists the policies");

    let merge = PatchParams::default();
    tenant
        .refused_by_rbac(
            "raising its policy's maxChips",
            policies.patch(&own, &merge, &Patch::Merge(&json!({"spec": {"maxChips": 64}}))),
        )
        .await;
    tenant
        .refused_by_rbac(
            "deleting its policy",
            policies.delete(&own, &DeleteParams::default()),
        )
        .await;
    let mut mine = policy(&env.ns, json!({"maxChips": 64}));
    mine.metadata.name = Some(format!("mine-{}", env.ns));
    tenant
        .refused_by_rbac(
            "writing a policy of its own",
            policies.create(&Default::default(), &mine),
        )
        .await;
    tenant
        .refused_by_rbac(
            "forging its policy's usage in status",
            policies.patch_status(&own, &merge, &Patch::Merge(&json!({"status": {"chips": 0}}))),
        )
        .await;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(tenant.client.clone());
    tenant
        .refused_by_rbac(
            "labelling its namespace into another policy's selector",
            namespaces.patch(
                &env.ns,
                &merge,
                &Patch::Merge(&json!({"metadata": {"labels": {"tier": gold}}})),
            ),
        )
        .await;

    let policy_now = Api::<TpuPolicy>::all(env.client.clone()).get(&own).await.unwrap();
    assert_eq!(policy_now.spec.max_chips, Some(8));
    tenant.create(&slice("first", json!({}))).await;
    env.wait_for::<TpuSlice, _>("first", "Ready", STEP, is_ready)
        .await;
    tenant.create(&slice("second", json!({}))).await;
    let second: TpuSlice = env
        .wait_for("second", "PolicyDenied", STEP, |s| stalled(s).is_some())
        .await;
    let message = stalled(&second).unwrap().1;
    assert!(
        message.contains(&tenant::denied_by(&env.ns, "maxChips")),
        "{message}"
    );
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
}
