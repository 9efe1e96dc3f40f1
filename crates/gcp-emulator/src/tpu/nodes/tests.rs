//! The maintenance state machine and the step model of a node's workload, driven on a `World`
//! with the default durations: a node created at 0 s is READY at 180 s, its workload (600 s)
//! checkpoints every 120 s (100 steps), so it is at step 100 at 300 s, 200 at 420 s, 250 at 480 s.

use crate::config::Config;
use crate::faults::Fault;
use crate::training::{Cause, CheckpointRequest, WorkloadInterruption};
use crate::wire::Query;
use crate::world::World;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

const NODE: &str = "projects/p/locations/us-central2-b/nodes/n";
const SCRIPT: &str = "#!/bin/bash\n# watches tpu-operator-checkpoint-request\ndocker run --rm -e 'CHECKPOINT_DIR=gs://ckpt/run/' 'trainer:1' 'train.py'\n";

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
}

/// A world with node `n` (v5p-8, `spot` if asked) running the workload from 180 s.
fn world_with_node(script: &str, spot: bool) -> World {
    let mut w = World::new(Config::default(), at(0));
    let mut node = json!({
        "acceleratorType": "v5p-8",
        "runtimeVersion": "tpu-ubuntu2204-base",
        "metadata": {"startup-script": script, "tpu-operator-done-uri": "gs://out/run/"},
    });
    if spot {
        node["schedulingConfig"] = json!({"spot": true});
    }
    let q = Query::parse(Some("nodeId=n"));
    super::create(&mut w.cloud, &mut w.tpu, "p", "us-central2-b", &q, &node).unwrap();
    w.tick(at(180));
    w
}

fn body(w: &World) -> Value {
    w.tpu.nodes.get(NODE).unwrap().body.clone()
}

fn maintenance(start_in_secs: u64, can_reschedule: bool) -> Fault {
    Fault::ScheduleMaintenance {
        name: NODE.into(),
        start_in_secs,
        duration_secs: 600,
        can_reschedule,
        unscheduled: false,
    }
}

fn interruption(at_secs: i64, cause: Cause, step: u64, committed: u64) -> WorkloadInterruption {
    WorkloadInterruption {
        node: NODE.into(),
        at: at(at_secs),
        cause,
        step_at_interruption: step,
        committed_step: committed,
        steps_lost: step - committed,
    }
}

/// Sets the checkpoint request key to `value` through `nodes.patch` (metadata replaced whole).
fn request_checkpoint(w: &mut World, script: &str, value: &str) {
    let q = Query::parse(Some("updateMask=metadata"));
    let patch = json!({"metadata": {"startup-script": script, "tpu-operator-done-uri": "gs://out/run/",
                                    "tpu-operator-checkpoint-request": value}});
    super::patch(&mut w.cloud, &mut w.tpu, NODE, &q, &patch).unwrap();
}

fn has(w: &World, bucket: &str, name: &str) -> bool {
    w.cloud
        .buckets
        .get(bucket)
        .is_some_and(|b| b.objects.contains_key(name))
}

