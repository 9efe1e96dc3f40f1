//! The operator's Workloads kept as Kueue's own job integrations keep theirs, on the real Kueue
//! (v0.17.0) and the real kube-apiserver (see kueue.rs for the harness): a relabelled slice's
//! priority class is changed on its own Workload in place, never by replacing the Workload (which
//! would stop the node it admits); a Workload deleted by hand keeps its quota (the operator's
//! finalizer) until the node it admitted is gone; a suspended slice gives its quota back once its
//! node is gone.

use std::time::{Duration, Instant};

use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::tpu_slice::TpuSlice;

use super::kueue::{STEP, nodes_of, priority_class, queue, queued, ready, resource, slice, start};

/// The slice's Workload (its name from `status.kueue`), as Kueue sees it.
async fn workload_of(env: &TestEnv, slice: &TpuSlice) -> DynamicObject {
    let name = &slice.status.as_ref().unwrap().kueue.as_ref().unwrap().workload;
    workloads(env).get(name).await.expect("the slice's Workload")
}

fn workloads(env: &TestEnv) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), &env.ns, &resource("Workload", "workloads"))
}

fn node_deletes(env: &TestEnv) -> u64 {
    env.gcp.call_count("tpu", "nodes.delete")
}

/// Kueue's own integrations change a running job's Workload priority in place when its
/// `kueue.x-k8s.io/priority-class` label changes; the Workload API allows a WorkloadPriorityClass
/// to be renamed while quota is reserved. Before, the operator took its own Workload for a
/// foreign one ("its priority class differs"), deleted the node and wrote a new Workload.
#[tokio::test]
async fn raising_a_running_slices_priority_changes_its_workload_in_place() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    let (low, high) = (format!("low-{}", env.ns), format!("high-{}", env.ns));
    priority_class(&env, &low, 100).await;
    priority_class(&env, &high, 1000).await;
    env.create(&slice("train", "tpu", Some(&low))).await;
    let before: TpuSlice = env.wait_for("train", "Ready at low priority", STEP, ready).await;
    let node = before.status.as_ref().unwrap().node_name.clone();
    let wl = workload_of(&env, &before).await;
    assert_eq!(wl.data["spec"]["priority"], 100);

    let relabelled = Instant::now();
    env.api::<TpuSlice>()
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"kueue.x-k8s.io/priority-class": high}}})),
        )
        .await
        .expect("relabel");
    let changed = loop {
        let now = workloads(&env)
            .get_opt(wl.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        if let Some(now) = now.filter(|w| w.data["spec"]["priority"] == 1000) {
            break now;
        }
        assert!(
            relabelled.elapsed() < test_kit::wait_limit(true),
            "the Workload's priority never followed the label"
        );
        // The cloud's clock moves on, so a node deleted meanwhile would be gone (and show).
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "Workload priority 1000 {:.2} s after the relabel",
        relabelled.elapsed().as_secs_f64()
    );
    // A few more passes (and Kueue's own reaction) leave the node alone.
    env.idle(Duration::from_secs(3), STEP).await;
    assert_eq!(node_deletes(&env), 0, "no node deleted for a priority change");
    assert_eq!(changed.data["spec"]["priorityClassRef"]["name"], high.as_str());
    assert_eq!(
        changed.metadata.uid, wl.metadata.uid,
        "the same Workload, changed in place"
    );
    let after: TpuSlice = env.api().get("train").await.unwrap();
    let st = after.status.as_ref().unwrap();
    assert!(ready(&after), "{st:#?}");
    assert_eq!(st.node_name, node, "the same node");
    let k = st.kueue.as_ref().unwrap();
    assert!(k.admitted && k.evictions == 0 && !k.stopped, "{k:?}");
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 1);
    let still = workload_of(&env, &after).await;
    assert_eq!(still.metadata.uid, wl.metadata.uid);
}

/// Chips of the TPU nodes that exist in the emulated cloud (all 8-chip slices here), deleting
/// ones included: they bill until gone.
fn chips_in_the_cloud(env: &TestEnv) -> usize {
    env.gcp.nodes().len() * 8
}

