//! Kueue admits TpuSlices: the real Kueue manager (v0.17.0, built from its Go module by
//! tests/kueue) against the real kube-apiserver, the TpuSlice controller in-process with the
//! integration on, gcp-emulator behind Google's clients. Run by scripts/ci-control-plane.sh under
//! `tests/kueue/up.sh run`; elsewhere (kube-emulator, or no Kueue running) each test says why it
//! skips. Kueue's admission is never imitated here: only the real one decides.
//!
//! Every test makes its own ClusterQueues and flavors, named after its namespace, so the tests
//! run in parallel on one cluster.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{
    Api,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::{Value, json};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::{TpuSlice, TpuSlicePhase},
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};

pub(super) const ZONE: &str = "us-east5-b";
pub(super) const STEP: Duration = Duration::from_secs(20);

/// The env with Kueue's integration on and the TpuSlice controller running; `None` (after saying
/// why) where no real Kueue runs.
pub(super) async fn start() -> Option<TestEnv> {
    let mut env = start_idle().await?;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    Some(env)
}

/// [`start`] without the controller: the test starts it when it is ready.
pub(super) async fn start_idle() -> Option<TestEnv> {
    if std::env::var_os("TPU_OPERATOR_KUEUE_DIR").is_none() {
        eprintln!(
            "SKIP: no Kueue running (run under tests/kueue/up.sh, as scripts/ci-control-plane.sh does)"
        );
        return None;
    }
    let mut env = TestEnv::start().await;
    if env.kube().is_some() {
        eprintln!("SKIP: Kueue runs against the real control plane only (TPU_OPERATOR_KUBE=real)");
        return None;
    }
    Arc::get_mut(&mut env.ctx)
        .expect("the context is not shared before the controllers start")
        .config
        .kueue = true;
    Some(env)
}

pub(super) fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind), plural)
}

/// Applies a Kueue object (server-side apply; cluster-scoped unless `namespace`).
pub(super) async fn apply(env: &TestEnv, kind: &str, plural: &str, namespace: Option<&str>, body: Value) {
    let ar = resource(kind, plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
        None => Api::all_with(env.client.clone(), &ar),
    };
    let name = body["metadata"]["name"].as_str().expect("name").to_string();
    let mut obj = body;
    obj["apiVersion"] = json!("kueue.x-k8s.io/v1beta2");
    obj["kind"] = json!(kind);
    api.patch(
        &name,
        &PatchParams::apply("kueue-e2e").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// A v6e flavor (GKE's node label for v6e), a ClusterQueue of `chips` of it in `cohort` that
/// preempts lower priorities and reclaims lent quota, and LocalQueue `queue` in the test's
/// namespace pointing at it.
pub(super) async fn queue(env: &TestEnv, queue: &str, chips: u32, cohort: Option<&str>) -> String {
    let flavor = format!("v6e-{}", env.ns);
    apply(
        env,
        "ResourceFlavor",
        "resourceflavors",
        None,
        json!({"metadata": {"name": flavor},
               "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}}}),
    )
    .await;
    let cq = format!("{queue}-{}", env.ns);
    let mut spec = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
        "resourceGroups": [{
            "coveredResources": ["google.com/tpu"],
            "flavors": [{"name": flavor, "resources": [{"name": "google.com/tpu", "nominalQuota": chips}]}]
        }],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    });
    if let Some(cohort) = cohort {
        spec["cohortName"] = json!(cohort);
    }
    apply(
        env,
        "ClusterQueue",
        "clusterqueues",
        None,
        json!({"metadata": {"name": cq}, "spec": spec}),
    )
    .await;
    apply(
        env,
        "LocalQueue",
        "localqueues",
        Some(&env.ns),
        json!({"metadata": {"name": queue}, "spec": {"clusterQueue": cq}}),
    )
    .await;
    cq
}

pub(super) async fn priority_class(env: &TestEnv, name: &str, value: i32) {
    apply(
        env,
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        None,
        json!({"metadata": {"name": name}, "value": value}),
    )
    .await;
}

/// An 8-chip v6e spot slice in LocalQueue `queue`, at WorkloadPriorityClass `priority`.
pub(super) fn slice(name: &str, queue: &str, priority: Option<&str>) -> TpuSlice {
    let mut labels = json!({"kueue.x-k8s.io/queue-name": queue});
    if let Some(p) = priority {
        labels["kueue.x-k8s.io/priority-class"] = json!(p);
    }
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"spot": {}},
        }
    }))
    .expect("TpuSlice fixture")
}

