//! Table tests of the pipeline plan: stage transitions, retries, suspend and TTL.

use std::time::Duration;

use chrono::TimeZone;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    training_pipeline::TrainingPipeline,
};

use tpu_operator_gcp::aiplatform_v1::model::JobState;

use super::{super::report, *};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap()
}

fn quickstart() -> TrainingPipelineSpec {
    let tp: TrainingPipeline =
        serde_yaml::from_str(include_str!("../../../../../../examples/quickstart.yaml")).unwrap();
    tp.spec
}

fn tpu_vm() -> TrainingPipelineSpec {
    let tp: TrainingPipeline =
        serde_yaml::from_str(include_str!("../../../../../../examples/tpu-vm-pipeline.yaml")).unwrap();
    tp.spec
}

fn ready() -> Child {
    Child::Ready { message: "ok".into() }
}

fn running() -> Child {
    Child::Progressing {
        reason: "Running".into(),
        message: "batch RUNNING".into(),
    }
}

fn job(attempt: i32, state: JobState) -> JobView {
    JobView {
        name: format!("projects/1/locations/us-east5/customJobs/{attempt}"),
        attempt,
        state,
        message: "boom".into(),
        exit_code: None,
        model_exists: None,
        preempted: false,
    }
}

fn vertex(preprocess: Child, job: Option<JobView>) -> Observed {
    Observed {
        preprocess,
        training: TrainingObserved::Vertex { job },
        held_jobs: vec![],
        duplicate_jobs: vec![],
        pending_operation_done: None,
        costs: vec![],
    }
}

fn vm(slice: Child, marker: Marker) -> Observed {
    Observed {
        preprocess: ready(),
        training: TrainingObserved::TpuVm { slice, marker },
        held_jobs: vec![],
        duplicate_jobs: vec![],
        pending_operation_done: None,
        costs: vec![],
    }
}

fn run(spec: &TrainingPipelineSpec, status: &TrainingPipelineStatus, observed: &Observed) -> Planned {
    run_at(spec, status, observed, now())
}

fn run_at(
    spec: &TrainingPipelineSpec,
    status: &TrainingPipelineStatus,
    observed: &Observed,
    now: DateTime<Utc>,
) -> Planned {
    planned(&input(spec, status, observed, now))
}

/// What a test reads of a plan: its action, Events and requeue as the plan decides them, and
/// the status `report` builds of it when the action records nothing ([`report::decided`]).
#[derive(Debug)]
struct Planned {
    action: Action,
    status: TrainingPipelineStatus,
    events: Vec<Transition>,
    requeue: Requeue,
}

/// The plan for `input`, read as [`Planned`] (the pipeline at generation 1).
fn planned(input: &Input) -> Planned {
    let p = plan(input);
    let basis = report::Basis {
        spec: input.spec,
        old: input.status,
        generation: Some(1),
        costs: &input.observed.costs,
    };
    Planned {
        status: report::decided(&basis, &p),
        action: p.action,
        events: p.details.events,
        requeue: p.verdict.requeue,
    }
}

/// The plan's input for a pipeline `p`, without a rerun annotation or Kueue.
fn input<'a>(
    spec: &'a TrainingPipelineSpec,
    status: &'a TrainingPipelineStatus,
    observed: &'a Observed,
    now: DateTime<Utc>,
) -> Input<'a> {
    Input {
        spec,
        status,
        observed,
        now,
        preprocess_child: "p-preprocess",
        train_child: "p-train",
        rerun: None,
        queue: None,
        budget: None,
    }
}

/// Runs the plan and feeds the status back, as successive reconciles do.
fn step(spec: &TrainingPipelineSpec, status: &mut TrainingPipelineStatus, observed: &Observed) -> Planned {
    let p = run(spec, status, observed);
    *status = p.status.clone();
    p
}

fn train(st: &TrainingPipelineStatus) -> &tpu_operator_api::training_pipeline::StageStatus {
    st.stage(StageName::Train)
}

#[test]
fn stages_run_in_order_preprocess_train_done() {
    let spec = quickstart();
    let mut st = TrainingPipelineStatus::default();
    let cases: Vec<(Observed, Action, Phase)> = vec![
        (
            vertex(Child::Absent, None),
            Action::CreatePreprocess,
            Phase::Preprocessing,
        ),
        (vertex(running(), None), Action::Nothing, Phase::Preprocessing),
        (
            vertex(ready(), None),
            Action::CreateJob { attempt: 1 },
            Phase::Provisioning,
        ),
        (
            vertex(ready(), Some(job(1, JobState::Pending))),
            Action::Nothing,
            Phase::Provisioning,
        ),
        (
            vertex(ready(), Some(job(1, JobState::Running))),
            Action::Nothing,
            Phase::Training,
        ),
        (
            vertex(
                ready(),
                Some(JobView {
                    model_exists: Some(true),
                    ..job(1, JobState::Succeeded)
                }),
            ),
            Action::Nothing,
            Phase::Succeeded,
        ),
    ];
    for (i, (observed, action, phase)) in cases.into_iter().enumerate() {
        let p = step(&spec, &mut st, &observed);
        assert_eq!((&p.action, p.status.phase), (&action, phase), "step {i}");
    }
    assert_eq!(progress_of(&st.conditions), Some(Progress::Ready));
    assert_eq!(
        st.outputs.as_ref().unwrap().model_uri.as_deref(),
        Some("gs://demo-project-tpu-data/models/quickstart/model/")
    );
    assert!(st.completion_time.is_some());
    assert_eq!(st.stage(StageName::Preprocess).state, StageState::Succeeded);
}