#[test]
fn notice_then_window_start_then_end() {
    // A container without a CHECKPOINT_DIR: it never commits a step.
    let mut w = world_with_node("docker run --rm 'trainer:1'", false);
    let missing = Fault::ScheduleMaintenance {
        name: "projects/p/locations/us-central2-b/nodes/nope".into(),
        start_in_secs: 1,
        duration_secs: 1,
        can_reschedule: false,
        unscheduled: true,
    };
    assert_eq!(
        crate::admin::inject(&mut w, missing).unwrap_err().code,
        crate::Code::NotFound
    );
    crate::admin::inject(&mut w, maintenance(300, true)).unwrap();
    let notice = json!({"type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": "PENDING",
        "windowStartTime": "2027-01-15T08:08:00.000000Z", "windowEndTime": "2027-01-15T08:18:00.000000Z",
        "latestWindowStartTime": "2027-01-15T08:08:00.000000Z"});
    assert_eq!(body(&w)["upcomingMaintenance"], notice);
    w.tick(at(479));
    assert_eq!(body(&w)["health"], "HEALTHY");
    w.tick(at(480));
    let b = body(&w);
    assert_eq!(b["upcomingMaintenance"]["maintenanceStatus"], "ONGOING");
    assert_eq!(
        (b["state"].as_str(), b["health"].as_str()),
        (Some("READY"), Some("UNHEALTHY_MAINTENANCE"))
    );
    w.tick(at(1079));
    assert_eq!(body(&w)["health"], "UNHEALTHY_MAINTENANCE");
    w.tick(at(1080));
    let b = body(&w);
    assert_eq!(
        (b["state"].as_str(), b["health"].as_str()),
        (Some("READY"), Some("HEALTHY"))
    );
    assert!(b.get("upcomingMaintenance").is_none(), "{b}");
    // Its container had no checkpoint to restore: the 250 steps it made (300 s) are all lost.
    let lost = interruption(480, Cause::Maintenance, 250, 0);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
}

#[test]
fn maintenance_loses_the_steps_since_the_last_periodic_checkpoint_and_ends_later() {
    let mut w = world_with_node(SCRIPT, false);
    crate::admin::inject(&mut w, maintenance(300, false)).unwrap();
    w.tick(at(480));
    assert!(has(&w, "ckpt", "run/200/_CHECKPOINT_METADATA"));
    let lost = interruption(480, Cause::Maintenance, 250, 200);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
    // 600 s of maintenance; at 1080 s the workload restarts from step 200 with the 300 s it had
    // left plus the 60 s it redoes (200 → 250): step 300 at 1200 s, 400 at 1320 s, exit at
    // 1080 + 360 = 1440 s instead of 780 s.
    w.tick(at(1199));
    assert!(!has(&w, "ckpt", "run/300/_CHECKPOINT_METADATA"));
    w.tick(at(1200));
    assert!(has(&w, "ckpt", "run/300/_CHECKPOINT_METADATA"));
    w.tick(at(1439));
    assert!(has(&w, "ckpt", "run/400/_CHECKPOINT_METADATA"));
    assert!(
        !has(&w, "out", "run/_SUCCESS"),
        "a run interrupted by maintenance ends later"
    );
    w.tick(at(1440));
    assert!(has(&w, "out", "run/_SUCCESS"));
    assert!(!has(&w, "ckpt", "run/500/_CHECKPOINT_METADATA"));
}

#[test]
fn a_checkpoint_requested_just_before_the_window_loses_nothing() {
    let mut w = world_with_node(SCRIPT, false);
    crate::admin::inject(&mut w, maintenance(300, false)).unwrap();
    w.tick(at(479));
    request_checkpoint(&mut w, SCRIPT, "2027-01-15T08:04:59Z");
    // 299 s of run: 299 / 120 × 100 = 249.17 → step 249.
    assert!(has(&w, "ckpt", "run/249/_CHECKPOINT_METADATA"));
    let honoured = CheckpointRequest {
        node: NODE.into(),
        at: at(479),
        step: 249,
    };
    assert_eq!(w.cloud.training.checkpoint_requests, vec![honoured]);
    w.tick(at(480));
    let lost = interruption(480, Cause::Maintenance, 249, 249);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
}

#[test]
fn a_script_that_does_not_watch_the_key_cannot_honour_it() {
    let script = SCRIPT.replace("# watches tpu-operator-checkpoint-request\n", "");
    let mut w = world_with_node(&script, false);
    w.tick(at(479));
    request_checkpoint(&mut w, &script, "2027-01-15T08:04:59Z");
    assert!(w.cloud.training.checkpoint_requests.is_empty());
    assert!(!has(&w, "ckpt", "run/249/_CHECKPOINT_METADATA"));
    // Periodic checkpoints went on as before.
    w.tick(at(540));
    assert!(has(&w, "ckpt", "run/300/_CHECKPOINT_METADATA"));
}

