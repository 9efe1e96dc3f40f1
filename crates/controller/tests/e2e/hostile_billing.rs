//! Red team, round two (issue 47 items 3 and 4): usage counts what still bills. A Vertex job that
//! is still cancelling after a suspend, and a TPU node left by an allowed `deletionPolicy: Orphan`,
//! keep counting against the namespace's `maxChips` until they have ended, whatever the sweeper
//! lists and however the tenant orders its objects. Each test plays the attack through the real
//! path (CR → controller → gcp-emulator → status) and measures what bills in the emulator. The
//! tenant's writes (create, suspend, delete) go through [`tenant::as_tenant`] (its `edit`
//! ServiceAccount on the real server); the policies, the cloud's timings and the sweeper are the
//! platform's.
//!
//! Before the fix: the suspend attack ran 16 chips under `maxChips: 8` (the cancelling job plus
//! the slice admitted beside it, or the job resume created beside it), and each orphan attack 16
//! chips (the orphan plus the slice admitted once a sweep had forgotten it).

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use test_kit::{Tenant, TestEnv};
use tpu_operator_api::{
    tpu_slice::TpuSlice,
    training_pipeline::{StageName, StageState, TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    governance::tenancy::book::LISTING_TTL,
    sweeper::{Mode, SweepReport, Sweeper, SweeperConfig},
};

use crate::tenant::{self, is_ready, slice, slice_stalled as stalled};

const STEP: Duration = Duration::from_secs(20);
/// Chips of the fixtures: a v6e-8 slice, a ct6e-standard-4t 2x4 Vertex job.
const CHIPS: usize = 8;

/// Chips billing in the emulator now: TPU nodes (deleting ones included) and Vertex jobs that
/// have not ended (cancelling ones included).
fn chips_billing(env: &TestEnv) -> usize {
    let live = ["QUEUED", "PENDING", "RUNNING", "CANCELLING", "UPDATING"];
    let jobs = env
        .gcp
        .custom_jobs()
        .iter()
        .filter(|j| {
            let state = j["state"].as_str().unwrap_or_default();
            live.iter().any(|s| state == format!("JOB_STATE_{s}"))
        })
        .count();
    CHIPS * (jobs + env.gcp.nodes().len())
}

fn job_states(env: &TestEnv) -> Vec<String> {
    env.gcp
        .custom_jobs()
        .iter()
        .map(|j| j["state"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A Vertex pipeline of one 8-chip job (no preprocessing).
fn vertex_pipeline(name: &str) -> TrainingPipeline {
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some(name.into());
    tp.metadata.namespace = None;
    tp.spec.preprocess = None;
    tp.spec.training.vertex.as_mut().unwrap().tpu_topology = Some("2x4".into());
    tp
}

fn train_state(tp: &TrainingPipeline) -> Option<StageState> {
    let st = tp.status.as_ref()?;
    st.stages
        .iter()
        .find(|s| s.name == StageName::Train)
        .map(|s| s.state)
}

async fn suspend(tenant: &Tenant, name: &str, on: bool) {
    tenant
        .api::<TrainingPipeline>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"suspend": on}})),
        )
        .await
        .expect("patch spec.suspend as the tenant");
}

/// Issue 47, "Suspend while a job still cancels": the suspended pipeline's job keeps billing
/// while Vertex cancels it (2 h here). It keeps counting: another 8-chip slice is refused under
/// `maxChips: 8`, and resuming starts no job beside it; the next attempt starts once the cancel
/// has ended. Before the fix the slice was admitted (16 chips) and resume created a second job
/// beside the cancelling one (16 chips; 24 with one more suspend and resume).
#[tokio::test]
async fn a_cancelling_job_keeps_counting_through_suspend_and_resume() {
    let mut env = TestEnv::start().await;
    let mut config = env.gcp.config();
    config.durations.job_cancel = Duration::from_secs(2 * 3600);
    config.durations.job_run = Duration::from_secs(24 * 3600);
    env.gcp.set_config(config);
    let rules = json!({"maxChips": 8, "allowedBuckets": ["demo-project-tpu-data"]});
    tenant::start(&mut env, Some(rules)).await;
    let tenant = tenant::as_tenant(&env).await;
    tenant.create(&vertex_pipeline("p")).await;
    env.wait_for::<TrainingPipeline, _>("p", "training", STEP, |tp| {
        train_state(tp) == Some(StageState::Running)
    })
    .await;

    suspend(&tenant, "p", true).await;
    let step = Duration::from_secs(1);
    env.wait_for::<TrainingPipeline, _>("p", "Suspended", step, |tp| {
        tp.status.as_ref().is_some_and(|s| s.phase == Phase::Suspended)
    })
    .await;
    assert_eq!(job_states(&env), ["JOB_STATE_CANCELLING"]);

    // While it cancels, the job still bills: another 8 chips are refused (looked at after the
    // usage book's listing, at most 5 s old, was taken again).
    env.idle(LISTING_TTL + Duration::from_secs(1), step).await;
    tenant.create(&slice("beside", json!({}))).await;
    let beside: TpuSlice = env
        .wait_for("beside", "PolicyDenied", step, |s| stalled(s).is_some())
        .await;
    let message = stalled(&beside).unwrap().1;
    assert!(
        message.contains("Vertex job of TrainingPipeline p") && message.contains("maxChips"),
        "{message}"
    );
    assert_eq!(chips_billing(&env), CHIPS, "{:?}", job_states(&env));
    tenant
        .api::<TpuSlice>()
        .delete("beside", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("beside", step).await;

    // Resuming while the job still cancels starts nothing beside it.
    suspend(&tenant, "p", false).await;
    env.idle(Duration::from_secs(2), step).await;
    assert_eq!(
        env.gcp.call_count("vertex", "customJobs.create"),
        1,
        "no second job while the first still cancels: {:?}",
        job_states(&env)
    );
    assert!(chips_billing(&env) <= CHIPS, "{:?}", job_states(&env));

    // Once the cancel has ended, the next attempt starts, alone.
    let resumed = env
        .wait_for::<TrainingPipeline, _>("p", "the next attempt", Duration::from_secs(120), |tp| {
            tp.status.as_ref().is_some_and(|s| s.attempts == 2)
        })
        .await;
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 2);
    assert!(chips_billing(&env) <= CHIPS, "{:?}", job_states(&env));
    assert_ne!(resumed.status.unwrap().phase, Phase::Failed);
}

