//! TpuSlices provisioned through Compute Engine (`provisioner: ComputeEngine`, issue 23): the
//! controller in-process against the Kubernetes target (kube-emulator, or the real control
//! plane in CI) and gcp-emulator's Compute Engine surfaces, reached through Google's
//! `google-cloud-compute-v1` client.

use std::time::Duration;

use serde_json::{Value, json};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    tpu_slice::{DONE_URI_ANNOTATION, TpuSlice, TpuSlicePhase},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_controller::{
    kinds::{preprocess_batch, tpu_slice, training_pipeline},
    never_shutdown,
};

const ZONE: &str = "us-east5-b";
const STEP: Duration = Duration::from_secs(20);
const IMAGE: &str = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts";

fn slice(name: &str, accelerator: &str, capacity: Value) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "zone": ZONE,
            "acceleratorType": accelerator,
            "provisioner": "ComputeEngine",
            "computeEngine": {"image": IMAGE},
            "capacity": capacity,
            "labels": {"team": "ml"},
            "preemption": {"maxRecreations": 2},
            "workload": {"image": "us-docker.pkg.dev/demo-project/r/trainer:1", "args": ["--steps=10"]}
        }
    }))
    .expect("TpuSlice fixture")
}

/// A slice whose workload runs in the emulator (it reports completion, as a pipeline's does)
/// and checkpoints to `CHECKPOINT_DIR`.
pub(super) fn training(name: &str, accelerator: &str) -> TpuSlice {
    let mut s = slice(name, accelerator, json!({"onDemand": {}}));
    let out = format!("gs://demo-project-tpu-data/out/{name}/");
    s.metadata.annotations = Some([(DONE_URI_ANNOTATION.to_string(), out.clone())].into());
    let env = serde_json::from_value(json!([{"name": "CHECKPOINT_DIR", "value": format!("{out}ckpt/")}]));
    s.spec.workload.as_mut().unwrap().env = env.unwrap();
    s
}

pub(super) fn is_ready(s: &TpuSlice) -> bool {
    s.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
}

fn reason(s: &TpuSlice, type_: &str) -> Option<String> {
    let st = s.status.as_ref()?;
    find_condition(&st.conditions, type_)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

pub(super) async fn start() -> TestEnv {
    let mut env = TestEnv::start().await;
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env
}

/// Every Compute Engine object of the test, by kind (instances in any status count).
fn compute_objects(env: &TestEnv) -> [usize; 5] {
    let c = env.gcp.resource_counts();
    [
        c.instances,
        c.instance_templates,
        c.resource_policies,
        c.instance_group_managers,
        c.resize_requests,
    ]
}

async fn delete_and_wait_gone(env: &TestEnv, name: &str) {
    env.api::<TpuSlice>()
        .delete(name, &Default::default())
        .await
        .expect("delete");
    env.wait_gone::<TpuSlice>(name, STEP).await;
    assert_eq!(
        compute_objects(env),
        [0; 5],
        "left behind: {:?}",
        env.gcp.list_resources()
    );
}

#[tokio::test]
async fn single_host_slice_is_one_instance_of_the_tpu_machine_type() {
    let env = start().await;
    env.create(&slice("single", "v6e-8", json!({"spot": {}}))).await;
    let s: TpuSlice = env.wait_for("single", "Ready", STEP, is_ready).await;
    let st = s.status.clone().unwrap();
    assert_eq!(st.phase, TpuSlicePhase::Ready);
    assert_eq!((st.chips, st.hosts), (Some(8), Some(1)));
    assert_eq!(st.accelerator_type.as_deref(), Some("v6e-8"));
    assert_eq!(st.worker_ips.len(), 1, "{st:?}");

    let instances = env.gcp.instances();
    assert_eq!(instances.len(), 1, "{instances:?}");
    let vm = &instances[0];
    assert!(
        vm["machineType"]
            .as_str()
            .unwrap()
            .ends_with("/machineTypes/ct6e-standard-8t"),
        "{vm}"
    );
    assert_eq!(vm["labels"]["tpu-operator-name"], "single");
    assert_eq!(vm["labels"]["team"], "ml");
    assert_eq!(vm["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(vm["status"], "RUNNING");
    let script = vm["metadata"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "startup-script")
        .expect("startup script");
    assert!(script["value"].as_str().unwrap().contains("docker run"));
    assert_eq!(env.gcp.call_count("compute", "instances.insert"), 1);
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        0,
        "nothing through the TPU API"
    );
    assert_eq!(compute_objects(&env)[1..], [0; 4], "a single host needs no group");

    delete_and_wait_gone(&env, "single").await;
}

#[tokio::test]
async fn multi_host_slice_is_a_group_with_a_workload_policy_and_nothing_is_left_after_delete() {
    let env = start().await;
    env.create(&slice("multi", "v5p-16", json!({"onDemand": {}})))
        .await;
    let s: TpuSlice = env.wait_for("multi", "Ready", STEP, is_ready).await;
    let st = s.status.clone().unwrap();
    assert_eq!((st.chips, st.hosts), (Some(8), Some(2)));
    assert_eq!(st.worker_ips.len(), 2, "{st:?}");

    let policies = env.gcp.resource_policies();
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0]["workloadPolicy"]["type"], "HIGH_THROUGHPUT");
    assert_eq!(policies[0]["workloadPolicy"]["acceleratorTopology"], "2x2x2");
    let templates = env.gcp.instance_templates();
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0]["properties"]["machineType"], "ct5p-hightpu-4t");
    assert_eq!(templates[0]["properties"]["labels"]["tpu-operator-name"], "multi");
    let groups = env.gcp.instance_group_managers();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["targetSize"], 2);
    assert!(
        groups[0]["resourcePolicies"]["workloadPolicy"]
            .as_str()
            .unwrap()
            .ends_with(policies[0]["name"].as_str().unwrap())
    );
    let instances = env.gcp.instances();
    assert_eq!(instances.len(), 2);
    for vm in &instances {
        assert_eq!(vm["status"], "RUNNING");
        assert_eq!(vm["labels"]["tpu-operator-name"], "multi");
    }

    delete_and_wait_gone(&env, "multi").await;
}