#[test]
fn a_requested_checkpoint_restarts_the_periodic_interval() {
    let mut w = world_with_node(SCRIPT, false);
    w.tick(at(330));
    request_checkpoint(&mut w, SCRIPT, "t1");
    // 150 s of run → step 125; the next periodic checkpoint 120 s later is step 225.
    assert!(has(&w, "ckpt", "run/125/_CHECKPOINT_METADATA"));
    // The same value again (after the patch operation) is not a new request.
    w.tick(at(340));
    request_checkpoint(&mut w, SCRIPT, "t1");
    assert_eq!(w.cloud.training.checkpoint_requests.len(), 1);
    assert!(!has(&w, "ckpt", "run/133/_CHECKPOINT_METADATA"));
    w.tick(at(449));
    assert!(!has(&w, "ckpt", "run/225/_CHECKPOINT_METADATA"));
    assert!(!has(&w, "ckpt", "run/200/_CHECKPOINT_METADATA"));
    w.tick(at(450));
    assert!(has(&w, "ckpt", "run/225/_CHECKPOINT_METADATA"));
}

#[test]
fn preemption_records_the_steps_lost() {
    let mut w = world_with_node(SCRIPT, true);
    w.tick(at(310));
    crate::admin::inject(&mut w, Fault::PreemptNode { name: NODE.into() }).unwrap();
    // 130 s of run: step 108, committed 100 (written at 300 s).
    let lost = interruption(310, Cause::Preemption, 108, 100);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
}

#[test]
fn perform_maintenance_needs_a_pending_reschedulable_notice() {
    let mut w = world_with_node(SCRIPT, false);
    let perform = |w: &mut World| super::perform_maintenance(&mut w.cloud, &mut w.tpu, NODE, &json!({}));
    let none = perform(&mut w).unwrap_err();
    assert!(
        none.message.contains("no pending maintenance"),
        "{}",
        none.message
    );
    crate::admin::inject(&mut w, maintenance(3600, false)).unwrap();
    let fixed = perform(&mut w).unwrap_err();
    assert_eq!(fixed.code, crate::Code::FailedPrecondition);
    assert!(
        fixed.message.contains("canReschedule is false"),
        "{}",
        fixed.message
    );
    crate::admin::inject(&mut w, maintenance(3600, true)).unwrap();
    w.tick(at(300));
    perform(&mut w).unwrap();
    let b = body(&w);
    assert_eq!(b["upcomingMaintenance"]["maintenanceStatus"], "ONGOING");
    assert_eq!(
        b["upcomingMaintenance"]["windowStartTime"],
        "2027-01-15T08:05:00.000000Z"
    );
    // Started right after the periodic checkpoint of step 100: nothing lost.
    let lost = interruption(300, Cause::Maintenance, 100, 100);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
    w.tick(at(900));
    assert!(body(&w).get("upcomingMaintenance").is_none());
    let op = w
        .cloud
        .ops
        .values()
        .find(|o| o.body["metadata"]["verb"] == "performMaintenance")
        .unwrap();
    assert_eq!(op.body["done"], true);
    assert_eq!(op.body["metadata"]["apiVersion"], "v2alpha1");
    // The original window's timer does not start a second maintenance.
    w.tick(at(4000));
    assert_eq!(w.cloud.training.interruptions.len(), 1);
}

#[test]
fn deleting_a_node_whose_workload_runs_records_the_steps_lost() {
    let mut w = world_with_node(SCRIPT, false);
    w.tick(at(430));
    super::delete(&mut w.cloud, &mut w.tpu, NODE).unwrap();
    // 250 s of run: step 208, committed 200 (written at 420 s).
    let lost = interruption(430, Cause::Deletion, 208, 200);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
}