#[test]
fn no_preprocess_stage_trains_at_once_and_marks_the_stage_skipped() {
    let mut spec = quickstart();
    spec.preprocess = None;
    let p = run(
        &spec,
        &TrainingPipelineStatus::default(),
        &vertex(Child::Absent, None),
    );
    assert_eq!(p.action, Action::CreateJob { attempt: 1 });
    assert_eq!(p.status.stage(StageName::Preprocess).state, StageState::Skipped);
    assert_eq!(p.status.accelerator_type.as_deref(), Some("v6e-4"));
}

/// The plan's record has no room for what only `report` writes: the generation and the cost
/// are `report`'s (from the pipeline and the children's estimates), and what neither the plan
/// nor this pass's check changes (links, checkpoint, time spent) stays as stored.
#[test]
fn report_brings_in_what_the_record_cannot_hold() {
    use tpu_operator_api::{
        common::{CostEstimate, Links},
        training_pipeline::{CheckpointStatus, TimeSpent},
    };
    let mut spec = quickstart();
    spec.preprocess = None;
    let mut st = TrainingPipelineStatus::default();
    let running = vertex(Child::Absent, Some(job(1, JobState::Running)));
    step(&spec, &mut st, &vertex(Child::Absent, None));
    step(&spec, &mut st, &running);
    st.observed_generation = Some(0);
    st.links = Some(Links {
        console: Some("console".into()),
        ..Default::default()
    });
    st.checkpoint = Some(CheckpointStatus {
        latest_step: Some(100),
        ..Default::default()
    });
    st.time_spent = Some(TimeSpent::default());
    let cost = |so_far_usd, per_hour_usd| CostEstimate {
        so_far_usd,
        per_hour_usd,
        price_key: None,
        accrued_through: None,
    };
    st.estimated_cost = Some(cost(1.0, 0.0));
    let billed = Observed {
        costs: vec![cost(2.5, 4.0)],
        ..running.clone()
    };
    let p = run(&spec, &st, &billed);
    assert_eq!(p.status.phase, Phase::Training);
    assert_eq!(p.status.observed_generation, Some(1));
    assert_eq!(p.status.estimated_cost, Some(cost(2.5, 4.0)));
    assert_eq!(
        (&p.status.links, &p.status.checkpoint, &p.status.time_spent),
        (&st.links, &st.checkpoint, &st.time_spent)
    );
    let stored = p.status.clone();
    let gone = run(&spec, &stored, &running);
    assert_eq!(
        gone.status.estimated_cost,
        Some(cost(2.5, 0.0)),
        "spend never goes down"
    );
}

#[test]
fn preprocessing_failure_stops_the_pipeline() {
    let spec = quickstart();
    let stalled = Child::Stalled {
        reason: "RetriesExhausted".into(),
        message: "batch FAILED: schema".into(),
    };
    let p = run(&spec, &TrainingPipelineStatus::default(), &vertex(stalled, None));
    assert_eq!((p.status.phase, &p.action), (Phase::Failed, &Action::Nothing));
    let c = find_condition(&p.status.conditions, types::STALLED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", PREPROCESS_FAILED)
    );
    assert!(
        c.message.contains("p-preprocess") && c.message.contains("schema"),
        "{}",
        c.message
    );
    assert!(p.events.iter().any(|e| e.warning && e.reason == "Failed"));
}

#[test]
fn failed_jobs_retry_up_to_max_retries_and_expiry_does_not_count() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 1;
    let mut st = TrainingPipelineStatus::default();
    let cases: Vec<(Option<JobView>, Action, Phase, i32)> = vec![
        (None, Action::CreateJob { attempt: 1 }, Phase::Provisioning, 1),
        (
            Some(job(1, JobState::Failed)),
            Action::CreateJob { attempt: 2 },
            Phase::Provisioning,
            2,
        ),
        // FlexStart capacity wait expired: a new job, not counted.
        (
            Some(job(2, JobState::Expired)),
            Action::CreateJob { attempt: 3 },
            Phase::Provisioning,
            2,
        ),
        (
            Some(job(3, JobState::Running)),
            Action::Nothing,
            Phase::Training,
            2,
        ),
        (Some(job(3, JobState::Failed)), Action::Nothing, Phase::Failed, 2),
    ];
    for (i, (j, action, phase, counted)) in cases.into_iter().enumerate() {
        let p = step(&spec, &mut st, &vertex(Child::Absent, j));
        assert_eq!((&p.action, p.status.phase), (&action, phase), "step {i}");
        assert_eq!(train(&st).attempts, counted, "step {i}");
    }
    let c = find_condition(&st.conditions, types::STALLED).unwrap();
    assert_eq!(c.reason, reasons::RETRIES_EXHAUSTED);
    assert_eq!(st.attempts, 3);
}

