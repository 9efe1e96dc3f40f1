//! A budget's `SuspendAtCheckpoint`: the running attempt trains on until a checkpoint written
//! after the pipeline saw the action, is then stopped, nothing new starts while the period
//! lasts, and the attempt after the period's end spends no retry.

use tpu_operator_api::training_pipeline::CheckpointStatus;

use super::*;
use crate::governance::tenancy::rules::Suspending;

fn at(minutes: i64) -> DateTime<Utc> {
    now() + chrono::Duration::minutes(minutes)
}

/// In force until two hours after [`now`].
fn hold() -> Suspending {
    Suspending {
        budget: "TpuPolicy team-a: namespace ml has spent $101.00 of its $100.00 Day budget".into(),
        until: time(at(120)),
    }
}

fn held_pass(
    spec: &TrainingPipelineSpec,
    st: &mut TrainingPipelineStatus,
    observed: &Observed,
    when: DateTime<Utc>,
    budget: Option<&Suspending>,
) -> Planned {
    let p = planned(&Input {
        budget,
        ..input(spec, st, observed, when)
    });
    *st = p.status.clone();
    p
}

fn checkpoint_at(st: &mut TrainingPipelineStatus, step: i64, written: DateTime<Utc>) {
    st.checkpoint = Some(CheckpointStatus {
        latest_uri: Some(format!("gs://b/m/checkpoints/{step}/")),
        latest_time: Some(time(written)),
        latest_step: Some(step),
        ..Default::default()
    });
}

fn reason(p: &Planned) -> String {
    tpu_operator_api::conditions::describing(&p.status.conditions)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// A TPU VM pipeline training on attempt 1, its status fed back.
fn training_tpu_vm() -> (TrainingPipelineSpec, TrainingPipelineStatus) {
    let spec = tpu_vm();
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vm(Child::Absent, Marker::None));
    step(&spec, &mut st, &vm(ready(), Marker::None));
    assert_eq!(st.phase, Phase::Training);
    (spec, st)
}

#[test]
fn a_tpu_vm_run_stops_only_after_a_newer_checkpoint_and_resumes_without_a_retry() {
    let (spec, mut st) = training_tpu_vm();
    let hold = hold();
    // A checkpoint from before the action does not count.
    checkpoint_at(&mut st, 100, at(-5));
    let p = held_pass(&spec, &mut st, &vm(ready(), Marker::None), at(1), Some(&hold));
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Training)
    );
    let record = st.budget_suspension.clone().unwrap();
    assert_eq!(record.noticed_time, time(at(1)));
    assert!(
        p.status
            .message
            .unwrap()
            .contains("after its next committed checkpoint")
    );

    checkpoint_at(&mut st, 200, at(3));
    let p = held_pass(&spec, &mut st, &vm(ready(), Marker::None), at(4), Some(&hold));
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::DeleteSlice, Phase::Suspended)
    );
    assert_eq!(reason(&p), reasons::BUDGET_SUSPENDED);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reasons::BUDGET_SUSPENDED && e.warning)
    );
    let record = st.budget_suspension.clone().unwrap();
    assert_eq!(record.checkpoint.as_deref(), Some("gs://b/m/checkpoints/200/"));
    assert_eq!(record.stopped_attempt, Some(1));

    // Deleting, then gone: nothing new while the period lasts, and the pass looks again at its end.
    let p = held_pass(
        &spec,
        &mut st,
        &vm(Child::Deleting, Marker::None),
        at(5),
        Some(&hold),
    );
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Suspended)
    );
    let p = held_pass(
        &spec,
        &mut st,
        &vm(Child::Absent, Marker::None),
        at(6),
        Some(&hold),
    );
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Suspended)
    );
    assert_eq!(
        p.requeue,
        Requeue::After(std::time::Duration::from_secs(114 * 60))
    );
    assert_eq!(st.attempts, 1, "a held attempt records nothing");

    // The period ended (the policy's record may still show the action: its end decides).
    let p = held_pass(
        &spec,
        &mut st,
        &vm(Child::Absent, Marker::None),
        at(121),
        Some(&hold),
    );
    assert_eq!(p.action, Action::CreateSlice { attempt: 2 });
    assert_eq!(train(&st).attempts, 1, "the resumption spends no retry");
    let record = st.budget_suspension.clone().unwrap();
    assert_eq!(record.resumed_time, Some(time(at(121))));
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == super::super::suspend::RESUMED)
    );
}

#[test]
fn a_vertex_job_is_cancelled_after_the_checkpoint_and_its_next_attempt_waits_for_the_period() {
    let spec = quickstart();
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    step(&spec, &mut st, &vertex(ready(), None));
    let job_running = vertex(ready(), Some(job(1, JobState::Running)));
    step(&spec, &mut st, &job_running);
    let hold = hold();
    held_pass(&spec, &mut st, &job_running, at(1), Some(&hold));
    checkpoint_at(&mut st, 10, at(2));
    let p = held_pass(&spec, &mut st, &job_running, at(3), Some(&hold));
    assert!(matches!(p.action, Action::CancelJob { .. }), "{:?}", p.action);

    let cancelled = vertex(ready(), Some(job(1, JobState::Cancelled)));
    let p = held_pass(&spec, &mut st, &cancelled, at(4), Some(&hold));
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Suspended)
    );
    let p = held_pass(&spec, &mut st, &cancelled, at(130), None);
    assert_eq!(p.action, Action::CreateJob { attempt: 2 });
    assert_eq!(train(&st).attempts, 1);
}

#[test]
fn a_period_without_a_checkpoint_leaves_the_run_training_and_no_record() {
    let (spec, mut st) = training_tpu_vm();
    let hold = hold();
    let p = held_pass(&spec, &mut st, &vm(ready(), Marker::None), at(1), Some(&hold));
    assert_eq!(p.action, Action::Nothing);
    assert!(st.budget_suspension.is_some());
    let p = held_pass(&spec, &mut st, &vm(ready(), Marker::None), at(121), None);
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Training)
    );
    assert_eq!(st.budget_suspension, None);
}

#[test]
fn nothing_new_starts_while_the_action_is_in_force() {
    let spec = tpu_vm();
    let mut st = TrainingPipelineStatus::default();
    let hold = hold();
    let p = held_pass(
        &spec,
        &mut st,
        &vm(Child::Absent, Marker::None),
        at(0),
        Some(&hold),
    );
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Suspended)
    );
    assert_eq!(st.attempts, 0);
    let mut with_batch = quickstart();
    with_batch.suspend = false;
    let mut st = TrainingPipelineStatus::default();
    let p = held_pass(
        &with_batch,
        &mut st,
        &vertex(Child::Absent, None),
        at(0),
        Some(&hold),
    );
    assert_eq!(
        (p.action.clone(), p.status.phase),
        (Action::Nothing, Phase::Suspended)
    );
}
