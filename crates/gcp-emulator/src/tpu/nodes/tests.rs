//! The step model of a node's workload, driven on a `World` with the default durations: a node
//! created at 0 s is READY at 180 s, its workload (600 s) checkpoints every 120 s (100 steps), so
//! it is at step 100 at 300 s, 200 at 420 s, 250 at 480 s.

use crate::config::Config;
use crate::faults::Fault;
use crate::training::{Cause, WorkloadInterruption};
use crate::wire::Query;
use crate::world::World;
use chrono::{DateTime, Utc};
use serde_json::json;

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
fn deleting_a_node_whose_workload_runs_records_the_steps_lost() {
    let mut w = world_with_node(SCRIPT, false);
    w.tick(at(430));
    super::delete(&mut w.cloud, &mut w.tpu, NODE).unwrap();
    // 250 s of run: step 208, committed 200 (written at 420 s).
    let lost = interruption(430, Cause::Deletion, 208, 200);
    assert_eq!(w.cloud.training.interruptions, vec![lost]);
}
