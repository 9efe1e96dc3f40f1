//! A reschedulable maintenance started early on every kind of slice, through the user's path
//! (CR → controllers → gcp-emulator → status): a queued slice and a multislice's slice through
//! `queuedResources.performMaintenanceQueuedResource` (naming only the slice's node), a Compute
//! Engine slice through `instances.performMaintenance` of its VM. Each starts right after the
//! checkpoint it asked for is committed; the steps lost are measured against a run that waits.

use std::time::Duration;

use test_kit::TestEnv;
use tpu_operator_api::{
    tpu_slice::{Capacity, QueuedCapacity, QueuedTier, StartEarly, TpuSlice},
    training_pipeline::TrainingPipeline,
};

use super::maintenance::{
    STEP, announce_after_a_checkpoint, checkpoint_asked, ended, finish_without_a_retry, first_checkpoints,
    interruption, node_of, run, started, window_start,
};

/// The maintenance of `slice` as status shows it, once `done` holds.
async fn maintenance_once(
    env: &TestEnv,
    slice: &str,
    what: &str,
    step: Duration,
    done: impl Fn(&tpu_operator_api::tpu_slice::MaintenanceStatus, i32) -> bool,
) -> tpu_operator_api::tpu_slice::MaintenanceStatus {
    let s = env
        .wait_for::<TpuSlice, _>(slice, what, step, |s| {
            let st = s.status.as_ref();
            let m = st.and_then(|st| st.maintenance.as_ref());
            m.is_some_and(|m| done(m, st.map_or(0, |st| st.maintenance_restarts)))
        })
        .await;
    s.status.unwrap().maintenance.unwrap()
}

/// `run(name)` on a queued resource of guaranteed capacity (on demand, through the queue).
fn queued_run(name: &str, start_early: StartEarly) -> TrainingPipeline {
    let mut tp = run(name, "30s");
    let slice = &mut tp.spec.training.tpu_vm.as_mut().unwrap().slice;
    slice.capacity = Some(Capacity {
        queued: Some(QueuedCapacity {
            tier: QueuedTier::Guaranteed,
            valid_until_duration: Some("6h".into()),
            ..QueuedCapacity::default()
        }),
        ..Capacity::default()
    });
    slice.maintenance.as_mut().unwrap().start_early = Some(start_early);
    tp
}

/// A queued slice's node is maintained through its queued resource: started early there right
/// after the asked checkpoint, it loses nothing; the queued slice that waits loses the lead.
#[tokio::test]
async fn a_queued_slice_starts_its_maintenance_through_its_queued_resource() {
    let env = started().await;
    env.create(&queued_run("qearly", StartEarly::AfterCheckpoint))
        .await;
    env.create(&queued_run("qwaits", StartEarly::Never)).await;
    first_checkpoints(&env, ["qearly", "qwaits"]).await;
    let nodes = announce_after_a_checkpoint(&env, ["qearly", "qwaits"], true).await;
    let window = window_start(&node_of(&env, "qearly"));
    let now = env.gcp.clock().now();
    let lead_start = window - chrono::Duration::seconds(30);
    env.gcp.clock().advance((lead_start - now).to_std().unwrap());
    let m = maintenance_once(&env, "qearly-train", "started early", Duration::ZERO, |m, _| {
        m.start_request_time.is_some()
    })
    .await;
    assert!(m.committed_checkpoint.is_some(), "{m:?}");
    checkpoint_asked(&env, "qwaits-train").await;
    let method = "queuedResources.performMaintenanceQueuedResource";
    assert_eq!(env.gcp.call_count("tpu", method), 1);
    assert_eq!(env.gcp.call_count("tpu", "nodes.performMaintenance"), 0);
    for name in ["qearly-train", "qwaits-train"] {
        maintenance_once(&env, name, "the maintenance over", STEP, |m, restarts| {
            restarts == 1 && ended(Some(m))
        })
        .await;
    }
    finish_without_a_retry(&env, ["qearly", "qwaits"]).await;
    assert_eq!(env.gcp.call_count("tpu", method), 1, "started once");
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 2);
    let early = interruption(&env, &nodes[0]);
    let waited = interruption(&env, &nodes[1]);
    eprintln!("queued slice, steps lost: started early {early:?}; at the window {waited:?}");
    assert!(early.at < window, "{early:?}");
    assert!(early.steps_lost <= 1, "{early:?}");
    assert!(waited.steps_lost >= 20, "{waited:?}");
}

/// The creates and deletes of TPU capacity so far.
fn creates_and_deletes(env: &TestEnv) -> [u64; 4] {
    let methods = [
        "queuedResources.create",
        "queuedResources.delete",
        "nodes.create",
        "nodes.delete",
    ];
    methods.map(|m| env.gcp.call_count("tpu", m))
}