#[test]
fn vertex_terminal_states_without_retry() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 3;
    for (j, reason) in [
        (job(1, JobState::Cancelled), reasons::CANCELLED),
        (
            JobView {
                model_exists: Some(false),
                ..job(1, JobState::Succeeded)
            },
            reasons::OUTPUT_MISSING,
        ),
    ] {
        let p = run(
            &spec,
            &TrainingPipelineStatus::default(),
            &vertex(Child::Absent, Some(j)),
        );
        assert_eq!(p.status.phase, Phase::Failed);
        let c = find_condition(&p.status.conditions, types::STALLED).unwrap();
        assert_eq!(c.reason, reason);
    }
}

#[test]
fn tpu_vm_attempt_fails_releases_the_slice_then_retries() {
    let spec = tpu_vm(); // maxRetries: 1
    let mut st = TrainingPipelineStatus::default();
    let failed = || Marker::Failed {
        detail: "exit 1".into(),
        exit_code: Some(1),
    };
    let slice_ready = ready();
    let cases: Vec<(Observed, Action, Phase)> = vec![
        (
            vm(Child::Absent, Marker::None),
            Action::CreateSlice { attempt: 1 },
            Phase::Provisioning,
        ),
        (
            vm(
                Child::Progressing {
                    reason: reasons::WAITING_FOR_CAPACITY.into(),
                    message: "queued".into(),
                },
                Marker::None,
            ),
            Action::Nothing,
            // Issue 35 item 6: a wait for capacity is not provisioning.
            Phase::Waiting,
        ),
        (
            vm(slice_ready.clone(), Marker::None),
            Action::Nothing,
            Phase::Training,
        ),
        (
            vm(slice_ready.clone(), failed()),
            Action::DeleteSlice,
            Phase::Training,
        ),
        (vm(Child::Deleting, failed()), Action::Nothing, Phase::Training),
        (
            vm(Child::Absent, failed()),
            Action::CreateSlice { attempt: 2 },
            Phase::Provisioning,
        ),
        (
            vm(slice_ready.clone(), Marker::Succeeded),
            Action::DeleteSlice,
            Phase::Succeeded,
        ),
        // Finished: the slice is still being released, then nothing.
        (
            vm(Child::Deleting, Marker::None),
            Action::Nothing,
            Phase::Succeeded,
        ),
        (vm(Child::Absent, Marker::None), Action::Nothing, Phase::Succeeded),
    ];
    for (i, (observed, action, phase)) in cases.into_iter().enumerate() {
        let p = step(&spec, &mut st, &observed);
        assert_eq!((&p.action, p.status.phase), (&action, phase), "step {i}");
    }
    assert_eq!(train(&st).attempts, 2);
    assert_eq!(
        st.outputs.unwrap().model_uri.as_deref(),
        Some(spec.artifacts.model_dir.as_str())
    );
}

/// Issue 35 item 2: suspending stops what bills, one thing per pass: the running job is
/// cancelled, the slice deleted, the running batch deleted; while the stop completes the status
/// stays put; resumed, the stopped attempt is replaced by one that spends no retry.
#[test]
fn suspend_stops_what_bills_and_resuming_spends_no_retry() {
    let mut vertex_spec = quickstart();
    vertex_spec.preprocess = None;
    let cancel = Action::CancelJob {
        name: job(1, JobState::Running).name,
    };
    // (spec, observed while running, stop action, observed while stopping, observed once stopped, resumed action)
    let cases: Vec<(TrainingPipelineSpec, Observed, Action, Observed, Observed, Action)> = vec![
        (
            vertex_spec.clone(),
            vertex(Child::Absent, Some(job(1, JobState::Running))),
            cancel.clone(),
            vertex(Child::Absent, Some(job(1, JobState::Cancelling))),
            vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
            Action::CreateJob { attempt: 2 },
        ),
        (
            vertex_spec.clone(),
            vertex(Child::Absent, Some(job(1, JobState::Pending))),
            cancel,
            vertex(Child::Absent, Some(job(1, JobState::Cancelling))),
            vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
            Action::CreateJob { attempt: 2 },
        ),
        (
            tpu_vm(),
            vm(ready(), Marker::None),
            Action::DeleteSlice,
            vm(Child::Deleting, Marker::None),
            vm(Child::Absent, Marker::None),
            Action::CreateSlice { attempt: 2 },
        ),
        (
            quickstart(),
            vertex(running(), None),
            Action::DeletePreprocess,
            vertex(Child::Deleting, None),
            vertex(Child::Absent, None),
            Action::CreatePreprocess,
        ),
    ];
    for (i, (mut spec, running, stop, stopping, stopped, resumed)) in cases.into_iter().enumerate() {
        let mut st = TrainingPipelineStatus::default();
        if spec.preprocess.is_none() {
            // Attempt 1 was created.
            let first = match running.training {
                TrainingObserved::Vertex { .. } => vertex(Child::Absent, None),
                TrainingObserved::TpuVm { .. } => vm(Child::Absent, Marker::None),
            };
            step(&spec, &mut st, &first);
        } else {
            step(&spec, &mut st, &vertex(Child::Absent, None));
        }
        step(&spec, &mut st, &running);
        let counted = train(&st).attempts;
        spec.suspend = true;
        let p = step(&spec, &mut st, &running);
        assert_eq!((&p.action, p.status.phase), (&stop, Phase::Suspended), "case {i}");
        let record = st.suspension.clone().expect("suspension recorded");
        assert!(
            record.suspended_time.is_some() && record.stopped.is_some(),
            "case {i}: {record:?}"
        );
        assert!(
            p.events.iter().any(|e| e.reason == reasons::SUSPENDED),
            "case {i}: {:?}",
            p.events
        );
        let message = st.message.clone().unwrap_or_default();
        assert!(message.contains("checkpoints are kept"), "case {i}: {message}");
        stopping_changes_nothing(&spec, &mut st, &stopping, &stopped, i);
        spec.suspend = false;
        if matches!(stopping.training, TrainingObserved::Vertex { job: Some(_) }) {
            // Resumed while the job still cancels: no job beside it.
            let later = now() + chrono::Duration::seconds(120);
            let waiting = run_at(&spec, &st, &stopping, later);
            assert_eq!(
                waiting.action,
                Action::Nothing,
                "case {i}: a job beside a cancelling one"
            );
        }
        let p = step(&spec, &mut st, &stopped);
        assert_eq!(p.action, resumed, "case {i}: resumed");
        assert_eq!(train(&st).attempts, counted, "case {i}: resuming spent a retry");
        assert!(
            p.events.iter().any(|e| e.reason == suspend::RESUMED),
            "case {i}: {:?}",
            p.events
        );
        let record = st.suspension.clone().unwrap();
        assert!(record.resumed_time.is_some(), "case {i}");
        if spec.preprocess.is_none() {
            assert_eq!(record.resumes, 1, "case {i}");
        }
    }
}