fn reconciling_reason(s: &TpuSlice) -> Option<String> {
    let st = s.status.as_ref()?;
    find_condition(&st.conditions, types::RECONCILING)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

/// Creates a slice in queue `tpu` for each of `names`, in that order, each once Kueue has its
/// Workload: creation order decides the line (same priority: first come, first admitted).
pub(super) async fn in_line(env: &TestEnv, names: &[&str]) {
    for name in names {
        env.create(&slice(name, "tpu", None)).await;
        env.wait_for::<TpuSlice, _>(name, "a Kueue status", STEP, |s| {
            s.status.as_ref().is_some_and(|st| st.kueue.is_some())
        })
        .await;
        // Kueue orders a queue by the Workloads' creationTimestamp (Ordering.GetQueueOrderTimestamp
        // in kueue v0.17.0 pkg/workload/workload.go), which has one-second precision: two created
        // within the same second are in no defined order (seen in CI).
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}

pub(super) fn ready(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
}

pub(super) fn queued(s: &TpuSlice) -> bool {
    reconciling_reason(s).as_deref() == Some("QueuedInKueue")
        && s.status
            .as_ref()
            .is_some_and(|st| st.phase == TpuSlicePhase::Queued)
}

/// TPU nodes of the slice that exist in the emulated cloud (by its uid label).
pub(super) async fn nodes_of(env: &TestEnv, slice: &str) -> usize {
    let api = env.api::<TpuSlice>();
    let Some(s) = api.get_opt(slice).await.expect("get slice") else {
        return 0;
    };
    let uid = s.metadata.uid.unwrap_or_default();
    env.gcp
        .nodes()
        .iter()
        .filter(|n| n["labels"]["tpu-operator-uid"].as_str() == Some(uid.as_str()))
        .count()
}

pub(super) fn node_creates(env: &TestEnv) -> usize {
    env.gcp.call_count("tpu", "nodes.create") as usize
}

/// Whether the test's harness serves Kueue's visibility API (positions in status).
pub(super) fn visibility() -> bool {
    std::env::var("TPU_OPERATOR_KUEUE_VISIBILITY").is_ok_and(|v| v == "1")
}

#[tokio::test]
async fn slices_beyond_the_quota_wait_in_line_and_the_next_starts_when_one_goes() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    in_line(&env, &["first", "second", "third"]).await;
    let first: TpuSlice = env.wait_for("first", "first Ready", STEP, ready).await;
    let kueue = first.status.unwrap().kueue.unwrap();
    assert!(kueue.admitted, "{kueue:?}");
    assert_eq!(
        kueue.cluster_queue.as_deref(),
        Some(format!("tpu-{}", env.ns).as_str())
    );
    for (name, position) in [("second", 1), ("third", 2)] {
        let s: TpuSlice = env
            // Kueue writes its pending message ("insufficient unused quota") on its own
            // schedule, after the Workload exists: until then the status honestly says
            // "waiting for Kueue to consider the Workload", so wait for Kueue's words.
            .wait_for(name, "queued with Kueue's reason and position", STEP, |s| {
                queued(s)
                    && s.status
                        .as_ref()
                        .and_then(|st| st.message.as_deref())
                        .is_some_and(|m| m.contains("insufficient unused quota"))
                    && (!visibility()
                        || s.status
                            .as_ref()
                            .unwrap()
                            .kueue
                            .as_ref()
                            .unwrap()
                            .position
                            .is_some())
            })
            .await;
        let st = s.status.unwrap();
        let k = st.kueue.unwrap();
        assert!(!k.admitted && st.node_name.is_none(), "{name}: {k:?}");
        let message = st.message.unwrap_or_default();
        assert!(message.contains("waiting in Kueue LocalQueue tpu"), "{message}");
        assert!(
            message.contains("insufficient unused quota"),
            "Kueue's own words: {message}"
        );
        if visibility() {
            assert_eq!(k.position, Some(position), "{name}: {message}");
            assert!(message.contains(&format!("(position {position})")), "{message}");
        }
    }
    assert_eq!(
        node_creates(&env),
        1,
        "one slice fits the quota: one node created, none for the others"
    );

    let gone = Instant::now();
    env.api::<TpuSlice>()
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete first");
    env.wait_gone::<TpuSlice>("first", STEP).await;
    env.wait_for::<TpuSlice, _>("second", "second admitted", STEP, |s| {
        s.status
            .as_ref()
            .and_then(|st| st.kueue.as_ref())
            .is_some_and(|k| k.admitted)
    })
    .await;
    let waited = gone.elapsed();
    eprintln!(
        "second admitted {:.1} s after first was deleted",
        waited.as_secs_f64()
    );
    env.wait_for::<TpuSlice, _>("second", "second Ready", STEP, ready)
        .await;
    // The third moves up to position 1 when Kueue next looks at it (its position is read
    // when its Workload changes or its wait is re-checked), so wait for it rather than
    // asserting on the first queued status seen.
    let third: TpuSlice = env
        .wait_for("third", "third still queued, now first in line", STEP, |s| {
            queued(s)
                && (!visibility()
                    || s.status
                        .as_ref()
                        .and_then(|st| st.kueue.as_ref())
                        .is_some_and(|k| k.position == Some(1)))
        })
        .await;
    assert!(!third.status.unwrap().kueue.unwrap().admitted);
    assert_eq!(node_creates(&env), 2);
    assert_eq!(nodes_of(&env, "third").await, 0);
}

#[tokio::test]
async fn a_higher_priority_slice_preempts_a_running_one_which_comes_back_when_quota_frees() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    let (low, high) = (format!("low-{}", env.ns), format!("high-{}", env.ns));
    priority_class(&env, &low, 100).await;
    priority_class(&env, &high, 1000).await;
    env.create(&slice("batch", "tpu", Some(&low))).await;
    let before: TpuSlice = env.wait_for("batch", "low priority Ready", STEP, ready).await;
    let first_node = before.status.unwrap().node_name.unwrap();

    env.create(&slice("urgent", "tpu", Some(&high))).await;
    let evicted: TpuSlice = env
        .wait_for("batch", "evicted and its node gone", STEP, |s: &TpuSlice| {
            s.status
                .as_ref()
                .and_then(|st| st.kueue.as_ref())
                .is_some_and(|k| k.evictions == 1 && k.stopped)
        })
        .await;
    assert_eq!(
        nodes_of(&env, "batch").await,
        0,
        "nothing billable is left for the evicted slice"
    );
    let reason = reconciling_reason(&evicted);
    assert!(
        matches!(reason.as_deref(), Some("Evicted" | "QueuedInKueue")),
        "{reason:?}"
    );
    env.wait_for::<TpuSlice, _>("urgent", "high priority Ready", STEP, ready)
        .await;
    env.wait_for::<TpuSlice, _>("batch", "evicted slice queued again", STEP, queued)
        .await;
    let events = env.wait_for_event("batch", "Evicted", STEP).await;
    assert!(!events.is_empty());

    env.api::<TpuSlice>()
        .delete("urgent", &DeleteParams::default())
        .await
        .expect("delete urgent");
    let back: TpuSlice = env
        .wait_for("batch", "low priority back and Ready", STEP, ready)
        .await;
    let st = back.status.unwrap();
    assert_ne!(
        st.node_name.as_deref(),
        Some(first_node.as_str()),
        "a new node, a new create request"
    );
    let k = st.kueue.unwrap();
    assert!(k.admitted && !k.stopped && k.evictions == 1, "{k:?}");
    assert_eq!(nodes_of(&env, "batch").await, 1);
}

