//! Maintenance announced is maintenance handled, through the user's path (TrainingPipeline →
//! controllers → gcp-emulator → status): the notice in the slice's status and the pipeline's train
//! stage, a checkpoint requested `checkpointLead` before the window, the run carrying on after the
//! maintenance from that checkpoint, counted as a maintenance restart and not as a retry or a
//! preemption. Two runs side by side measure what the request saves: the same notice, one run
//! asking for a checkpoint and one not (`checkpointLead: 0s`).

use std::{sync::Arc, time::Duration};

use gcp_emulator::{Cause, Fault, WorkloadInterruption};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::{CHECKPOINT_REQUEST_METADATA, MaintenanceSpec, MaintenanceState, StartEarly, TpuSlice},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    Context,
    kinds::{tpu_slice, training_pipeline},
    never_shutdown,
};

pub(super) const STEP: Duration = Duration::from_secs(5);

pub(super) async fn started() -> TestEnv {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    env
}

/// The TPU VM example on on-demand capacity (maintenance is not a preemption), with its own
/// model directory and `checkpointLead`.
pub(super) fn run(name: &str, lead: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.metadata.name = Some(name.into());
    tp.spec.preprocess = None;
    tp.spec.artifacts.model_dir = format!("gs://demo-project-tpu-data/models/{name}/");
    let slice = &mut tp.spec.training.tpu_vm.as_mut().unwrap().slice;
    slice.capacity = None;
    slice.maintenance = Some(MaintenanceSpec {
        checkpoint_lead: Some(lead.into()),
        ..MaintenanceSpec::default()
    });
    tp
}

pub(super) fn node_of(env: &TestEnv, run: &str) -> serde_json::Value {
    env.gcp
        .nodes()
        .into_iter()
        .find(|n| {
            n["metadata"]["tpu-operator-done-uri"]
                .as_str()
                .is_some_and(|u| u.contains(run))
        })
        .unwrap_or_else(|| panic!("no node of {run}"))
}

pub(super) fn interruption(env: &TestEnv, node: &str) -> WorkloadInterruption {
    let all = env.gcp.workload_interruptions();
    all.iter()
        .find(|i| i.node == node && i.cause == Cause::Maintenance)
        .cloned()
        .unwrap_or_else(|| panic!("no maintenance interruption of {node}: {all:?}"))
}

fn train_stage(tp: &TrainingPipeline) -> tpu_operator_api::training_pipeline::StageStatus {
    tp.status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == StageName::Train))
        .cloned()
        .expect("a train stage")
}

pub(super) fn ended(m: Option<&tpu_operator_api::tpu_slice::MaintenanceStatus>) -> bool {
    m.is_some_and(|m| m.state == MaintenanceState::Ended)
}

pub(super) fn window_start(node: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    let at = node["upcomingMaintenance"]["windowStartTime"]
        .as_str()
        .expect("a notice");
    chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc()
}

/// The same notice on both runs' nodes, its window a minute after a periodic checkpoint (they
/// come every 120 s of cloud time): the moment the next one is written, the window is set 60 s
/// out. Returns the nodes' names, in the order of `runs`.
pub(super) async fn announce_after_a_checkpoint(
    env: &TestEnv,
    runs: [&str; 2],
    can_reschedule: bool,
) -> Vec<String> {
    let written = |env: &TestEnv| {
        let objects = env.gcp.objects("demo-project-tpu-data");
        let prefix = format!("models/{}/checkpoints/", runs[1]);
        let done = objects.iter().filter(|o| o.name.starts_with(&prefix));
        done.filter(|o| o.name.ends_with("_CHECKPOINT_METADATA")).count()
    };
    let before = written(env);
    let what = format!("the next checkpoint of {}", runs[1]);
    env.until(&what, Duration::from_secs(1), async || written(env) != before)
        .await;
    let nodes: Vec<String> = runs
        .iter()
        .map(|r| node_of(env, r)["name"].as_str().unwrap().to_string())
        .collect();
    for name in &nodes {
        let notice = Fault::ScheduleMaintenance {
            name: name.clone(),
            start_in_secs: 60,
            duration_secs: 300,
            can_reschedule,
            unscheduled: false,
        };
        env.gcp.inject(notice).unwrap();
    }
    nodes
}

/// Waits, the clock still, until `slice`'s maintenance status shows its checkpoint request. A
/// run that waits for its window loses the lead's steps only if its checkpoint is taken at the
/// lead's start: a clock moving on while a busy machine ran its pass late took it closer to the
/// window (16 steps lost instead of at least 20, once in CI).
pub(super) async fn checkpoint_asked(env: &TestEnv, slice: &str) {
    env.wait_for::<TpuSlice, _>(slice, "its checkpoint request", Duration::ZERO, |s| {
        s.status
            .as_ref()
            .and_then(|st| st.maintenance.as_ref())
            .is_some_and(|m| m.checkpoint_request_time.is_some())
    })
    .await;
}