#[tokio::test]
async fn flex_start_waits_for_capacity_runs_out_its_duration_and_keeps_the_resource() {
    let env = start().await;
    env.gcp.set_compute_capacity(ZONE, "ct6e-standard-8t", Some(0));
    env.create(&slice(
        "flex",
        "v6e-8",
        json!({"flexStart": {"runDuration": "30m"}}),
    ))
    .await;
    let s: TpuSlice = env
        .wait_for("flex", "waiting for capacity", STEP, |s| {
            reason(s, types::RECONCILING).as_deref() == Some("WaitingForCapacity")
        })
        .await;
    assert_eq!(s.status.unwrap().phase, TpuSlicePhase::Queued);
    let requests = env.gcp.resize_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["state"], "ACCEPTED");
    assert_eq!(requests[0]["resizeBy"], 1);
    assert_eq!(requests[0]["requestedRunDuration"]["seconds"], "1800");
    assert_eq!(env.gcp.instances().len(), 0);

    // Dynamic Workload Scheduler finds capacity: the VM is made and the slice is Ready.
    env.gcp.set_compute_capacity(ZONE, "ct6e-standard-8t", None);
    env.wait_for::<TpuSlice, _>("flex", "Ready", STEP, is_ready).await;
    let vm = &env.gcp.instances()[0];
    assert_eq!(vm["scheduling"]["provisioningModel"], "FLEX_START");

    // The run duration ends: Compute Engine deletes the VM; the slice reports it, deletes what
    // is left and stays, without recreating anything.
    env.idle(Duration::from_millis(50), Duration::from_secs(31 * 60))
        .await;
    let s: TpuSlice = env
        .wait_for("flex", "run duration over", STEP, |s| {
            reason(s, types::STALLED).as_deref() == Some("MaxRunDurationExceeded")
        })
        .await;
    assert!(
        s.status
            .as_ref()
            .unwrap()
            .message
            .as_deref()
            .unwrap()
            .contains("runDuration 30m is over"),
        "{:?}",
        s.status
    );
    assert_eq!(env.gcp.instances().len(), 0);
    env.idle(Duration::from_millis(300), STEP).await;
    assert_eq!(env.gcp.instances().len(), 0, "never recreated");
    assert_eq!(
        env.gcp
            .call_count("compute", "instanceGroupManagerResizeRequests.insert"),
        1
    );

    delete_and_wait_gone(&env, "flex").await;
}

#[tokio::test]
async fn preempted_spot_instance_is_counted_and_recreated() {
    let env = start().await;
    env.create(&slice("spot", "v6e-8", json!({"spot": {}}))).await;
    env.wait_for::<TpuSlice, _>("spot", "Ready", STEP, is_ready).await;
    let first = env.gcp.instances()[0]["name"].as_str().unwrap().to_string();
    env.gcp.preempt_instance(&first).expect("preempt");
    let s: TpuSlice = env
        .wait_for("spot", "recreated and Ready", STEP, |s| {
            is_ready(s) && s.status.as_ref().unwrap().recreations == 1
        })
        .await;
    assert!(s.status.unwrap().last_preemption_time.is_some());
    let instances = env.gcp.instances();
    assert_eq!(instances.len(), 1, "the preempted VM was deleted: {instances:?}");
    assert_ne!(instances[0]["name"], first.as_str());

    delete_and_wait_gone(&env, "spot").await;
}

