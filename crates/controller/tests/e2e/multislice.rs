//! Multislice TPU VM training end to end (TrainingPipeline → TpuSlice → one queued resource per
//! slice in gcp-emulator): all nodes READY before Ready, every host's container gets the JAX
//! multislice environment, a preempted slice is replaced alone (the others keep their nodes and
//! every slice's run starts again from the last committed checkpoint) without a counted attempt,
//! a slice lost more often than `maxSliceRestarts` ends the run with nothing left billing, and
//! deletion leaves nothing behind.

use std::{sync::Arc, time::Duration};

use gcp_emulator::Fault;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, progress_of},
    tpu_slice::TpuSlice,
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    Context,
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

const STEP: Duration = Duration::from_secs(15);

async fn started() -> TestEnv {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env
}

fn pipeline(name: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!(
        "../../../../examples/tpu-vm-multislice-pipeline.yaml"
    ));
    tp.metadata.name = Some(name.into());
    tp
}

fn ready_with_all_nodes(s: &TpuSlice) -> bool {
    s.status.as_ref().is_some_and(|st| {
        progress_of(&st.conditions) == Some(Progress::Ready) && st.node_states == ["READY", "READY"]
    })
}

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn train_stage(tp: &TrainingPipeline) -> Option<&tpu_operator_api::training_pipeline::StageStatus> {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
}

fn train_attempts(tp: &TrainingPipeline) -> i32 {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
        .map(|s| s.attempts)
        .unwrap_or_default()
}

/// The node of slice `k`, from slice 0's (`<id>-s0`; `<id>-s<k>`, `<id>-s<k>r<n>` once the
/// slice was replaced `n` times).
fn slice_node(st: &tpu_operator_api::tpu_slice::TpuSliceStatus, k: usize) -> String {
    let first = st.node_name.clone().unwrap();
    let prefix = first.strip_suffix("-s0").expect("slice 0's node is <id>-s0");
    match st.slice_restarts.get(k).copied().unwrap_or(0) {
        0 => format!("{prefix}-s{k}"),
        n => format!("{prefix}-s{k}r{n}"),
    }
}