/// Stopping, then stopped: nothing else happens and the status stays as written, but for the
/// Train stage's end, recorded once the stopped job has ended (usage counts the job until then).
fn stopping_changes_nothing(
    spec: &TrainingPipelineSpec,
    st: &mut TrainingPipelineStatus,
    stopping: &Observed,
    stopped: &Observed,
    i: usize,
) {
    for observed in [stopping, stopped, stopped] {
        let later = now() + chrono::Duration::seconds(60);
        let again = run_at(spec, st, observed, later);
        assert_eq!(again.action, Action::Nothing, "case {i}");
        let mut status = again.status.clone();
        let ended = train(&status).end_time.clone();
        if ended != train(st).end_time {
            assert!(observed == stopped && ended.is_some(), "case {i}");
            let stage = status.stages.iter_mut().find(|s| s.name == StageName::Train);
            stage.unwrap().end_time = train(st).end_time.clone();
        }
        assert_eq!(&status, st, "case {i}: a pass while suspended changes the status");
        assert!(again.events.is_empty(), "case {i}: {:?}", again.events);
        *st = again.status;
    }
}

/// Suspended with maxRetries 0: the resumed attempt still has the whole budget of the stopped
/// one, and a job that finished before the cancel reached it is still a success.
#[test]
fn a_resumed_attempt_keeps_the_budget_and_a_finished_job_still_counts() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 0;
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Running))),
    );
    spec.suspend = true;
    step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Running))),
    );
    let done = JobView {
        model_exists: Some(true),
        ..job(1, JobState::Succeeded)
    };
    let p = run(&spec, &st, &vertex(Child::Absent, Some(done)));
    assert_eq!(p.status.phase, Phase::Succeeded, "finished before the cancel");
    step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
    );
    spec.suspend = false;
    let p = step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
    );
    assert_eq!(p.action, Action::CreateJob { attempt: 2 });
    // The resumed attempt fails: with maxRetries 0 that is final, after one counted attempt.
    let p = step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(2, JobState::Failed))),
    );
    assert_eq!(p.status.phase, Phase::Failed);
    assert!(
        st.message
            .as_deref()
            .unwrap_or_default()
            .contains("(1 attempts, maxRetries 0)"),
        "{:?}",
        st.message
    );
    // A job cancelled by someone else (not by suspend) still fails the pipeline.
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let p = step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
    );
    assert_eq!(p.status.phase, Phase::Failed);
}

#[test]
fn ttl_reaps_job_records_after_the_deadline_and_keeps_the_status() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.ttl_seconds_after_finished = Some(600);
    let done = JobView {
        model_exists: Some(true),
        ..job(1, JobState::Succeeded)
    };
    let finished = run(
        &spec,
        &TrainingPipelineStatus::default(),
        &vertex(Child::Absent, Some(done)),
    );
    let st = finished.status;
    assert_eq!(st.phase, Phase::Succeeded);

    let mut held = vertex(Child::Absent, None);
    held.held_jobs = vec![job(1, JobState::Succeeded)];
    let before = run_at(&spec, &st, &held, now() + chrono::Duration::seconds(599));
    assert_eq!(before.action, Action::Nothing);
    assert_eq!(before.requeue, Requeue::After(Duration::from_secs(1)));
    assert!(before.status.reaped_time.is_none());

    let due = now() + chrono::Duration::seconds(600);
    let reap = run_at(&spec, &st, &held, due);
    assert_eq!(
        reap.action,
        Action::DeleteJob {
            name: job(1, JobState::Succeeded).name
        }
    );
    let mut pending = reap.status.clone();
    pending.pending_operation = Some("op".into());
    let waiting = run_at(&spec, &pending, &vertex(Child::Absent, None), due);
    assert_eq!(waiting.action, Action::Nothing);
    assert!(waiting.status.reaped_time.is_none());

    let mut gone = vertex(Child::Absent, None);
    gone.pending_operation_done = Some(true);
    let reaped = run_at(&spec, &pending, &gone, due);
    assert!(reaped.status.reaped_time.is_some());
    assert!(reaped.status.pending_operation.is_none());
    assert_eq!(reaped.status.phase, Phase::Succeeded);
    let c = find_condition(&reaped.status.conditions, types::READY).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reasons::REAPED));
    // Reaped is final: nothing more happens.
    let again = run_at(&spec, &reaped.status, &vertex(Child::Absent, None), due);
    assert_eq!((again.action, again.status), (Action::Nothing, reaped.status));
}