/// A multislice pipeline `ms` of 2 slices (30 s `checkpointLead`) run to its first checkpoint:
/// its slices' nodes, in slice order.
async fn multislice_to_a_checkpoint(env: &TestEnv) -> (String, String) {
    use tpu_operator_api::tpu_slice::{MEGASCALE_SLICE_ID_METADATA, MaintenanceSpec};
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!(
        "../../../../examples/tpu-vm-multislice-pipeline.yaml"
    ));
    tp.metadata.name = Some("ms".into());
    tp.spec.preprocess = None;
    tp.spec.artifacts.model_dir = "gs://demo-project-tpu-data/models/ms/".into();
    let slice = &mut tp.spec.training.tpu_vm.as_mut().unwrap().slice;
    slice.maintenance = Some(MaintenanceSpec {
        checkpoint_lead: Some("30s".into()),
        ..MaintenanceSpec::default()
    });
    env.create(&tp).await;
    env.wait_for::<TrainingPipeline, _>("ms", "a first checkpoint", STEP, |tp| {
        let c = tp.status.as_ref().and_then(|s| s.checkpoint.as_ref());
        c.is_some_and(|c| c.latest_step.is_some())
    })
    .await;
    let slice_node = |k: &str| {
        let nodes = env.gcp.nodes();
        let n = nodes
            .iter()
            .find(|n| n["metadata"][MEGASCALE_SLICE_ID_METADATA] == k);
        n.map(|n| n["name"].as_str().unwrap().to_string())
            .expect("the slice's node")
    };
    (slice_node("0"), slice_node("1"))
}

/// A multislice's slice under notice is started alone, through its own queued resource naming
/// only its node, after the asked checkpoint: nothing is created or deleted, the other slice
/// keeps running, and the run counts one maintenance restart, no slice restart.
#[tokio::test]
async fn a_multislice_slice_starts_its_maintenance_alone_through_its_queued_resource() {
    let env = started().await;
    let (node0, node1) = multislice_to_a_checkpoint(&env).await;
    let before = creates_and_deletes(&env);
    env.gcp
        .inject(gcp_emulator::Fault::ScheduleMaintenance {
            name: node1.clone(),
            start_in_secs: 120,
            duration_secs: 120,
            can_reschedule: true,
            unscheduled: false,
        })
        .unwrap();
    let window = window_start(
        &env.gcp
            .nodes()
            .into_iter()
            .find(|n| n["name"] == node1.as_str())
            .unwrap(),
    );
    let now = env.gcp.clock().now();
    env.gcp
        .clock()
        .advance((window - chrono::Duration::seconds(30) - now).to_std().unwrap());
    // The checkpoint request is a `nodes.patch` of slice 1's node, whose operation (5 s of cloud
    // time) a multislice waits for before its next change: the clock stands still until the
    // request shows, then moves those 5 s, then stands still again.
    maintenance_once(
        &env,
        "ms-train",
        "the checkpoint request",
        Duration::ZERO,
        |m, _| m.checkpoint_request_time.is_some(),
    )
    .await;
    env.gcp.clock().advance(Duration::from_secs(5));
    let m = maintenance_once(
        &env,
        "ms-train",
        "slice 1 started early",
        Duration::ZERO,
        |m, _| m.start_request_time.is_some(),
    )
    .await;
    assert_eq!(m.slice, Some(1), "{m:?}");
    let method = "queuedResources.performMaintenanceQueuedResource";
    assert_eq!(env.gcp.call_count("tpu", method), 1);
    let call = env.gcp.calls().into_iter().find(|c| c.method == method).unwrap();
    let queue1 = node1.replace("/nodes/", "/queuedResources/");
    assert!(
        call.path.contains(&queue1),
        "slice 1's queued resource: {}",
        call.path
    );
    let under = |name: &str| {
        let nodes = env.gcp.nodes();
        let n = nodes.iter().find(|n| n["name"] == name).unwrap();
        n["upcomingMaintenance"]["maintenanceStatus"].clone()
    };
    assert_eq!(under(&node1), "ONGOING");
    assert_eq!(
        under(&node0),
        serde_json::Value::Null,
        "slice 0 is not maintained"
    );
    let s = env
        .wait_for::<TpuSlice, _>("ms-train", "the maintenance over", Duration::from_secs(1), |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.maintenance_restarts == 1 && ended(st.maintenance.as_ref()))
        })
        .await;
    let st = s.status.unwrap();
    assert_eq!(st.node_states, ["READY", "READY"], "{st:?}");
    assert_eq!(
        (st.recreations, st.slice_restarts.iter().sum::<i32>()),
        (0, 0),
        "{st:?}"
    );
    assert_eq!(creates_and_deletes(&env), before, "nothing created or deleted");
    assert_eq!(env.gcp.call_count("tpu", method), 1, "started once");
    assert_eq!(env.gcp.call_count("tpu", "nodes.performMaintenance"), 0);
    let early = interruption(&env, &node1);
    eprintln!("multislice slice 1, steps lost: started early {early:?}");
    // The 5 s of the checkpoint request's `nodes.patch` are trained again (steps of 1.2 s); the
    // window would have cost the 30 s lead (25 steps).
    assert!(early.at < window && early.steps_lost <= 5, "{early:?}");
}

