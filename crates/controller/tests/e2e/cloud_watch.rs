//! The cloud watch end to end: objects waiting on a cloud state change are woken by one paged list
//! per collection and location, not by a read of each object every poll; when listing is refused
//! they fall back to polling one by one.

use std::{sync::Arc, time::Duration};

use gcp_emulator::{Code, Fault};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, progress_of},
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice},
    never_shutdown, shutdown_on,
};

const STEP: Duration = Duration::from_secs(20);
const OUTPUT: &str = "gs://demo-data/processed/";

fn slice(name: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": "us-east5-b",
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"spot": {}}
        }
    }))
    .expect("TpuSlice fixture")
}

fn batch(name: &str) -> PreprocessBatch {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "PreprocessBatch",
        "metadata": {"name": name},
        "spec": {
            "region": "us-central1",
            "pyspark": {"mainPythonFileUri": "gs://demo-data/scripts/tokenize.py", "args": [OUTPUT]},
            "outputUri": OUTPUT
        }
    }))
    .expect("PreprocessBatch fixture")
}

/// Controllers whose per-object backstop poll is far beyond the test's length: only the watch
/// can tell them that the cloud moved on.
async fn start(env: &mut TestEnv, tweak: impl FnOnce(&mut Context)) {
    let mut ctx = env.context().await;
    ctx.config.poll_active = Duration::from_millis(50);
    ctx.config.poll_watched = Duration::from_secs(3600);
    tweak(&mut ctx);
    let ctx = Arc::new(ctx);
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx, never_shutdown()));
}

fn slice_ready(s: &TpuSlice) -> bool {
    s.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
}

fn batch_ready(b: &PreprocessBatch) -> bool {
    b.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
}

#[tokio::test]
async fn state_changes_arrive_by_listing_without_a_read_per_object() {
    let mut env = TestEnv::start().await;
    start(&mut env, |_| {}).await;
    let names = ["w1", "w2", "w3"];
    for n in names {
        env.create(&slice(n)).await;
    }
    env.create(&batch("wb")).await;
    for n in names {
        env.wait_for(n, "slice Ready", STEP, slice_ready).await;
    }
    env.wait_for("wb", "batch Ready", STEP, batch_ready).await;
    let counts = env.gcp.call_counts();
    eprintln!("{counts:?}");
    let count = |m: &str| counts.get(m).copied().unwrap_or(0);
    assert_eq!(count("tpu.nodes.create"), 3);
    assert!(count("tpu.nodes.list") >= 1, "the watch lists nodes: {counts:?}");
    // One read per slice before its create (it must not exist); READY came from a listing.
    assert!(
        count("tpu.nodes.get") <= 3,
        "READY must come from the listing, not a read per slice: {counts:?}"
    );
    assert!(count("dataproc.batches.list") >= 1, "{counts:?}");
    // SUCCEEDED leaves the (active-only) listing, so the batch reads its final state once.
    assert!(count("dataproc.batches.get") <= 2, "{counts:?}");
}

#[tokio::test]
async fn objects_poll_one_by_one_while_listing_is_refused() {
    let mut env = TestEnv::start().await;
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.list".into(),
            count: 1_000_000,
            code: Code::PermissionDenied,
            message: Some("Permission 'tpu.nodes.list' denied".into()),
        })
        .unwrap();
    start(&mut env, |ctx| {
        ctx.config.poll_capacity = Duration::from_secs(3600)
    })
    .await;
    env.create(&slice("polled")).await;
    env.wait_for("polled", "slice Ready", STEP, slice_ready).await;
    let counts = env.gcp.call_counts();
    let count = |m: &str| counts.get(m).copied().unwrap_or(0);
    // One refused listing (retried only every poll_capacity), then the slice polls by itself.
    assert_eq!(count("tpu.nodes.list"), 1, "{counts:?}");
    assert!(count("tpu.nodes.get") >= 2, "{counts:?}");
}