#[test]
fn invalid_training_mode_stalls() {
    let mut spec = quickstart();
    spec.training.tpu_vm = tpu_vm().training.tpu_vm;
    let p = run(
        &spec,
        &TrainingPipelineStatus::default(),
        &vertex(Child::Absent, None),
    );
    assert_eq!(p.status.phase, Phase::Failed);
    let c = find_condition(&p.status.conditions, types::STALLED).unwrap();
    assert_eq!(c.reason, reasons::INVALID_SPEC);
}

#[test]
fn child_owned_by_someone_else_stalls() {
    let spec = quickstart();
    let p = run(
        &spec,
        &TrainingPipelineStatus::default(),
        &vertex(Child::NotOwned, None),
    );
    let c = find_condition(&p.status.conditions, types::STALLED).unwrap();
    assert_eq!(c.reason, CHILD_NOT_OWNED);
}

#[test]
fn unchanged_observations_give_an_unchanged_status() {
    let mut spec = quickstart();
    spec.preprocess = None;
    let observed = vertex(Child::Absent, Some(job(1, JobState::Running)));
    let first = run(&spec, &TrainingPipelineStatus::default(), &observed);
    let later = run_at(
        &spec,
        &first.status,
        &observed,
        now() + chrono::Duration::seconds(30),
    );
    assert_eq!(
        later.status, first.status,
        "no status write storm while nothing changes"
    );
    assert!(later.events.is_empty());
}

/// Issue 21 item 7: a Spot job that lost its VMs is a new job, not a spent retry (like a
/// preempted TpuSlice), with a Warning `Preempted` event; after `MAX_UNCOUNTED_PREEMPTIONS`
/// uncounted attempts a preemption counts again, so a pipeline cannot create jobs forever.
#[test]
fn spot_preemptions_do_not_use_up_max_retries() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 0;
    let mut st = TrainingPipelineStatus::default();
    let p = step(&spec, &mut st, &vertex(Child::Absent, None));
    assert_eq!(p.action, Action::CreateJob { attempt: 1 });
    let preempted = |attempt| JobView {
        preempted: true,
        message: "STOCKOUT: preempted".into(),
        ..job(attempt, JobState::Failed)
    };
    let p = step(&spec, &mut st, &vertex(Child::Absent, Some(preempted(1))));
    assert_eq!(
        (&p.action, p.status.phase),
        (&Action::CreateJob { attempt: 2 }, Phase::Provisioning)
    );
    assert_eq!(train(&st).attempts, 1, "the preempted attempt is not counted");
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.reason == reasons::PREEMPTED),
        "{:?}",
        p.events
    );
    // A real failure still counts: with maxRetries 0 the pipeline fails.
    let p = step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(2, JobState::Failed))),
    );
    assert_eq!(p.status.phase, Phase::Failed);

    // The bound: after MAX_UNCOUNTED_PREEMPTIONS uncounted attempts, a preemption counts.
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    for attempt in 1..=training::MAX_UNCOUNTED_PREEMPTIONS {
        let p = step(&spec, &mut st, &vertex(Child::Absent, Some(preempted(attempt))));
        assert_eq!(
            p.action,
            Action::CreateJob { attempt: attempt + 1 },
            "attempt {attempt}"
        );
    }
    let last = training::MAX_UNCOUNTED_PREEMPTIONS + 1;
    let p = step(&spec, &mut st, &vertex(Child::Absent, Some(preempted(last))));
    assert_eq!(p.status.phase, Phase::Failed);
}

fn run_rerun(
    spec: &TrainingPipelineSpec,
    status: &mut TrainingPipelineStatus,
    observed: &Observed,
    rerun: Option<&str>,
) -> Planned {
    let p = planned(&Input {
        rerun,
        ..input(spec, status, observed, now())
    });
    *status = p.status.clone();
    p
}