/// A report-mode sweeper over the test's namespace, with no configured place (a default install).
fn sweeper(env: &TestEnv) -> Sweeper {
    Sweeper::new(SweeperConfig {
        mode: Mode::Report,
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    })
}

/// Creates `name` with `deletionPolicy: Orphan`, waits for its node, and deletes the slice.
async fn orphan_one(env: &TestEnv, tenant: &Tenant, name: &str) {
    tenant
        .create(&slice(name, json!({"deletionPolicy": "Orphan"})))
        .await;
    env.wait_for::<TpuSlice, _>(name, "Ready", STEP, is_ready).await;
    tenant
        .api::<TpuSlice>()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>(name, STEP).await;
}

/// After the orphan: another 8-chip slice must be refused, whatever the sweeps in between saw,
/// and the sweeper reports the orphan.
async fn the_orphan_still_counts(
    env: &TestEnv,
    tenant: &Tenant,
    sweeper: &Sweeper,
    ctx: &tpu_operator_controller::Context,
) {
    let report: SweepReport = sweeper.sweep(ctx).await.expect("sweep");
    // Past the usage book's listing (taken while the orphaned slice still existed).
    env.idle(LISTING_TTL + Duration::from_secs(1), Duration::from_secs(1))
        .await;
    tenant.create(&slice("next", json!({}))).await;
    let next: TpuSlice = env
        .wait_for("next", "PolicyDenied", STEP, |s| stalled(s).is_some())
        .await;
    let message = stalled(&next).unwrap().1;
    env.idle(Duration::from_millis(500), STEP).await;
    assert_eq!(
        chips_billing(env),
        CHIPS,
        "16 chips must never run under maxChips 8: {:?}",
        env.gcp.nodes()
    );
    assert!(
        message.contains("orphaned node of deleted TpuSlice kept (8 chips"),
        "{message}"
    );
    let report = if report.orphans.is_empty() {
        sweeper.sweep(ctx).await.expect("sweep")
    } else {
        report
    };
    assert_eq!(
        report.orphans.len(),
        1,
        "the sweeper reports the orphan: {report:#?}"
    );
}

/// Issue 47, "Orphans that stop counting", first form: the orphan is made between two sweeps, so
/// no earlier sweep learned its zone. The next sweep does not list the zone; before the fix it
/// then dropped the orphan from the namespace's usage and the next slice ran beside it (16 chips
/// under `maxChips: 8`), and the sweeper reported 0 orphans. The orphan's own place is remembered
/// at its deletion (and survives a restart of the operator).
#[tokio::test]
async fn an_orphan_made_between_sweeps_keeps_counting() {
    let mut env = TestEnv::start().await;
    tenant::start(&mut env, Some(json!({"allowOrphan": true, "maxChips": 8}))).await;
    let tenant = tenant::as_tenant(&env).await;
    let sweeper = sweeper(&env);
    sweeper
        .sweep(&env.ctx)
        .await
        .expect("first sweep: nothing learned yet");
    orphan_one(&env, &tenant, "kept").await;
    assert_eq!(env.gcp.nodes().len(), 1, "orphaned by an allowed policy");
    // The operator restarts: a new process, a new sweeper.
    env.stop_all();
    let ctx = tenant::start(&mut env, None).await;
    let sweeper = self::sweeper(&env);
    the_orphan_still_counts(&env, &tenant, &sweeper, &ctx).await;
}

/// Issue 47, "Orphans that stop counting", second form: the tenant first fills its 16 learned
/// places with suspended slices (which bill nothing), so the zone it then orphans a node in is
/// over the bound and never listed. Before the fix the orphan stopped counting at the next sweep
/// (16 chips under `maxChips: 8`) and the sweeper reported 0 orphans.
#[tokio::test]
async fn suspended_slices_do_not_crowd_an_orphan_out_of_the_count() {
    let mut env = TestEnv::start().await;
    let ctx = tenant::start(&mut env, Some(json!({"allowOrphan": true, "maxChips": 8}))).await;
    let tenant = tenant::as_tenant(&env).await;
    for i in 0..16 {
        let fill = slice(
            &format!("fill{i}"),
            json!({"zone": format!("us-central{i}-a"), "suspend": true}),
        );
        tenant.create(&fill).await;
    }
    for i in 0..16 {
        env.wait_for::<TpuSlice, _>(&format!("fill{i}"), "Suspended", STEP, |s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.phase == tpu_operator_api::tpu_slice::TpuSlicePhase::Suspended)
        })
        .await;
    }
    let sweeper = sweeper(&env);
    sweeper.sweep(&ctx).await.expect("sweep");
    sweeper.sweep(&ctx).await.expect("sweep");
    orphan_one(&env, &tenant, "kept").await;
    sweeper.sweep(&ctx).await.expect("sweep");
    sweeper.sweep(&ctx).await.expect("sweep");
    the_orphan_still_counts(&env, &tenant, &sweeper, &ctx).await;
}