#[tokio::test]
async fn two_teams_in_a_cohort_borrow_each_others_idle_quota() {
    let Some(env) = start().await else { return };
    let cohort = format!("research-{}", env.ns);
    queue(&env, "team-a", 8, Some(&cohort)).await;
    queue(&env, "team-b", 8, Some(&cohort)).await;
    // Team A asks for twice its quota while team B is idle: the second slice borrows B's.
    env.create(&slice("a-1", "team-a", None)).await;
    env.wait_for::<TpuSlice, _>("a-1", "a-1 Ready", STEP, ready).await;
    env.create(&slice("a-2", "team-a", None)).await;
    env.wait_for::<TpuSlice, _>("a-2", "a-2 Ready on borrowed quota", STEP, ready)
        .await;
    // Team B wants its quota back: Kueue reclaims it from A's borrowing slice.
    env.create(&slice("b-1", "team-b", None)).await;
    env.wait_for::<TpuSlice, _>("b-1", "b-1 Ready on reclaimed quota", STEP, ready)
        .await;
    let mut a = Vec::new();
    for name in ["a-1", "a-2"] {
        a.push(env.api::<TpuSlice>().get(name).await.expect("get"));
    }
    let evicted: Vec<_> = a
        .iter()
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|st| st.kueue.as_ref())
                .is_some_and(|k| k.evictions > 0)
        })
        .collect();
    assert_eq!(
        evicted.len(),
        1,
        "exactly the borrowing slice gives the quota back: {a:#?}"
    );
    let mut billable = 0;
    for name in ["a-1", "a-2", "b-1"] {
        billable += nodes_of(&env, name).await;
    }
    assert_eq!(
        billable, 2,
        "16 chips of quota in the cohort: two 8-chip nodes run"
    );
}

