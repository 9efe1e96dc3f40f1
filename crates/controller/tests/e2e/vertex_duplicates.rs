//! Issue 21 item 5: `customJobs.create` has no request id, so a create whose reply is lost,
//! followed by a list that does not show the job yet, yields a second job for the same attempt.
//! The pipeline must notice once a list shows both, keep the oldest, cancel the other with a
//! Warning `DuplicateJobCancelled`, converge, and leave nothing running once deleted.

use std::time::Duration;

use gcp_emulator::Fault;
use test_kit::TestEnv;
use tpu_operator_api::training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase};
use tpu_operator_controller::{kinds::training_pipeline, never_shutdown};

const STEP: Duration = Duration::from_secs(15);

fn phase(tp: &TrainingPipeline) -> Phase {
    tp.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn running(jobs: &[serde_json::Value]) -> Vec<String> {
    const TERMINAL: [&str; 5] = [
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_CANCELLING",
        "JOB_STATE_EXPIRED",
    ];
    jobs.iter()
        .filter(|j| !TERMINAL.contains(&j["state"].as_str().unwrap_or_default()))
        .map(|j| j["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn lost_create_reply_and_lagging_list_leave_one_job_per_attempt() {
    let mut env = TestEnv::start().await;
    // Two-hour runs: the duplicate must still run when the lists catch up and a pass sees it,
    // however late a busy machine runs that pass while the waits move the clock 15 s a poll.
    let mut config = env.gcp.config();
    config.durations.job_run = Duration::from_secs(2 * 3600);
    env.gcp.set_config(config);
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    // The first create is carried out but answered 503, and new jobs stay out of lists for two
    // emulated minutes: the retry's list cannot see the first job, so it creates a second.
    env.gcp
        .inject(Fault::LoseReply {
            service: "vertex".into(),
            method: "customJobs.create".into(),
            count: 1,
            code: None,
        })
        .unwrap();
    env.gcp
        .inject(Fault::VertexListLag {
            lists: 0,
            seconds: 120,
        })
        .unwrap();
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("dup".into());
    tp.spec.preprocess = None;
    env.create(&tp).await;
    env.until("the lost reply's second job", Duration::ZERO, async || {
        let jobs = env.gcp.custom_jobs();
        if jobs.len() >= 2 { Ok(()) } else { Err(jobs) }
    })
    .await;
    let mut jobs: Vec<String> = env
        .gcp
        .custom_jobs()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect();
    jobs.sort();
    let (first, second) = (jobs[0].clone(), jobs[1].clone());
    let created_second = env
        .wait_for::<TrainingPipeline, _>("dup", "the second job recorded", Duration::ZERO, |tp| {
            tp.status.as_ref().and_then(|s| s.custom_job_name.as_deref()) == Some(second.as_str())
        })
        .await;
    assert_eq!(created_second.status.unwrap().attempts, 1);

    // Once the lists catch up, the second job is cancelled and the first, older, kept.
    let events = env.wait_for_event("dup", "DuplicateJobCancelled", STEP).await;
    let event = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("DuplicateJobCancelled"))
        .unwrap();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains(&second) && note.contains(&first), "{note}");
    assert_eq!(running(&env.gcp.custom_jobs()), vec![first.clone()]);

    let tp = env
        .wait_for::<TrainingPipeline, _>("dup", "Succeeded", STEP, |tp| {
            phase(tp) == Phase::Succeeded || phase(tp) == Phase::Failed
        })
        .await;
    let st = tp.status.clone().unwrap();
    assert_eq!(st.phase, Phase::Succeeded, "{:?}", st.message);
    assert_eq!(
        st.custom_job_name.as_deref(),
        Some(first.as_str()),
        "the kept job is tracked"
    );
    assert_eq!(st.attempts, 1, "a duplicate is no new attempt");
    assert_eq!(env.gcp.custom_jobs().len(), 2, "no third job");

    env.api::<TrainingPipeline>()
        .delete("dup", &Default::default())
        .await
        .unwrap();
    env.wait_gone::<TrainingPipeline>("dup", STEP).await;
    assert!(running(&env.gcp.custom_jobs()).is_empty());
    assert!(
        env.gcp.custom_jobs().is_empty(),
        "both jobs deleted with the pipeline: {:?}",
        env.gcp.custom_jobs()
    );
}

/// Deleting a pipeline right after the duplicate was made, while lists show neither job: the
/// recorded one is found by name and cancelled, its record kept until lists have had time to show
/// the lost one, which is then cancelled too; nothing is left running and no record is left.
#[tokio::test]
async fn cleanup_cancels_every_job_of_the_attempt() {
    let mut env = TestEnv::start().await;
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    env.gcp
        .inject(Fault::LoseReply {
            service: "vertex".into(),
            method: "customJobs.create".into(),
            count: 1,
            code: None,
        })
        .unwrap();
    env.gcp
        .inject(Fault::VertexListLag {
            lists: 0,
            seconds: 120,
        })
        .unwrap();
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("dup-delete".into());
    tp.spec.preprocess = None;
    env.create(&tp).await;
    env.wait_for::<TrainingPipeline, _>("dup-delete", "a job recorded", Duration::ZERO, |tp| {
        tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some())
    })
    .await;
    env.api::<TrainingPipeline>()
        .delete("dup-delete", &Default::default())
        .await
        .unwrap();
    env.wait_gone::<TrainingPipeline>("dup-delete", STEP).await;
    assert!(env.gcp.custom_jobs().is_empty(), "{:?}", env.gcp.custom_jobs());
}