/// Waits until each of `runs` shows a checkpoint in its status, the clock moving a second a
/// poll: the workloads end 600 s after they start, and the tests need them running after this.
pub(super) async fn first_checkpoints(env: &TestEnv, runs: [&str; 2]) {
    for name in runs {
        let second = Duration::from_secs(1);
        env.wait_for::<TrainingPipeline, _>(name, "a first checkpoint", second, |tp| {
            tp.status
                .as_ref()
                .and_then(|s| s.checkpoint.as_ref())
                .is_some_and(|c| c.latest_step.is_some())
        })
        .await;
    }
}

/// Both runs succeed with one attempt, their train stage counting one maintenance restart.
pub(super) async fn finish_without_a_retry(env: &TestEnv, runs: [&str; 2]) {
    for name in runs {
        let done = env
            .wait_for::<TrainingPipeline, _>(name, "the run succeeded", Duration::from_secs(15), |tp| {
                tp.status.as_ref().is_some_and(|s| s.phase == Phase::Succeeded)
            })
            .await;
        let stage = train_stage(&done);
        assert_eq!(stage.attempts, 1, "no retry spent: {stage:?}");
        let i = stage.interruptions.expect("interruptions on the train stage");
        assert_eq!((i.preemptions, i.maintenance_restarts), (0, 1), "{i:?}");
    }
}

#[tokio::test]
async fn an_announced_maintenance_shows_gets_a_checkpoint_first_and_spends_no_retry() {
    let env = started().await;
    env.create(&run("asks", "10s")).await;
    env.create(&run("silent", "0s")).await;
    first_checkpoints(&env, ["asks", "silent"]).await;
    let nodes = announce_after_a_checkpoint(&env, ["asks", "silent"], false).await;
    let window = window_start(&node_of(&env, "asks"));

    // The notice reaches status from the zone listing, with cloud time standing still: the slice
    // is not read by itself for it.
    let seen = env
        .wait_for::<TpuSlice, _>("asks-train", "the notice in status", Duration::ZERO, |s| {
            s.status.as_ref().and_then(|st| st.maintenance.as_ref()).is_some()
        })
        .await;
    let st = seen.status.unwrap();
    let m = st.maintenance.unwrap();
    assert_eq!(
        (m.kind.as_str(), m.state),
        ("Scheduled", MaintenanceState::Pending)
    );
    assert!(
        m.window_start_time.is_some() && m.window_end_time.is_some(),
        "{m:?}"
    );
    assert!(
        m.checkpoint_request_time.is_none(),
        "not asked 60 s ahead with a 10 s lead"
    );
    let c = find_condition(&st.conditions, types::MAINTENANCE_PENDING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "MaintenanceScheduled")
    );
    env.wait_for_event("asks-train", "MaintenanceScheduled", Duration::ZERO)
        .await;

    // Cloud time moved to 10 s before the window: the checkpoint is asked, once.
    let now = env.gcp.clock().now();
    let lead_start = window - chrono::Duration::seconds(10);
    env.gcp.clock().advance((lead_start - now).to_std().unwrap());
    checkpoint_asked(&env, "asks-train").await;
    let requests = env.gcp.checkpoint_requests();
    assert_eq!(
        requests.len(),
        1,
        "one request, on the node that asks: {requests:?}"
    );
    assert_eq!(requests[0].node, nodes[0]);
    let node = node_of(&env, "asks");
    assert_eq!(
        node["metadata"][CHECKPOINT_REQUEST_METADATA], node["upcomingMaintenance"]["windowStartTime"],
        "the request names the window"
    );
    env.wait_for_event("asks-train", "CheckpointRequested", Duration::ZERO)
        .await;

    // Under way: the pipeline keeps training (the run goes on from its checkpoint after it).
    env.wait_for::<TpuSlice, _>("asks-train", "the maintenance under way", STEP, |s| {
        s.status.as_ref().is_some_and(|st| st.maintenance_restarts == 1)
    })
    .await;
    let during: TrainingPipeline = env.api::<TrainingPipeline>().get("asks").await.unwrap();
    let during = during.status.unwrap();
    if during.phase != Phase::Succeeded {
        assert_eq!(during.phase, Phase::Training, "{:?}", during.message);
    }
    // The window passes; each slice counts one maintenance restart and is Ready again.
    for name in ["asks-train", "silent-train"] {
        env.wait_for::<TpuSlice, _>(name, "the maintenance over", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.maintenance_restarts == 1 && ended(st.maintenance.as_ref()))
        })
        .await;
        env.wait_for_event(name, "MaintenanceEnded", STEP).await;
    }
    finish_without_a_retry(&env, ["asks", "silent"]).await;

    // What the request saved: the steps trained since the newest checkpoint when the window
    // started, with and without it. One step is workloadCheckpoint / 100 = 1.2 s of cloud time,
    // so a 10 s lead loses the 8 steps trained in it.
    let asking = interruption(&env, &nodes[0]);
    let silent = interruption(&env, &nodes[1]);
    eprintln!("steps lost at the window: with a checkpoint request {asking:?}; without {silent:?}");
    assert!(asking.steps_lost <= 9, "{asking:?}");
    assert_eq!(
        asking.committed_step, requests[0].step,
        "the committed step is the one written on request: {asking:?} {requests:?}"
    );
    assert!(requests[0].step > 100, "{requests:?}");
    assert!(
        silent.steps_lost > 25,
        "the silent run lost what it trained since its checkpoint: {silent:?}"
    );
}