/// The first VM (instance) of slice `name` as the emulator serves it.
fn vm_of(env: &TestEnv, name: &str) -> serde_json::Value {
    let vms = env.gcp.instances();
    let vm = vms.iter().find(|vm| vm["labels"]["tpu-operator-name"] == name);
    vm.cloned().unwrap_or_else(|| panic!("no VM of {name}: {vms:#?}"))
}

/// The steps slice `name`'s VM lost to its maintenance.
fn vm_interruption(env: &TestEnv, name: &str) -> gcp_emulator::WorkloadInterruption {
    let vm = vm_of(env, name)["name"].as_str().unwrap().to_string();
    let all = env.gcp.workload_interruptions();
    let found = all
        .iter()
        .find(|i| i.node.contains(&vm) && i.cause == gcp_emulator::Cause::Maintenance);
    found
        .cloned()
        .unwrap_or_else(|| panic!("no maintenance interruption of {name}: {all:?}"))
}

/// A Compute Engine VM's reschedulable maintenance is started with `instances.performMaintenance`
/// right after the asked checkpoint (asked through `instances.setMetadata`), once; the slice
/// that waits for the window loses the lead.
#[tokio::test]
async fn a_compute_engine_slice_starts_its_vms_maintenance_early() {
    use super::compute_engine::{is_ready, start, training};
    let env = start().await;
    for (name, start_early) in [
        ("ce-early", StartEarly::AfterCheckpoint),
        ("ce-waits", StartEarly::Never),
    ] {
        let mut s = training(name, "v6e-8");
        s.spec.maintenance = Some(
            serde_json::from_value(serde_json::json!({"checkpointLead": "30s", "startEarly": start_early}))
                .unwrap(),
        );
        env.create(&s).await;
    }
    for name in ["ce-early", "ce-waits"] {
        env.wait_for::<TpuSlice, _>(name, "Ready", STEP, is_ready).await;
    }
    // Right after both wrote a periodic checkpoint, each VM is told its window is a minute out.
    let committed = |env: &TestEnv| {
        let objects = env.gcp.objects("demo-project-tpu-data");
        let ckpt = |n: &str| format!("out/{n}/ckpt/");
        ["ce-early", "ce-waits"].map(|n| {
            objects
                .iter()
                .filter(|o| o.name.starts_with(&ckpt(n)) && o.name.ends_with("_CHECKPOINT_METADATA"))
                .count()
        })
    };
    while committed(&env).contains(&0) {
        env.gcp.clock().advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for name in ["ce-early", "ce-waits"] {
        let notice = gcp_emulator::Fault::ScheduleMaintenance {
            name: vm_of(&env, name)["name"].as_str().unwrap().to_string(),
            start_in_secs: 60,
            duration_secs: 300,
            can_reschedule: true,
            unscheduled: false,
        };
        env.gcp.inject(notice).unwrap();
    }
    let at = vm_of(&env, "ce-early")["resourceStatus"]["upcomingMaintenance"]["windowStartTime"].clone();
    let window = chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap())
        .unwrap()
        .to_utc();
    let now = env.gcp.clock().now();
    env.gcp
        .clock()
        .advance((window - chrono::Duration::seconds(30) - now).to_std().unwrap());
    let m = maintenance_once(&env, "ce-early", "started early", Duration::ZERO, |m, _| {
        m.start_request_time.is_some()
    })
    .await;
    assert!(m.committed_checkpoint.is_some(), "{m:?}");
    checkpoint_asked(&env, "ce-waits").await;
    assert_eq!(env.gcp.call_count("compute", "instances.performMaintenance"), 1);
    for name in ["ce-early", "ce-waits"] {
        maintenance_once(
            &env,
            name,
            "the maintenance over",
            Duration::from_secs(1),
            |m, restarts| restarts == 1 && ended(Some(m)),
        )
        .await;
    }
    assert_eq!(
        env.gcp.call_count("compute", "instances.performMaintenance"),
        1,
        "started once, only where allowed"
    );
    assert_eq!(
        env.gcp.call_count("compute", "instances.insert"),
        2,
        "nothing recreated"
    );
    let early = vm_interruption(&env, "ce-early");
    let waited = vm_interruption(&env, "ce-waits");
    eprintln!("Compute Engine slice, steps lost: started early {early:?}; at the window {waited:?}");
    assert!(early.at < window && early.steps_lost <= 1, "{early:?}");
    assert!(waited.steps_lost >= 20, "{waited:?}");
}