/// A listing that fails half-way (gcp-emulator's page tokens are offsets, so a filtered list that
/// shrinks while it is paged can answer "Page token is out of range") is listed again at once:
/// the waiting batch is not read by name (one failure had cost 31,718 reads at N = 10,000).
#[tokio::test]
async fn a_listing_that_fails_once_is_listed_again_not_read_object_by_object() {
    let mut env = TestEnv::start().await;
    env.gcp
        .inject(Fault::FailCalls {
            service: "dataproc".into(),
            method: "batches.list".into(),
            count: 1,
            code: Code::InvalidArgument,
            message: Some("Page token is out of range".into()),
        })
        .unwrap();
    start(&mut env, |ctx| {
        ctx.config.poll_capacity = Duration::from_secs(3600)
    })
    .await;
    env.create(&batch("relisted")).await;
    env.wait_for("relisted", "batch Ready", STEP, batch_ready).await;
    let counts = env.gcp.call_counts();
    let count = |m: &str| counts.get(m).copied().unwrap_or(0);
    assert!(count("dataproc.batches.list") >= 2, "{counts:?}");
    // As in the listing test above: one read of the final state, none while it waited.
    assert!(count("dataproc.batches.get") <= 2, "{counts:?}");
}

#[tokio::test]
async fn the_watch_can_be_turned_off() {
    let mut env = TestEnv::start().await;
    start(&mut env, |ctx| ctx.config.watch_lists = false).await;
    env.create(&slice("unwatched")).await;
    env.wait_for("unwatched", "slice Ready", STEP, slice_ready).await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.list"), 0);
    assert!(env.gcp.call_count("tpu", "nodes.get") >= 2);
}

#[tokio::test]
async fn a_second_run_on_the_same_context_is_woken_too() {
    // A leader that loses its lease stops its controllers and, on winning it again, runs new
    // ones on the same context: they must get the wake-ups (and a lister) of their own.
    let mut env = TestEnv::start().await;
    let mut ctx = env.context().await;
    ctx.config.poll_active = Duration::from_millis(50);
    ctx.config.poll_watched = Duration::from_secs(3600);
    let ctx = Arc::new(ctx);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn(tpu_slice::run(
        ctx.clone(),
        shutdown_on(async move {
            let _ = stop_rx.await;
        }),
    ));
    env.create(&slice("term1")).await;
    env.wait_for("term1", "slice Ready", STEP, slice_ready).await;
    stop_tx.send(()).unwrap();
    first.await.unwrap();
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    env.create(&slice("term2")).await;
    env.wait_for("term2", "slice Ready in the second run", STEP, slice_ready)
        .await;
    let gets = env.gcp.call_count("tpu", "nodes.get");
    assert!(
        gets <= 4,
        "READY came from listings in both runs: {:?}",
        env.gcp.call_counts()
    );
}

#[tokio::test]
async fn a_deletion_waits_on_the_listing_and_reads_the_node_once_at_the_end() {
    let mut env = TestEnv::start().await;
    start(&mut env, |_| {}).await;
    let names = ["d1", "d2", "d3"];
    for n in names {
        env.create(&slice(n)).await;
    }
    for n in names {
        env.wait_for(n, "slice Ready", STEP, slice_ready).await;
    }
    env.gcp.clear_calls();
    for n in names {
        env.api::<TpuSlice>()
            .delete(n, &Default::default())
            .await
            .expect("delete slice");
    }
    // The emulator's node takes 60 cloud seconds to go; at 0.5 s a tick that is over a second
    // of real time, in which a slice polling at `poll_active` (50 ms) would read its node ~24
    // times.
    for n in names {
        env.wait_gone::<TpuSlice>(n, Duration::from_millis(500)).await;
    }
    assert!(env.gcp.nodes().is_empty(), "{:#?}", env.gcp.nodes());
    let counts = env.gcp.call_counts();
    eprintln!("{counts:?}");
    let count = |m: &str| counts.get(m).copied().unwrap_or(0);
    assert_eq!(count("tpu.nodes.delete"), 3, "{counts:?}");
    assert!(count("tpu.nodes.list") >= 1, "the watch lists nodes: {counts:?}");
    // Per slice: the read before its delete and the one that confirms the absence the listing
    // showed (absence is never taken from a listing); one more for a pass that raced the delete.
    assert!(
        count("tpu.nodes.get") <= 3 * 3,
        "a deleting slice must wait on the listing, not read its node every poll: {counts:?}"
    );
}