/// Issue 35 item 1: a suspended pipeline's plan records nothing of what it does not create: the
/// second pass over the same observations gives the same status (no write loop), no attempt is
/// counted, no Event repeats; resumed, the attempt it held back is the next one.
#[test]
fn a_suspended_plan_leaves_attempts_untouched_and_its_status_fixed() {
    let mut vertex_spec = quickstart();
    vertex_spec.preprocess = None;
    vertex_spec.max_retries = 1;
    let failed_once = {
        let mut st = TrainingPipelineStatus::default();
        step(&vertex_spec, &mut st, &vertex(Child::Absent, None));
        st
    };
    let failed = Marker::Failed {
        detail: "exit 1".into(),
        exit_code: Some(1),
    };
    let mut preempted = job(1, JobState::Failed);
    preempted.preempted = true;
    // (spec, status before, observed, attempts the resumed pass starts)
    let cases: Vec<(TrainingPipelineSpec, TrainingPipelineStatus, Observed, Action)> = vec![
        // Created suspended: no preprocessing batch.
        (
            quickstart(),
            TrainingPipelineStatus::default(),
            vertex(Child::Absent, None),
            Action::CreatePreprocess,
        ),
        // Suspended between stages: preprocessing done, no training job.
        (
            quickstart(),
            TrainingPipelineStatus::default(),
            vertex(ready(), None),
            Action::CreateJob { attempt: 1 },
        ),
        (
            vertex_spec.clone(),
            TrainingPipelineStatus::default(),
            vertex(Child::Absent, None),
            Action::CreateJob { attempt: 1 },
        ),
        // A failed attempt with a retry left, and a preempted one: the retry waits.
        (
            vertex_spec.clone(),
            failed_once.clone(),
            vertex(Child::Absent, Some(job(1, JobState::Failed))),
            Action::CreateJob { attempt: 2 },
        ),
        (
            vertex_spec.clone(),
            failed_once,
            vertex(Child::Absent, Some(preempted)),
            Action::CreateJob { attempt: 2 },
        ),
        (
            tpu_vm(),
            TrainingPipelineStatus::default(),
            vm(Child::Absent, Marker::None),
            Action::CreateSlice { attempt: 1 },
        ),
        (
            tpu_vm(),
            TrainingPipelineStatus::default(),
            vm(Child::Absent, failed),
            Action::CreateSlice { attempt: 1 },
        ),
    ];
    for (i, (mut spec, before, observed, resumed)) in cases.into_iter().enumerate() {
        spec.suspend = true;
        let mut st = before.clone();
        let first = step(&spec, &mut st, &observed);
        assert_eq!(
            (&first.action, first.status.phase),
            (&Action::Nothing, Phase::Suspended),
            "case {i}"
        );
        assert_eq!(st.attempts, before.attempts, "case {i}: attempts");
        assert_eq!(train(&st).attempts, train(&before).attempts, "case {i}");
        for _ in 0..3 {
            let again = run_at(&spec, &st, &observed, now() + chrono::Duration::seconds(30));
            assert_eq!(again.status, st, "case {i}: a second pass changes the status");
            assert!(again.events.is_empty(), "case {i}: {:?}", again.events);
        }
        let message = st.message.clone().unwrap_or_default();
        assert!(message.contains("spec.suspend is false"), "case {i}: {message}");
        spec.suspend = false;
        let p = run(&spec, &st, &observed);
        assert_eq!(p.action, resumed, "case {i}: resumed");
    }
}

fn exhausted(spec: &TrainingPipelineSpec) -> TrainingPipelineStatus {
    let mut st = TrainingPipelineStatus::default();
    step(spec, &mut st, &vertex(Child::Absent, None));
    let p = step(
        spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Failed))),
    );
    assert_eq!(p.status.phase, Phase::Failed);
    st
}

/// Issue 35 item 3: raising `maxRetries` on a pipeline Failed for `RetriesExhausted` starts the
/// next counted attempt (the checkpoint directory's contract applies); nothing else reopens it.
#[test]
fn raising_max_retries_resumes_a_pipeline_that_ran_out_of_retries() {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 0;
    let st = exhausted(&spec);
    let c = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(c.message.contains("maxRetries 0"), "{}", c.message);
    // (maxRetries, suspend) -> what the pass does
    let cases = [
        (0, false, Action::Nothing, Phase::Failed),
        (2, true, Action::Nothing, Phase::Failed),
        (1, false, Action::CreateJob { attempt: 2 }, Phase::Provisioning),
        (3, false, Action::CreateJob { attempt: 2 }, Phase::Provisioning),
    ];
    for (max, suspend, action, phase) in cases {
        spec.max_retries = max;
        spec.suspend = suspend;
        let p = run(&spec, &st, &vertex(Child::Absent, None));
        assert_eq!((&p.action, p.status.phase), (&action, phase), "maxRetries {max}");
        if phase == Phase::Provisioning {
            assert_eq!(train(&p.status).attempts, 2);
            assert!(p.status.completion_time.is_none());
            assert!(
                p.events.iter().any(|e| e.reason == reasons::RETRYING),
                "{:?}",
                p.events
            );
        }
    }
    // The resumed attempt fails: with maxRetries 1 that is final again, saying so.
    spec.max_retries = 1;
    spec.suspend = false;
    let mut st = st;
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let p = step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(2, JobState::Failed))),
    );
    assert_eq!(p.status.phase, Phase::Failed);
    let c = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(c.message.contains("(2 attempts, maxRetries 1)"), "{}", c.message);
    let p = run(&spec, &st, &vertex(Child::Absent, None));
    assert_eq!(p.action, Action::Nothing, "exhausted again");

    // A failure that is not an exhausted budget is not reopened by maxRetries.
    let mut spec = quickstart();
    spec.preprocess = None;
    let mut st = TrainingPipelineStatus::default();
    let missing = JobView {
        model_exists: Some(false),
        ..job(1, JobState::Succeeded)
    };
    step(&spec, &mut st, &vertex(Child::Absent, Some(missing)));
    spec.max_retries = 5;
    let p = run(&spec, &st, &vertex(Child::Absent, None));
    assert_eq!((p.action, p.status.phase), (Action::Nothing, Phase::Failed));
}