/// Runs `early` (default `startEarly`) and `waits` (`startEarly: Never`) side by side, each with
/// a 30 s `checkpointLead`, to their first checkpoint.
async fn early_and_waiting(env: &TestEnv) {
    env.create(&run("early", "30s")).await;
    let mut waits = run("waits", "30s");
    let slice = &mut waits.spec.training.tpu_vm.as_mut().unwrap().slice;
    slice.maintenance.as_mut().unwrap().start_early = Some(StartEarly::Never);
    env.create(&waits).await;
    first_checkpoints(env, ["early", "waits"]).await;
}

/// A maintenance Google lets the customer move is started by the operator itself right after
/// the checkpoint it asked for is committed, so what was trained since is not lost; the run
/// that waits for the window loses the steps of the lead.
#[tokio::test]
async fn a_reschedulable_maintenance_starts_right_after_the_asked_checkpoint() {
    let env = started().await;
    early_and_waiting(&env).await;
    let nodes = announce_after_a_checkpoint(&env, ["early", "waits"], true).await;
    let window = window_start(&node_of(&env, "early"));

    // 30 s before the window both are asked for a checkpoint; with cloud time standing still the
    // early run finds it committed and starts the maintenance.
    let now = env.gcp.clock().now();
    let lead_start = window - chrono::Duration::seconds(30);
    env.gcp.clock().advance((lead_start - now).to_std().unwrap());
    let started = env
        .wait_for::<TpuSlice, _>(
            "early-train",
            "the maintenance started early",
            Duration::ZERO,
            |s| {
                s.status
                    .as_ref()
                    .and_then(|st| st.maintenance.as_ref())
                    .is_some_and(|m| m.start_request_time.is_some())
            },
        )
        .await;
    let m = started.status.unwrap().maintenance.unwrap();
    let committed = m
        .committed_checkpoint
        .clone()
        .expect("the checkpoint it followed");
    assert!(
        committed.starts_with("gs://demo-project-tpu-data/models/early/checkpoints/"),
        "{committed}"
    );
    env.wait_for_event("early-train", "MaintenanceStartedEarly", Duration::ZERO)
        .await;
    // The run that waits asks its checkpoint at the same instant.
    checkpoint_asked(&env, "waits-train").await;
    assert_eq!(env.gcp.call_count("tpu", "nodes.performMaintenance"), 1);

    for name in ["early-train", "waits-train"] {
        env.wait_for::<TpuSlice, _>(name, "the maintenance over", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.maintenance_restarts == 1 && ended(st.maintenance.as_ref()))
        })
        .await;
    }
    // Started before its window, the maintenance's window then says when it began: still the
    // one announced, with its request and start kept, and announced once.
    let over: TpuSlice = env.api::<TpuSlice>().get("early-train").await.unwrap();
    let m = over.status.unwrap().maintenance.unwrap();
    assert!(
        m.checkpoint_request_time.is_some() && m.start_request_time.is_some(),
        "{m:?}"
    );
    let events = env
        .wait_for_event("early-train", "MaintenanceEnded", Duration::ZERO)
        .await;
    let announced = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("MaintenanceScheduled"))
        .count();
    assert_eq!(announced, 1, "{events:?}");
    finish_without_a_retry(&env, ["early", "waits"]).await;
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.performMaintenance"),
        1,
        "started once, and only where allowed"
    );

    // One step is 1.2 s of cloud time: the run that waited lost the ~25 steps of the lead.
    let requests = env.gcp.checkpoint_requests();
    let early = interruption(&env, &nodes[0]);
    let waited = interruption(&env, &nodes[1]);
    eprintln!("steps lost: started early {early:?}; at the window {waited:?}; requests {requests:?}");
    assert!(early.at < window, "started before its window: {early:?}");
    assert!(early.steps_lost <= 1, "{early:?}");
    let asked = requests.iter().find(|r| r.node == nodes[0]).expect("a request");
    assert_eq!(early.committed_step, asked.step, "{early:?} {asked:?}");
    assert!(waited.steps_lost >= 20, "{waited:?}");
}