/// Waits until the workload containers of both slices started, and checks the environment
/// each got: slice `k` is node `<id>-s<k>` in its own queued resource, the coordinator is slice
/// 0's first worker on port 8080.
async fn check_hosts(env: &TestEnv, slice: &TpuSlice) -> Vec<String> {
    let st = slice.status.clone().unwrap();
    let first = st.node_name.clone().unwrap();
    let nodes = [first.clone(), slice_node(&st, 1)];
    // A second a poll: the workloads end 600 s of cloud time after they start, and the test
    // preempts one of them next.
    env.wait_for::<TpuSlice, _>(
        &slice.metadata.name.clone().unwrap(),
        "both workloads started",
        Duration::from_secs(1),
        |_| nodes.iter().all(|n| env.gcp.workload_env(n).is_some()),
    )
    .await;
    let cloud = env.gcp.nodes();
    let body = |name: &str| cloud.iter().find(|n| n["name"] == name).cloned().unwrap();
    let ip0 = body(&first)["networkEndpoints"][0]["ipAddress"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(st.worker_ips.first(), Some(&ip0));
    for (k, name) in nodes.iter().enumerate() {
        let b = body(name);
        let own_queue = name.replace("/nodes/", "/queuedResources/");
        assert_eq!(b["queuedResource"], own_queue.as_str(), "{b:#}");
        let host = env.gcp.workload_env(name).unwrap();
        assert_eq!(
            host["MEGASCALE_COORDINATOR_ADDRESS"],
            format!("{ip0}:8080"),
            "{host:?}"
        );
        assert_eq!(host["MEGASCALE_NUM_SLICES"], "2", "{host:?}");
        assert_eq!(host["MEGASCALE_SLICE_ID"], k.to_string(), "{host:?}");
        assert_eq!(host["MEGASCALE_PORT"], "8080", "{host:?}");
        assert_eq!(
            host["CHECKPOINT_DIR"], "gs://demo-project-tpu-data/models/multislice-run-1/checkpoints/",
            "{host:?}"
        );
    }
    nodes.to_vec()
}

#[tokio::test]
async fn multislice_pipeline_converges_survives_a_preempted_slice_and_leaves_nothing() {
    let env = started().await;
    env.create(&pipeline("ms")).await;
    let slice = env
        .wait_for::<TpuSlice, _>(
            "ms-train",
            "Ready with both nodes READY",
            STEP,
            ready_with_all_nodes,
        )
        .await;
    let st = slice.status.clone().unwrap();
    assert_eq!(st.chips, Some(16), "two v4-16 slices of 8 chips");
    assert_eq!(st.hosts, Some(4));
    // One queued resource per slice, each with one node of its own id.
    let qrs = env.gcp.queued_resources();
    assert_eq!(qrs.len(), 2, "{qrs:#?}");
    for qr in &qrs {
        let spec = &qr["tpu"]["nodeSpec"][0];
        assert!(spec.get("multisliceParams").is_none(), "{qr:#}");
        assert!(
            qr["name"]
                .as_str()
                .unwrap()
                .ends_with(spec["nodeId"].as_str().unwrap())
        );
    }
    assert_eq!(env.gcp.nodes().len(), 2);
    let first_nodes = check_hosts(&env, &slice).await;
    let second = Duration::from_secs(1);
    env.wait_for::<TrainingPipeline, _>("ms", "Training", second, |tp| phase(tp) == Phase::Training)
        .await;

    // Preempting one slice replaces that slice alone: slice 0 keeps its node.
    env.gcp
        .inject(Fault::PreemptNode {
            name: first_nodes[1].clone(),
        })
        .unwrap();
    let again = env
        .wait_for::<TpuSlice, _>("ms-train", "Ready after slice 1 was replaced", STEP, |s| {
            ready_with_all_nodes(s) && s.status.as_ref().is_some_and(|st| st.slice_restarts == [0, 1])
        })
        .await;
    let st = again.status.as_ref().unwrap();
    assert_eq!(st.recreations, 0, "no whole-run recreation");
    assert!(st.replacing_slices.is_empty(), "{st:?}");
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 3);
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.delete"), 1);
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 0);
    let second_nodes = check_hosts(&env, &again).await;
    assert_eq!(first_nodes[0], second_nodes[0], "slice 0 kept its node");
    assert!(second_nodes[1].ends_with("-s1r1"), "{second_nodes:?}");
    assert_eq!(env.gcp.nodes().len(), 2);

    let done = env
        .wait_for::<TrainingPipeline, _>("ms", "Succeeded", STEP, |tp| phase(tp) == Phase::Succeeded)
        .await;
    assert_eq!(train_attempts(&done), 1, "the preemption used no retry");
    assert_eq!(done.status.as_ref().unwrap().attempts, 1);

    env.api::<TrainingPipeline>()
        .delete("ms", &Default::default())
        .await
        .unwrap();
    env.wait_gone::<TrainingPipeline>("ms", STEP).await;
    env.wait_gone::<TpuSlice>("ms-train", STEP).await;
    assert!(
        env.gcp.queued_resources().is_empty(),
        "{:#?}",
        env.gcp.queued_resources()
    );
    assert!(env.gcp.nodes().is_empty(), "{:#?}", env.gcp.nodes());
    let counts = env.gcp.resource_counts();
    assert_eq!(counts, gcp_emulator::ResourceCounts::default(), "0 leaks");
}

/// The example pipeline on `count` slices, each replaced alone at most `max` times.
fn pipeline_on(name: &str, count: i32, max: Option<i32>) -> TrainingPipeline {
    let mut tp = pipeline(name);
    let slice = &mut tp.spec.training.tpu_vm.as_mut().unwrap().slice;
    let m = slice.multislice.as_mut().unwrap();
    m.node_count = count;
    m.max_slice_restarts = max;
    tp
}

fn all_ready(s: &TpuSlice, count: usize) -> bool {
    s.status.as_ref().is_some_and(|st| {
        progress_of(&st.conditions) == Some(Progress::Ready)
            && st.node_states.len() == count
            && st.node_states.iter().all(|n| n == "READY")
    })
}