/// A Compute Engine VM's announced maintenance shows on its slice as a TPU node's does, and
/// counts as a maintenance restart, not a preemption.
#[tokio::test]
async fn an_instances_maintenance_shows_on_its_slice() {
    let env = start().await;
    env.create(&training("kept", "v6e-8")).await;
    env.wait_for::<TpuSlice, _>("kept", "Ready", STEP, is_ready).await;
    let vm = env.gcp.instances()[0]["name"].as_str().unwrap().to_string();
    let notice = gcp_emulator::Fault::ScheduleMaintenance {
        name: vm,
        start_in_secs: 600,
        duration_secs: 120,
        can_reschedule: true,
        unscheduled: false,
    };
    env.gcp.inject(notice).unwrap();
    let step = Duration::from_secs(1);
    let s: TpuSlice = env
        .wait_for("kept", "the notice", step, |s: &TpuSlice| {
            s.status.as_ref().is_some_and(|st| st.maintenance.is_some())
        })
        .await;
    let m = s.status.unwrap().maintenance.unwrap();
    assert_eq!((m.kind.as_str(), m.can_reschedule), ("Scheduled", true), "{m:?}");
    assert_eq!(
        reason(&s_now(&env, "kept").await, "MaintenancePending").as_deref(),
        Some("MaintenanceScheduled")
    );
    // `checkpointLead` (5 min) before the window, the VM's workload is asked for a checkpoint
    // through its metadata, once.
    env.wait_for("kept", "the checkpoint request", step, |s: &TpuSlice| {
        let m = s.status.as_ref().and_then(|st| st.maintenance.as_ref());
        m.is_some_and(|m| m.checkpoint_request_time.is_some())
    })
    .await;
    let vm = &env.gcp.instances()[0];
    let asked = vm["metadata"]["items"].as_array().unwrap().iter().any(|i| {
        i["key"] == "tpu-operator-checkpoint-request"
            && i["value"] == vm["resourceStatus"]["upcomingMaintenance"]["windowStartTime"]
    });
    assert!(asked, "the request names the window: {vm}");
    assert_eq!(env.gcp.checkpoint_requests().len(), 1);
    let s: TpuSlice = env
        .wait_for("kept", "one maintenance restart", step, |s: &TpuSlice| {
            s.status.as_ref().is_some_and(|st| st.maintenance_restarts == 1)
        })
        .await;
    assert_eq!(s.status.unwrap().recreations, 0, "not a preemption");
    assert_eq!(
        env.gcp.call_count("compute", "instances.setMetadata"),
        1,
        "asked once"
    );
    delete_and_wait_gone(&env, "kept").await;
}

/// A settled Compute Engine slice is compared on every round of the cloud watch, as a TPU node
/// is: its stable poll is an hour here, yet a notice on one host of a group reaches status in
/// seconds, from one listing of the zone's instances, with no read of the slice before it.
#[tokio::test]
async fn a_settled_groups_notice_arrives_through_the_instance_listing() {
    let mut env = TestEnv::start().await;
    let mut ctx = env.context().await;
    ctx.config.poll_stable = Duration::from_secs(3600);
    env.spawn(tpu_slice::run(std::sync::Arc::new(ctx), never_shutdown()));
    env.create(&training("listed", "v5p-16")).await;
    env.wait_for::<TpuSlice, _>("listed", "Ready", STEP, is_ready)
        .await;
    // Settled: the slice's own reads stop (its next poll is an hour away).
    let settled = |env: &TestEnv| env.gcp.call_count("compute", "instanceGroupManagers.get");
    let mut reads = settled(&env);
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = settled(&env);
        if now == reads {
            break;
        }
        reads = now;
    }
    let lists = env.gcp.call_count("compute", "instances.list");
    let host = env.gcp.instances()[1]["name"].as_str().unwrap().to_string();
    let notice = gcp_emulator::Fault::ScheduleMaintenance {
        name: host,
        start_in_secs: 3 * 3600,
        duration_secs: 120,
        can_reschedule: false,
        unscheduled: false,
    };
    env.gcp.inject(notice).unwrap();
    let s: TpuSlice = env
        .wait_for("listed", "the notice", Duration::from_secs(1), |s: &TpuSlice| {
            s.status.as_ref().is_some_and(|st| st.maintenance.is_some())
        })
        .await;
    assert_eq!(s.status.unwrap().maintenance.unwrap().kind, "Scheduled");
    assert!(
        env.gcp.call_count("compute", "instances.list") > lists,
        "found by listing: {:?}",
        env.gcp.call_counts()
    );
    assert!(
        settled(&env) <= reads + 1,
        "one read after the listing woke it: {:?}",
        env.gcp.call_counts()
    );
    delete_and_wait_gone(&env, "listed").await;
}