/// A tenant who may create Workloads names one after their slice, owned by it, asking for one
/// chip, and gets it admitted in a queue with 4 chips free before the operator looks. The slice
/// needs 8: that admission must not let a node be created. The operator deletes the forged
/// Workload, writes the slice's own, which waits, and creates nothing.
#[tokio::test]
async fn a_forged_workload_admitted_for_less_does_not_let_the_slice_run() {
    let Some(mut env) = start_idle().await else { return };
    queue(&env, "tpu", 4, None).await;
    let created = env.create(&slice("big", "tpu", None)).await;
    let uid = created.metadata.uid.clone().expect("uid");
    let name = format!("tpuslice-big-{}", &uid[..5]);
    apply(
        &env,
        "Workload",
        "workloads",
        Some(&env.ns),
        json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice", "name": "big",
                "uid": uid, "controller": true}]},
            "spec": {"queueName": "tpu", "priority": 0, "podSets": [{"name": "hosts", "count": 1,
                "template": {"spec": {"containers": [{"name": "tpu-host",
                    "resources": {"requests": {"google.com/tpu": "1"}}}]}}}]}
        }),
    )
    .await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.ns, &resource("Workload", "workloads"));
    let forged_uid = loop {
        let wl = workloads.get(&name).await.expect("forged workload");
        if wl.data["status"]["admission"].is_object() {
            break wl.metadata.uid.expect("uid");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let s: TpuSlice = env
        .wait_for("big", "its own Workload, pending", STEP, |s: &TpuSlice| {
            queued(s)
                && s.status
                    .as_ref()
                    .unwrap()
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("insufficient")
        })
        .await;
    let own = workloads.get(&name).await.expect("the slice's own workload");
    assert_ne!(
        own.metadata.uid,
        Some(forged_uid),
        "the forged Workload was replaced"
    );
    assert_eq!(
        own.data["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"],
        "8"
    );
    env.idle(Duration::from_secs(2), STEP).await;
    assert_eq!(
        node_creates(&env),
        0,
        "nothing created on a forged admission: {s:#?}"
    );
}