/// A 4-slice Spot multislice loses slice 2: 1 create and 1 delete, both slice 2's, nothing on
/// slices 0, 1 and 3; every slice's run stops and starts again from at least the step committed
/// when slice 2 was lost; the time to resume is measured against one slice's provisioning time.
#[tokio::test]
async fn a_lost_slice_of_four_is_replaced_alone_and_every_slice_resumes_from_the_last_checkpoint() {
    let env = started().await;
    // A run far longer than the test: the clock moves on every poll, whether or not a loaded
    // machine has run the operator's passes, and slice 0's run must not end before slice 3's
    // starts (600 s, the default, did once beside four busy cores).
    let mut config = env.gcp.config();
    config.durations.tpu_workload = Duration::from_secs(6 * 3600);
    env.gcp.set_config(config);
    env.create(&pipeline_on("ms4", 4, None)).await;
    let ready = env
        .wait_for::<TpuSlice, _>("ms4-train", "Ready with 4 nodes", STEP, |s| all_ready(s, 4))
        .await;
    let st = ready.status.clone().unwrap();
    let nodes: Vec<String> = (0..4).map(|k| slice_node(&st, k)).collect();
    assert!(
        nodes.iter().all(|n| env.gcp.workload_started(n).is_some()),
        "all 4 run once Ready"
    );
    let qr2 = nodes[2].replace("/nodes/", "/queuedResources/");
    // Each slice's container starts when its node is told the coordinator, one node per pass, so
    // slice 0's has run longest (and committed checkpoints, one per 120 s): slice 2 is lost a
    // minute after the last one started.
    env.gcp.clock().advance(Duration::from_secs(60));
    env.gcp.clear_calls();

    env.gcp
        .inject(Fault::PreemptNode {
            name: nodes[2].clone(),
        })
        .unwrap();
    let lost_at = env.gcp.clock().now();
    // Steps of 1 s from here: the run's time is what is measured, and the survivors' containers
    // must be stopped before they finish.
    let step = Duration::from_secs(1);
    let replaced = env
        .wait_for::<TpuSlice, _>("ms4-train", "Ready after slice 2 was replaced", step, |s| {
            all_ready(s, 4) && s.status.as_ref().is_some_and(|st| st.slice_restarts == [0, 0, 1])
        })
        .await;
    let before = nodes.clone();
    let nodes: Vec<String> = (0..4)
        .map(|k| slice_node(replaced.status.as_ref().unwrap(), k))
        .collect();
    assert_eq!(
        [&before[0], &before[1], &before[3]],
        [&nodes[0], &nodes[1], &nodes[3]],
        "slices 0, 1 and 3 keep their nodes"
    );
    assert!(nodes[2].ends_with("-s2r1"), "{nodes:?}");
    env.wait_for::<TpuSlice, _>("ms4-train", "4 workloads run again", step, |_| {
        nodes
            .iter()
            .all(|n| env.gcp.workload_started(n).is_some_and(|(t0, _)| t0 > lost_at))
    })
    .await;

    assert_only_slice_writes(&env, qr2.rsplit('/').next().unwrap());

    // The pipeline's train stage counts the restart apart, and spends no attempt on it.
    let tp = env
        .wait_for::<TrainingPipeline, _>("ms4", "the restart on its train stage", step, |tp| {
            train_stage(tp)
                .and_then(|s| s.interruptions.as_ref())
                .is_some_and(|i| i.slice_restarts == 1)
        })
        .await;
    let interruptions = train_stage(&tp).unwrap().interruptions.clone().unwrap();
    assert_eq!(interruptions.preemptions, 0, "{interruptions:?}");
    assert_eq!(train_attempts(&tp), 1);

    let (resumed, committed) = resumed_from_the_checkpoint(&env, &nodes, lost_at);
    let resume = resumed.iter().map(|(t0, _)| *t0).max().unwrap() - lost_at;
    // One slice's provisioning in the emulator (a queued resource accepted, queued, granted and
    // provisioned): the replacement is asked for while the lost one is still being deleted, so
    // the run resumes within that and a minute of noticing, stopping and telling.
    let d = gcp_emulator::Config::default().durations;
    let provisioning = d.qr_accept + d.qr_queue + d.qr_wait + d.qr_provision;
    eprintln!(
        "partial restart: one slice's provisioning {}s, time to resume {}s, resumed at step >= {committed}",
        provisioning.as_secs(),
        resume.num_seconds()
    );
    // Measured 306-314 s here (provisioning + 36-44 s); the bound leaves a minute more, since the test's
    // clock moves on whether or not a loaded machine has run the operator's passes yet.
    let bound = provisioning + Duration::from_secs(120);
    assert!(
        resume.to_std().unwrap() <= bound,
        "time to resume {resume} against {bound:?}"
    );

    env.api::<TrainingPipeline>()
        .delete("ms4", &Default::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("ms4-train", STEP).await;
    assert_eq!(
        env.gcp.resource_counts(),
        gcp_emulator::ResourceCounts::default(),
        "0 leaks"
    );
}

/// The TPU writes since the calls were cleared: 1 create and 1 delete, both slice `id`'s.
fn assert_only_slice_writes(env: &TestEnv, id: &str) {
    let calls = env.gcp.calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| {
            c.service == "tpu"
                && ["queuedResources.create", "queuedResources.delete", "nodes.delete"]
                    .contains(&c.method.as_str())
        })
        .map(|c| format!("{} {}{}", c.method, c.path, c.query))
        .collect();
    assert_eq!(writes.len(), 2, "1 create and 1 delete: {writes:#?}");
    assert!(
        writes.iter().all(|w| w.contains(id)),
        "both slice 2's: {writes:#?}"
    );
}