/// A maintenance of one host of a group-backed slice asks every host for the checkpoint (JAX
/// saves at a step all hosts reach), one VM per pass, and the request is made once per VM.
#[tokio::test]
async fn a_groups_hosts_are_each_asked_for_the_checkpoint() {
    let env = start().await;
    env.create(&training("group", "v5p-16")).await;
    env.wait_for::<TpuSlice, _>("group", "Ready", STEP, is_ready)
        .await;
    let vms = env.gcp.instances();
    let notice = gcp_emulator::Fault::ScheduleMaintenance {
        name: vms[1]["name"].as_str().unwrap().to_string(),
        start_in_secs: 600,
        duration_secs: 120,
        can_reschedule: false,
        unscheduled: false,
    };
    env.gcp.inject(notice).unwrap();
    // The second host is asked on the next pass, seconds after the first, not at a later poll or
    // at the window. Load-proof: the requests are stamped in emulated time, and a wait moving
    // the clock a step per poll until both were in turned a slow pass into seconds between the
    // stamps (9 s beside five builds). The clock moves only until the first request (the notice
    // needs it), at most one step past it; then it stands still until the second, so the spread
    // is the emulated time the controller waited for, whatever the machine's speed. A second
    // ask that waited for emulated time never comes: the wait's limit (a hang only) fails it.
    let step = Duration::from_secs(1);
    let gcp = &env.gcp;
    let asked = |n: usize| move |_: &TpuSlice| gcp.checkpoint_requests().len() >= n;
    env.wait_for("group", "the first host asked", step, asked(1))
        .await;
    env.wait_for(
        "group",
        "the second host asked, the clock still",
        Duration::ZERO,
        asked(2),
    )
    .await;
    let requests = env.gcp.checkpoint_requests();
    let asked: std::collections::BTreeSet<&str> = requests.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(asked.len(), 2, "both hosts: {requests:?}");
    let spread = requests[requests.len() - 1].at - requests[0].at;
    assert!(spread <= chrono::Duration::seconds(1), "{requests:?}");
    env.wait_for("group", "the checkpoint request", step, |s: &TpuSlice| {
        let m = s.status.as_ref().and_then(|st| st.maintenance.as_ref());
        m.is_some_and(|m| m.checkpoint_request_time.is_some())
    })
    .await;
    env.wait_for("group", "one maintenance restart", step, |s: &TpuSlice| {
        s.status.as_ref().is_some_and(|st| st.maintenance_restarts == 1)
    })
    .await;
    assert_eq!(env.gcp.checkpoint_requests().len(), 2, "no host asked twice");
    assert_eq!(
        env.gcp.call_count("compute", "instances.setMetadata"),
        2,
        "once per host"
    );
    delete_and_wait_gone(&env, "group").await;
}

async fn s_now(env: &TestEnv, name: &str) -> TpuSlice {
    env.api::<TpuSlice>().get(name).await.unwrap()
}

#[tokio::test]
async fn tpu_vm_pipeline_trains_on_a_compute_engine_slice() {
    let mut env = TestEnv::start().await;
    let ctx = env.ctx.clone();
    env.spawn(training_pipeline::run(ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(ctx, never_shutdown()));
    let tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/compute-engine-pipeline.yaml"));
    env.create(&tp).await;

    // While training: two ct5p-hightpu-4t hosts in one group, placed by a 2x2x2 workload policy.
    env.wait_for::<TpuSlice, _>("compute-engine-pipeline-train", "Ready", STEP, is_ready)
        .await;
    let instances = env.gcp.instances();
    assert_eq!(instances.len(), 2, "{instances:?}");
    for vm in &instances {
        assert!(vm["machineType"].as_str().unwrap().ends_with("/ct5p-hightpu-4t"));
        assert_eq!(vm["scheduling"]["provisioningModel"], "SPOT");
    }
    assert_eq!(
        env.gcp.resource_policies()[0]["workloadPolicy"]["acceleratorTopology"],
        "2x2x2"
    );

    let done = env
        .wait_for::<TrainingPipeline, _>("compute-engine-pipeline", "Succeeded", STEP, |tp| {
            tp.status
                .as_ref()
                .is_some_and(|s| s.phase == TrainingPipelinePhase::Succeeded)
        })
        .await;
    let model = done.status.unwrap().outputs.unwrap().model_uri.unwrap();
    assert_eq!(model, "gs://demo-project-tpu-data/models/compute-engine-run-1/");
    assert!(
        env.gcp
            .object("demo-project-tpu-data", "models/compute-engine-run-1/_SUCCESS")
            .is_some()
    );
    // The finished pipeline releases its slice: nothing of it is left in Compute Engine.
    env.wait_gone::<TpuSlice>("compute-engine-pipeline-train", STEP)
        .await;
    assert_eq!(compute_objects(&env), [0; 5], "{:?}", env.gcp.list_resources());
}