/// The first deletion pass deletes a READY node by name without reading it. A NOT_FOUND to that
/// delete is not taken as the node gone: the next pass reads, finds the node still there, and
/// deletes it; only then does the finalizer go.
#[tokio::test]
async fn a_delete_answered_not_found_is_confirmed_by_a_read_before_the_finalizer_goes() {
    let mut env = TestEnv::start().await;
    start(&mut env, |_| {}).await;
    env.create(&slice("nf")).await;
    env.wait_for("nf", "slice Ready", STEP, slice_ready).await;
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "nodes.delete".into(),
            count: 1,
            code: Code::NotFound,
            message: None,
        })
        .unwrap();
    env.gcp.clear_calls();
    env.api::<TpuSlice>()
        .delete("nf", &Default::default())
        .await
        .expect("delete slice");
    env.wait_gone::<TpuSlice>("nf", Duration::from_millis(500)).await;
    let counts = env.gcp.call_counts();
    assert!(env.gcp.nodes().is_empty(), "a node was left: {counts:?}");
    let count = |m: &str| counts.get(m).copied().unwrap_or(0);
    assert_eq!(
        count("tpu.nodes.delete"),
        2,
        "the refused one, then after the read: {counts:?}"
    );
    assert!(
        count("tpu.nodes.get") >= 1,
        "the node is read after NOT_FOUND: {counts:?}"
    );
}

/// A slice whose node is already being deleted while its status still says READY (a crash after
/// the delete, before the status write; or someone else's delete): the delete by name is refused
/// as a precondition, and the slice reads the node instead of sending the same delete forever.
/// Listing is off and the stable poll an hour, so nothing reads the node before the deletion.
#[tokio::test]
async fn a_node_already_being_deleted_under_a_ready_status_is_read_and_waited_for() {
    let mut env = TestEnv::start().await;
    start(&mut env, |ctx| {
        ctx.config.watch_lists = false;
        ctx.config.poll_stable = Duration::from_secs(3600);
    })
    .await;
    env.create(&slice("busy")).await;
    let ready = env.wait_for("busy", "slice Ready", STEP, slice_ready).await;
    let node = ready.status.and_then(|s| s.node_name).expect("node name");
    env.ctx
        .gcp
        .tpu
        .delete_node(&node)
        .await
        .expect("a delete behind the slice's back");
    env.api::<TpuSlice>()
        .delete("busy", &Default::default())
        .await
        .expect("delete slice");
    env.wait_gone::<TpuSlice>("busy", Duration::from_millis(500))
        .await;
    assert!(env.gcp.nodes().is_empty(), "{:#?}", env.gcp.nodes());
    let deletes = env.gcp.call_count("tpu", "nodes.delete");
    assert_eq!(
        deletes, 2,
        "the delete behind its back, then the slice's one refused delete"
    );
}

/// Issue 35 item 7: a READY Spot slice settles (its stable poll is an hour here), yet a
/// preemption reaches it in seconds: the zone's node listing, one for every slice waiting there,
/// shows the node leave READY (before: noticed only at the slice's next stable poll).
#[tokio::test]
async fn a_preempted_ready_spot_slice_is_noticed_by_the_listing() {
    let mut env = TestEnv::start().await;
    start(&mut env, |ctx| ctx.config.poll_stable = Duration::from_secs(3600)).await;
    env.create(&slice("spot-ready")).await;
    let ready = env.wait_for("spot-ready", "slice Ready", STEP, slice_ready).await;
    let node = ready.status.and_then(|s| s.node_name).expect("node name");
    let gets = env.gcp.call_count("tpu", "nodes.get");
    env.gcp.inject(Fault::PreemptNode { name: node }).unwrap();
    env.wait_for::<TpuSlice, _>("spot-ready", "the preemption counted", STEP, |s| {
        s.status.as_ref().is_some_and(|st| st.recreations == 1)
    })
    .await;
    assert!(env.gcp.call_count("tpu", "nodes.list") >= 1);
    // The woken pass used the listed node: a preemption costs no read before the delete.
    assert!(
        env.gcp.call_count("tpu", "nodes.get") <= gets + 1,
        "{:?}",
        env.gcp.call_counts()
    );
}