/// Issue 21 item 8: Vertex answers `customJobs.get` of a non-numeric id with 400
/// INVALID_ARGUMENT, not 404 (Config Connector's recording, see gcp-emulator's
/// `tests/golden/SOURCE.md`). A recorded name Vertex calls malformed names no job: it counts as
/// gone, the attempt's job is found again by its labels, and the pipeline is not stuck retrying
/// the same get.
#[tokio::test]
async fn a_malformed_recorded_job_name_counts_as_gone() {
    use kube::api::{Patch, PatchParams};
    let mut env = TestEnv::start().await;
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    let mut tp: TrainingPipeline = test_kit::from_yaml(include_str!("../../../../examples/quickstart.yaml"));
    tp.metadata.name = Some("garbled".into());
    tp.spec.preprocess = None;
    env.create(&tp).await;
    let recorded = env
        .wait_for::<TrainingPipeline, _>("garbled", "a job recorded", Duration::ZERO, |tp| {
            tp.status.as_ref().is_some_and(|s| s.custom_job_name.is_some())
        })
        .await;
    let real = recorded.status.unwrap().custom_job_name.unwrap();
    let garbled = format!(
        "{}/customJobs/not-a-number",
        real.split("/customJobs/").next().unwrap()
    );
    let refused = |env: &TestEnv| {
        env.gcp
            .calls()
            .iter()
            .any(|c| c.method == "customJobs.get" && c.status == 400)
    };
    env.until("the garbled name read", Duration::ZERO, async || {
        if refused(&env) {
            return true;
        }
        let patch = serde_json::json!({"status": {"customJobName": garbled}});
        env.api::<TrainingPipeline>()
            .patch_status("garbled", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        false
    })
    .await;
    let tp = env
        .wait_for::<TrainingPipeline, _>("garbled", "Succeeded", STEP, |tp| {
            phase(tp) == Phase::Succeeded || phase(tp) == Phase::Failed
        })
        .await;
    let st = tp.status.unwrap();
    assert_eq!(st.phase, Phase::Succeeded, "{:?}", st.message);
    assert_eq!(
        st.custom_job_name.as_deref(),
        Some(real.as_str()),
        "found again by label"
    );
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 1);
}
