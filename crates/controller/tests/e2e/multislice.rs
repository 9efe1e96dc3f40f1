//! Issue 24: multislice TPU VM training end to end (TrainingPipeline → TpuSlice → one queued
//! resource with `multisliceParams` in gcp-emulator): all nodes READY before Ready, every host's
//! container gets the JAX multislice environment, a preempted slice recreates the whole run
//! without a counted attempt, and deletion leaves nothing behind.

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

fn train_attempts(tp: &TrainingPipeline) -> i32 {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
        .map(|s| s.attempts)
        .unwrap_or_default()
}

/// Waits until the workload containers of `nodes` started, and checks the environment each
/// got: slice `k` is node `<prefix>-k`, the coordinator is slice 0's first worker on port 8080.
async fn check_hosts(env: &TestEnv, slice: &TpuSlice) -> Vec<String> {
    let st = slice.status.clone().unwrap();
    let first = st.node_name.clone().unwrap();
    let prefix = first
        .strip_suffix("-0")
        .expect("slice 0's node is <prefix>-0")
        .to_string();
    let nodes = [first.clone(), format!("{prefix}-1")];
    env.wait_for::<TpuSlice, _>(
        &slice.metadata.name.clone().unwrap(),
        "both workloads started",
        STEP,
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
        assert_eq!(b["multisliceNode"], true, "{b:#}");
        assert_eq!(
            b["queuedResource"],
            st.queued_resource_name.clone().unwrap().as_str()
        );
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
    // One queued resource holding both slices.
    let qrs = env.gcp.queued_resources();
    assert_eq!(qrs.len(), 1, "{qrs:#?}");
    let params = &qrs[0]["tpu"]["nodeSpec"][0]["multisliceParams"];
    assert_eq!(params["nodeCount"], 2, "{qrs:#?}");
    assert_eq!(env.gcp.nodes().len(), 2);
    let first_nodes = check_hosts(&env, &slice).await;
    env.wait_for::<TrainingPipeline, _>("ms", "Training", STEP, |tp| phase(tp) == Phase::Training)
        .await;

    // Preempting one slice preempts the run: the whole queued resource is recreated.
    env.gcp
        .inject(Fault::PreemptNode {
            name: first_nodes[1].clone(),
        })
        .unwrap();
    let again = env
        .wait_for::<TpuSlice, _>("ms-train", "Ready after a recreation", STEP, |s| {
            ready_with_all_nodes(s) && s.status.as_ref().is_some_and(|st| st.recreations == 1)
        })
        .await;
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 2);
    assert_eq!(env.gcp.call_count("tpu", "nodes.create"), 0);
    assert_eq!(
        env.gcp.queued_resources().len(),
        1,
        "the preempted one is deleted"
    );
    let second_nodes = check_hosts(&env, &again).await;
    assert_ne!(first_nodes, second_nodes);
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