/// Kueue's own jobs keep a resource-in-use finalizer on their Workloads until they have stopped.
/// Without one, deleting a running slice's Workload by hand handed its quota to the next slice
/// at once, while the first node still billed: 16 chips on an 8-chip quota. Sampled every 100 ms
/// while the node's deletion is slowed (10 emulated minutes).
#[tokio::test]
async fn a_workload_deleted_by_hand_keeps_its_quota_until_the_node_is_gone() {
    let Some(env) = start().await else { return };
    let mut config = env.gcp.config();
    config.durations.tpu_delete = Duration::from_secs(600);
    env.gcp.set_config(config);
    queue(&env, "tpu", 8, None).await;
    env.create(&slice("first", "tpu", None)).await;
    let first: TpuSlice = env.wait_for("first", "first Ready", STEP, ready).await;
    env.create(&slice("second", "tpu", None)).await;
    env.wait_for::<TpuSlice, _>("second", "second queued behind", STEP, queued)
        .await;

    let wl = workload_of(&env, &first).await;
    let deleted = Instant::now();
    workloads(&env)
        .delete(wl.metadata.name.as_deref().unwrap(), &DeleteParams::default())
        .await
        .expect("delete the Workload by hand");
    // Until the quota has moved on: a second node READY (second's, or first's again: who goes
    // next is Kueue's to decide, as for any stopped workload).
    let (mut samples, mut most) = (0, 0);
    loop {
        most = most.max(chips_in_the_cloud(&env));
        samples += 1;
        let ready_nodes = env.gcp.nodes().iter().filter(|n| n["state"] == "READY").count();
        if env.gcp.call_count("tpu", "nodes.create") == 2 && ready_nodes == 1 {
            break;
        }
        assert!(
            deleted.elapsed() < test_kit::wait_limit(true),
            "the quota never moved on: {:#?}",
            env.gcp.nodes()
        );
        // 20 emulated seconds per sample: the first node takes 30 samples to go.
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{samples} samples over {:.1} s: at most {most} chips in the cloud on an 8-chip quota",
        deleted.elapsed().as_secs_f64()
    );
    assert_eq!(most, 8, "never more chips than the quota");
    let first: TpuSlice = env.api().get("first").await.unwrap();
    let k = first.status.unwrap().kueue.unwrap();
    assert_eq!(k.evictions, 1, "the withdrawn admission is counted: {k:?}");
    let again = workloads(&env)
        .get(&k.workload)
        .await
        .expect("first's new Workload");
    assert_ne!(again.metadata.uid, wl.metadata.uid, "a new Workload");
}

fn admitted(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.kueue.as_ref())
        .is_some_and(|k| k.admitted)
}

/// A suspended pipeline deletes its Workload once its job has ended; a suspended TpuSlice kept
/// its admitted Workload (and the team's quota) for as long as it stayed suspended. Now it
/// deletes it once its node is gone, and resuming queues it again.
#[tokio::test]
async fn a_suspended_slice_gives_its_quota_back_once_its_node_is_gone() {
    let Some(env) = start().await else { return };
    queue(&env, "tpu", 8, None).await;
    env.create(&slice("paused", "tpu", None)).await;
    let before: TpuSlice = env.wait_for("paused", "Ready", STEP, ready).await;
    let workload = before.status.unwrap().kueue.unwrap().workload;
    env.create(&slice("next", "tpu", None)).await;
    env.wait_for::<TpuSlice, _>("next", "queued behind", STEP, queued)
        .await;

    let suspend = |on: bool| json!({"spec": {"suspend": on}});
    let slices = env.api::<TpuSlice>();
    let params = PatchParams::default();
    slices
        .patch("paused", &params, &Patch::Merge(suspend(true)))
        .await
        .expect("suspend");
    let started = Instant::now();
    let mut node_gone = None;
    loop {
        if node_gone.is_none() && nodes_of(&env, "paused").await == 0 {
            node_gone = Some(Instant::now());
        }
        let next: TpuSlice = slices.get("next").await.unwrap();
        if admitted(&next) {
            break;
        }
        assert!(
            started.elapsed() < test_kit::wait_limit(true),
            "the suspended slice kept the quota: {:#?}",
            slices.get("paused").await.unwrap().status
        );
        env.gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = node_gone.expect("the node went before the quota moved on");
    let released = gone.elapsed();
    eprintln!(
        "quota handed on {:.2} s after the suspended slice's node was gone",
        released.as_secs_f64()
    );
    assert!(workloads(&env).get_opt(&workload).await.unwrap().is_none());
    env.wait_for::<TpuSlice, _>("next", "next Ready", STEP, ready)
        .await;

    slices
        .patch("paused", &params, &Patch::Merge(suspend(false)))
        .await
        .expect("resume");
    let resumed: TpuSlice = env
        .wait_for("paused", "resumed and queued again", STEP, queued)
        .await;
    assert!(!admitted(&resumed));
    assert_eq!(nodes_of(&env, "paused").await, 0);
}
