//! `spec.capacityPlan` through the real path (CR → controller → TPU API → status): a slice whose
//! reservation is full and whose Spot zone is stocked out lands on its third rung, on-demand in
//! another zone, within the sum of the rungs' `waitFor` plus 30 s of emulated time; status lists
//! the three rungs with their outcome and reason; and at no moment do two rungs have a request
//! alive (sampled at every 5 s step of the emulated clock).
//!
//! The clock is moved by the test alone, in 5 s steps (1 s in the minute after each rung's
//! deadline) with a short real pause after each, so how long each rung is asked is decided by
//! emulated time, not by the machine's speed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use gcp_emulator::{CapacityKind, StockSpec};
use serde_json::json;
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::reasons,
    tpu_slice::{AttemptOutcome, TpuSlice, TpuSlicePhase},
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};

const ZONE_A: &str = "us-east5-a";
const ZONE_B: &str = "us-east5-b";
const RESERVATION: &str = "projects/demo-project/locations/us-east5-a/reservations/team-res";
/// The two rungs' `waitFor` (10 min reserved, 5 min Spot).
const PATIENCE: i64 = 15 * 60;
const STEP: Duration = Duration::from_secs(5);
/// The step in the minute after each rung's deadline, where the moves and creates happen: a
/// slow machine then costs a second of emulated time per late pass, not five.
const FINE_STEP: Duration = Duration::from_secs(1);

fn planned(name: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {
            "project": "demo-project",
            "zone": ZONE_A,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacityPlan": {"rungs": [
                {"reserved": {"reservationName": "team-res"}, "waitFor": "10m"},
                {"spot": {}, "waitFor": "5m"},
                {"onDemand": {}, "zones": [ZONE_B]},
            ]},
        }
    }))
    .expect("TpuSlice fixture")
}

/// Requests alive in the cloud: queued resources and nodes. The reservation never grants here,
/// so no node belongs to a queued resource: each object is one rung's request.
fn alive(env: &TestEnv) -> usize {
    env.gcp.queued_resources().len() + env.gcp.nodes().len()
}

fn zone_of(node: &serde_json::Value) -> String {
    node["name"]
        .as_str()
        .and_then(|n| n.split('/').nth(3))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_full_reservation_and_a_spot_stockout_land_on_the_third_rung_one_rung_at_a_time() {
    let mut env = TestEnv::start().await;
    env.gcp.create_reservation(RESERVATION, 0).unwrap();
    env.gcp.set_stock(StockSpec {
        zone: ZONE_A.into(),
        accelerator: "v6e".into(),
        kind: CapacityKind::Spot,
        chips: 0,
        steps: Vec::new(),
        refill: None,
    });
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let start: DateTime<Utc> = env.gcp.clock().now();
    env.create(&planned("plan")).await;

    let api = env.api::<TpuSlice>();
    let mut most_alive = 0;
    let mut landed_after = None;
    let ready = loop {
        let elapsed = (env.gcp.clock().now() - start).num_seconds();
        assert!(elapsed < PATIENCE + 600, "not Ready after {elapsed} s");
        most_alive = most_alive.max(alive(&env));
        if landed_after.is_none() && env.gcp.nodes().iter().any(|n| zone_of(n) == ZONE_B) {
            landed_after = Some(elapsed);
        }
        let slice = api.get("plan").await.unwrap();
        if slice
            .status
            .as_ref()
            .is_some_and(|s| s.phase == TpuSlicePhase::Ready)
        {
            break slice;
        }
        let near_a_deadline = [600, PATIENCE].iter().any(|d| (*d..d + 60).contains(&elapsed));
        env.gcp
            .clock()
            .advance(if near_a_deadline { FINE_STEP } else { STEP });
        tokio::time::sleep(Duration::from_millis(40)).await;
    };
    let landed_after = landed_after.expect("a node in the third rung's zone");
    println!(
        "capacity plan: third rung's node created {landed_after} s (emulated) after the slice; sum of waitFor {PATIENCE} s; most requests alive at once: {most_alive}"
    );
    assert!(
        landed_after <= PATIENCE + 30,
        "landed after {landed_after} s, more than the waitFor sum + 30 s"
    );
    assert_eq!(most_alive, 1, "two rungs had requests alive at once");

    let st = ready.status.unwrap();
    assert_eq!(st.zone.as_deref(), Some(ZONE_B));
    let plan = st.capacity_plan.expect("status.capacityPlan");
    assert_eq!((plan.rung, plan.moves), (2, 2));
    let tried: Vec<_> = plan
        .attempts
        .iter()
        .map(|a| (a.capacity.as_str(), a.zone.as_str(), a.outcome, a.reason.as_str()))
        .collect();
    assert_eq!(
        tried,
        vec![
            (
                "reserved",
                ZONE_A,
                AttemptOutcome::MovedOn,
                reasons::WAITING_FOR_CAPACITY
            ),
            (
                "spot",
                ZONE_A,
                AttemptOutcome::MovedOn,
                reasons::WAITING_FOR_CAPACITY
            ),
            ("onDemand", ZONE_B, AttemptOutcome::Landed, reasons::NODE_READY),
        ],
        "{:#?}",
        plan.attempts
    );
    assert!(
        plan.attempts[1]
            .message
            .contains("moving on to rung 3 (onDemand in us-east5-b)")
    );

    // One request per rung: the queued resource (deleted on the move), one Spot create the zone
    // refused (the stockout memory holds the rest of its 5 minutes back), one on-demand create.
    let count = |m| env.gcp.call_count("tpu", m);
    assert_eq!(count("queuedResources.create"), 1);
    assert_eq!(count("queuedResources.delete"), 1);
    assert_eq!(count("nodes.create"), 2, "{:?}", env.gcp.call_counts());
    let events = env
        .wait_for_event("plan", reasons::MOVED_ON_CAPACITY_PLAN, Duration::ZERO)
        .await;
    let moves = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reasons::MOVED_ON_CAPACITY_PLAN))
        .count();
    assert_eq!(moves, 2, "{events:#?}");

    // Deleting the slice leaves nothing in any zone of its plan.
    api.delete("plan", &Default::default()).await.unwrap();
    env.wait_gone::<TpuSlice>("plan", STEP).await;
    assert_eq!(alive(&env), 0);
}