/// Every slice's run stopped once at the loss (at `lost_at`) and started again from at least the
/// step committed then: where each started again, and that step.
fn resumed_from_the_checkpoint(
    env: &TestEnv,
    nodes: &[String],
    lost_at: chrono::DateTime<chrono::Utc>,
) -> (Vec<(chrono::DateTime<chrono::Utc>, u64)>, u64) {
    let lost = env.gcp.workload_interruptions();
    let at_loss: Vec<_> = lost.iter().filter(|i| i.at >= lost_at).collect();
    let committed = at_loss.iter().map(|i| i.committed_step).max().unwrap();
    assert!(
        committed > 0,
        "checkpoints were committed before the loss: {at_loss:#?}"
    );
    assert_eq!(at_loss.len(), 4, "every slice's run stopped once: {at_loss:#?}");
    let resumed: Vec<(chrono::DateTime<chrono::Utc>, u64)> = nodes
        .iter()
        .map(|n| env.gcp.workload_started(n).unwrap())
        .collect();
    assert!(
        resumed.iter().all(|(_, step)| *step >= committed),
        "every slice resumes from at least step {committed}: {resumed:?}"
    );
    (resumed, committed)
}

/// The same slice lost more often than `maxSliceRestarts`: the run stops with its reason, and
/// every slice's queued resource is deleted so nothing bills for a run that will not go on.
#[tokio::test]
async fn a_slice_lost_past_max_slice_restarts_ends_the_run_with_nothing_billing() {
    let env = started().await;
    let mut tp = pipeline_on("ms-sys", 2, Some(1));
    tp.spec.max_retries = 0;
    env.create(&tp).await;
    let step = Duration::from_secs(1);
    for round in 1..=2 {
        let s = env
            .wait_for::<TpuSlice, _>("ms-sys-train", "Ready", step, |s| all_ready(s, 2))
            .await;
        let node = slice_node(s.status.as_ref().unwrap(), 1);
        env.gcp.inject(Fault::PreemptNode { name: node }).unwrap();
        if round == 1 {
            env.wait_for::<TpuSlice, _>("ms-sys-train", "slice 1 replaced once", step, |s| {
                s.status.as_ref().is_some_and(|st| st.slice_restarts == [0, 1])
            })
            .await;
        }
    }
    // The pipeline (no retries left) fails with the slice's reason, and deletes the slice.
    let failed = env
        .wait_for::<TrainingPipeline, _>("ms-sys", "Failed", step, |tp| phase(tp) == Phase::Failed)
        .await;
    let message = failed.status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("SliceRestartsExhausted") && message.contains("maxSliceRestarts = 1"),
        "{message}"
    );
    env.wait_gone::<TpuSlice>("ms-sys-train", step).await;
    assert_eq!(
        env.gcp.resource_counts(),
        gcp_emulator::ResourceCounts::default(),
        "0 leaks"
    );
    // 2 slices asked for, slice 1 once more; none after the second loss.
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 3);
}