/// Issue 35 item 3: a new `tpu-operator.dev/rerun` value starts one new run of a finished
/// pipeline (a fresh `maxRetries` budget, a succeeded preprocessing kept); the same value again,
/// the value the pipeline was created with, and a value set mid-run start nothing more.
#[test]
fn the_rerun_annotation_starts_one_new_run_of_a_finished_pipeline() {
    let mut spec = quickstart();
    spec.max_retries = 0;
    let succeeded = JobView {
        model_exists: Some(true),
        ..job(1, JobState::Succeeded)
    };
    // Created with the annotation: that value is the first run's.
    let mut st = TrainingPipelineStatus::default();
    run_rerun(&spec, &mut st, &vertex(Child::Absent, None), Some("a"));
    assert_eq!(st.rerun.as_ref().map(|r| r.value.as_str()), Some("a"));
    run_rerun(&spec, &mut st, &vertex(ready(), None), Some("a"));
    // A new value mid-run waits for the run to finish.
    let p = run_rerun(
        &spec,
        &mut st,
        &vertex(ready(), Some(job(1, JobState::Running))),
        Some("b"),
    );
    assert_eq!((p.action, p.status.phase), (Action::Nothing, Phase::Training));
    run_rerun(
        &spec,
        &mut st,
        &vertex(ready(), Some(succeeded.clone())),
        Some("b"),
    );
    assert_eq!(st.phase, Phase::Succeeded);
    // Finished: one new run, preprocessing kept.
    let p = run_rerun(&spec, &mut st, &vertex(ready(), None), Some("b"));
    assert_eq!(
        (&p.action, p.status.phase),
        (&Action::CreateJob { attempt: 2 }, Phase::Provisioning)
    );
    let rerun = st.rerun.clone().unwrap();
    assert_eq!((rerun.value.as_str(), rerun.earlier_attempts), ("b", 1));
    assert!(st.outputs.as_ref().unwrap().model_uri.is_none());
    assert!(st.completion_time.is_none());
    assert_eq!(st.stage(StageName::Preprocess).state, StageState::Succeeded);
    assert!(
        p.events.iter().any(|e| e.reason == lifecycle::RERUN),
        "{:?}",
        p.events
    );
    // The new run fails with maxRetries 0: its own budget, not the earlier run's.
    run_rerun(
        &spec,
        &mut st,
        &vertex(ready(), Some(job(2, JobState::Failed))),
        Some("b"),
    );
    assert_eq!(st.phase, Phase::Failed);
    let c = find_condition(&st.conditions, types::STALLED).unwrap();
    assert!(c.message.contains("(1 attempts, maxRetries 0)"), "{}", c.message);
    // The same value again starts nothing; a newer one starts attempt 3.
    let p = run_rerun(&spec, &mut st.clone(), &vertex(ready(), None), Some("b"));
    assert_eq!((p.action, p.status.phase), (Action::Nothing, Phase::Failed));
    spec.suspend = true;
    let p = run_rerun(&spec, &mut st.clone(), &vertex(ready(), None), Some("c"));
    assert_eq!(
        (p.action, p.status.phase),
        (Action::Nothing, Phase::Failed),
        "suspended"
    );
    spec.suspend = false;
    let p = run_rerun(&spec, &mut st, &vertex(ready(), None), Some("c"));
    assert_eq!(p.action, Action::CreateJob { attempt: 3 });
}

/// A re-run waits for the last run's slice to be released, and runs a failed preprocessing
/// again (the earlier batch deleted first).
#[test]
fn a_rerun_releases_the_slice_first_and_repeats_a_failed_preprocessing() {
    let spec = tpu_vm();
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vm(Child::Absent, Marker::None));
    step(&spec, &mut st, &vm(ready(), Marker::Succeeded));
    assert_eq!(st.phase, Phase::Succeeded);
    let cases = [
        (vm(ready(), Marker::None), Action::DeleteSlice, Phase::Succeeded),
        (
            vm(Child::Deleting, Marker::None),
            Action::Nothing,
            Phase::Succeeded,
        ),
        (
            vm(Child::Absent, Marker::None),
            Action::CreateSlice { attempt: 2 },
            Phase::Provisioning,
        ),
    ];
    for (i, (observed, action, phase)) in cases.into_iter().enumerate() {
        let p = run_rerun(&spec, &mut st, &observed, Some("1"));
        assert_eq!((&p.action, p.status.phase), (&action, phase), "step {i}");
    }

    let spec = quickstart();
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let stalled = Child::Stalled {
        reason: "RetriesExhausted".into(),
        message: "batch FAILED".into(),
    };
    step(&spec, &mut st, &vertex(stalled.clone(), None));
    assert_eq!(st.phase, Phase::Failed);
    let cases = [
        (stalled, Action::DeletePreprocess),
        (Child::Deleting, Action::Nothing),
        (Child::Absent, Action::CreatePreprocess),
        (running(), Action::Nothing),
    ];
    for (i, (child, action)) in cases.into_iter().enumerate() {
        let p = run_rerun(&spec, &mut st, &vertex(child, None), Some("1"));
        assert_eq!(
            (&p.action, p.status.phase),
            (&action, Phase::Preprocessing),
            "step {i}"
        );
    }
    assert_eq!(st.stage(StageName::Preprocess).attempts, 2);
}