/// A TPU VM pipeline whose training slice has a plan: Spot stocked out, it lands on-demand, and
/// the pipeline's train stage says where and why.
#[tokio::test]
async fn a_pipelines_train_stage_shows_where_its_slice_landed_and_why() {
    use tpu_operator_api::training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase};
    use tpu_operator_controller::kinds::{preprocess_batch, training_pipeline};

    let mut env = TestEnv::start().await;
    env.gcp.set_stock(StockSpec {
        zone: "us-central2-b".into(),
        accelerator: "v4".into(),
        kind: CapacityKind::Spot,
        chips: 0,
        steps: Vec::new(),
        refill: None,
    });
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    env.spawn(preprocess_batch::run(env.ctx.clone(), never_shutdown()));
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let mut tp: TrainingPipeline =
        test_kit::from_yaml(include_str!("../../../../examples/tpu-vm-pipeline.yaml"));
    tp.spec.preprocess = None;
    let slice = &mut tp.spec.training.tpu_vm.as_mut().unwrap().slice;
    slice.capacity = None;
    slice.capacity_plan = serde_json::from_value(json!({"rungs": [{"spot": {}}, {"onDemand": {}}]})).unwrap();
    env.create(&tp).await;
    let training = env
        .wait_for::<TrainingPipeline, _>("tpu-vm-pipeline", "training on its slice", STEP, |tp| {
            tp.status.as_ref().is_some_and(|s| {
                s.phase == TrainingPipelinePhase::Training
                    && s.stages
                        .iter()
                        .any(|st| st.name == StageName::Train && st.capacity.is_some())
            })
        })
        .await;
    let stage = training
        .status
        .unwrap()
        .stages
        .into_iter()
        .find(|s| s.name == StageName::Train)
        .unwrap();
    let capacity = stage.capacity.unwrap();
    assert!(
        capacity.starts_with("landed on rung 2 (onDemand in us-central2-b)")
            && capacity.ends_with("no capacity first in: spot in us-central2-b (WaitingForCapacity)"),
        "{capacity}"
    );
}

/// The reservation is granted after the slice moved on but before the queued resource it left
/// could be deleted (its deletes fail here): the slice goes back to the reservation instead of
/// throwing the granted capacity away, and nothing is created on the Spot rung.
#[tokio::test]
async fn a_reservation_granted_just_after_the_move_is_gone_back_to() {
    use gcp_emulator::{Code, Fault};
    let mut env = TestEnv::start().await;
    env.gcp.create_reservation(RESERVATION, 0).unwrap();
    env.gcp
        .inject(Fault::FailCalls {
            service: "tpu".into(),
            method: "queuedResources.delete".into(),
            count: 1_000,
            code: Code::Unavailable,
            message: None,
        })
        .unwrap();
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env.create(&planned("back")).await;
    env.wait_for::<TpuSlice, _>("back", "moved on to the Spot rung", STEP, |s| {
        s.status.as_ref().is_some_and(|st| st.plan_moves() == 1)
    })
    .await;
    assert_eq!(
        env.gcp.queued_resources().len(),
        1,
        "the reserved rung's request is still there"
    );
    env.gcp.create_reservation(RESERVATION, 8).unwrap();
    let ready = env
        .wait_for::<TpuSlice, _>("back", "Ready on the reservation", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
        })
        .await;
    let plan = ready.status.unwrap().capacity_plan.unwrap();
    assert_eq!((plan.rung, plan.moves), (0, 0), "{plan:#?}");
    let outcomes: Vec<_> = plan
        .attempts
        .iter()
        .map(|a| (a.capacity.as_str(), a.outcome))
        .collect();
    assert_eq!(outcomes, vec![("reserved", AttemptOutcome::Landed)]);
    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        0,
        "nothing asked on the Spot rung"
    );
    assert_eq!(env.gcp.call_count("tpu", "queuedResources.create"), 1);
    env.gcp.clear_faults();
}