/// Issue 35 item 8: `spec.retryPolicy` decides a failure by its exit code, for Vertex and TPU VM
/// alike: `FailRun` ends the run at once (the slice released), `Ignore` retries without spending
/// `maxRetries` (until uncounted attempts reach their limit), anything else counts.
#[test]
fn retry_policy_decides_by_exit_code() {
    use tpu_operator_api::training_pipeline::{
        ExitCodeOperator, ExitCodes, RetryAction, RetryPolicy, RetryRule,
    };
    let rule = |action, values: &[i32]| RetryRule {
        action,
        on_exit_codes: ExitCodes {
            operator: ExitCodeOperator::In,
            values: values.to_vec(),
        },
    };
    let policy = RetryPolicy {
        rules: vec![
            rule(RetryAction::FailRun, &[3]),
            rule(RetryAction::Ignore, &[137]),
        ],
    };
    let failed_job = |attempt, code: i32| JobView {
        message: format!(
            "The replica workerpool0-0 exited with a non-zero status of {code}. Termination reason: Error."
        ),
        exit_code: Some(code),
        ..job(attempt, JobState::Failed)
    };
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 1;
    spec.retry_policy = Some(policy.clone());

    // Vertex, exit code 3: failed at once, with retries left.
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let p = step(&spec, &mut st, &vertex(Child::Absent, Some(failed_job(1, 3))));
    assert_eq!((p.status.phase, &p.action), (Phase::Failed, &Action::Nothing));
    let stalled = find_condition(&st.conditions, types::STALLED).unwrap();
    assert_eq!(stalled.reason, retry_policy::FAILED_BY_RETRY_POLICY);
    assert!(
        stalled.message.contains("spec.retryPolicy.rules[0] (FailRun)"),
        "{}",
        stalled.message
    );

    // Vertex, exit code 137 twice: two uncounted retries, then exit 1 counts once (maxRetries 1)
    // and a second exit 1 ends the run.
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    for (attempt, code, want) in [
        (1, 137, Action::CreateJob { attempt: 2 }),
        (2, 137, Action::CreateJob { attempt: 3 }),
        (3, 1, Action::CreateJob { attempt: 4 }),
    ] {
        let p = step(
            &spec,
            &mut st,
            &vertex(Child::Absent, Some(failed_job(attempt, code))),
        );
        assert_eq!(p.action, want, "attempt {attempt} exit {code}: {:?}", st.message);
    }
    assert_eq!(train(&st).attempts, 2, "only the exit-1 failure counted");
    let p = step(&spec, &mut st, &vertex(Child::Absent, Some(failed_job(4, 1))));
    assert_eq!(p.status.phase, Phase::Failed);

    // An Ignore that never ends: after MAX_UNCOUNTED_PREEMPTIONS uncounted attempts it counts.
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let mut attempt = 1;
    while st.phase != Phase::Failed && attempt < 30 {
        step(
            &spec,
            &mut st,
            &vertex(Child::Absent, Some(failed_job(attempt, 137))),
        );
        attempt += 1;
    }
    assert_eq!(st.phase, Phase::Failed, "an always-ignored failure must end");
    assert_eq!(st.attempts, training::MAX_UNCOUNTED_PREEMPTIONS + 2);

    // TPU VM, exit code 3: failed and the slice released, no new slice.
    let mut spec = tpu_vm();
    spec.max_retries = 2;
    spec.retry_policy = Some(policy);
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vm(Child::Absent, Marker::None));
    let exit3 = Marker::Failed {
        detail: "gs://b/m/_FAILED written (exit code 3)".into(),
        exit_code: Some(3),
    };
    let p = step(&spec, &mut st, &vm(ready(), exit3.clone()));
    assert_eq!((p.status.phase, &p.action), (Phase::Failed, &Action::DeleteSlice));
    let p = step(&spec, &mut st, &vm(Child::Absent, exit3));
    assert_eq!((p.status.phase, &p.action), (Phase::Failed, &Action::Nothing));
}

/// Issue 35 item 9: the slice of a failed run is kept while `keepFailedSliceFor` lasts, released
/// after it (or at once for a re-run), and `status.keptSlice` goes with it.
#[test]
fn a_failed_runs_slice_is_kept_then_released() {
    let mut spec = tpu_vm();
    spec.max_retries = 0;
    spec.training.tpu_vm.as_mut().unwrap().keep_failed_slice_for = Some("30m".into());
    let failed = Marker::Failed {
        detail: "exit 1".into(),
        exit_code: Some(1),
    };
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vm(Child::Absent, Marker::None));
    let p = step(&spec, &mut st, &vm(ready(), failed.clone()));
    assert_eq!((p.status.phase, &p.action), (Phase::Failed, &Action::Nothing));
    assert!(p.events.iter().any(|e| e.reason == lifecycle::SLICE_KEPT));
    assert!(st.kept_slice.is_some());
    let at = |minutes| now() + chrono::Duration::minutes(minutes);
    let p = run_at(&spec, &st, &vm(ready(), failed.clone()), at(10));
    assert_eq!(p.action, Action::Nothing, "kept for 30 minutes");
    assert_eq!(p.requeue, Requeue::After(Duration::from_secs(20 * 60)));
    let p = run_at(&spec, &st, &vm(ready(), failed.clone()), at(31));
    assert_eq!(p.action, Action::DeleteSlice, "released after 30 minutes");
    let p = run_at(&spec, &st, &vm(Child::Absent, failed), at(32));
    let released = p.status.kept_slice.and_then(|k| k.released_time);
    assert!(released.is_some(), "the kept slice is recorded as released");
}

mod budget_hold;
mod kueue;
