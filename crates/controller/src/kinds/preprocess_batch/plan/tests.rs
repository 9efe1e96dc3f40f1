//! Table tests of the apply and cleanup decisions over every Dataproc batch state and attempt
//! situation.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    common::DeletionPolicy,
    conditions::{Progress, reasons},
    preprocess_batch::{BatchTemplate, PreprocessBatchPhase as Phase, PreprocessBatchStatus},
};
use tpu_operator_gcp::dataproc_v1::model::batch::State;

use super::*;
use crate::kinds::preprocess_batch::{
    observe::{BatchLookup, Observed, ObservedBatch, OutputCheck},
    status::k8s_time,
};

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_772_442_000 + secs, 0).unwrap()
}

fn template(max_retries: i32, output: bool) -> BatchTemplate {
    BatchTemplate {
        max_retries,
        output_uri: output.then(|| "gs://b/out/".to_string()),
        ..Default::default()
    }
}

fn status(phase: Phase, attempts: i32) -> PreprocessBatchStatus {
    PreprocessBatchStatus {
        phase,
        attempts,
        ..Default::default()
    }
}

fn batch(state: State, ended: i64) -> ObservedBatch {
    ObservedBatch {
        name: "projects/p/locations/r/batches/ns-n-12345678-a1".into(),
        uuid: "u".into(),
        state,
        state_message: String::new(),
        state_time: Some(at(ended)),
        create_time: Some(at(0)),
        operation: "projects/p/regions/r/operations/op1".into(),
        driver_output_uri: None,
        endpoints: Default::default(),
        usage: Default::default(),
        history: vec![],
    }
}

fn seen(b: ObservedBatch, output: OutputCheck) -> Observed {
    Observed {
        batch: BatchLookup::Found(Box::new(b)),
        output,
        missing_inputs: vec![],
        remaining: None,
    }
}

fn nothing() -> Observed {
    Observed {
        batch: BatchLookup::NotRead,
        output: OutputCheck::NotChecked,
        missing_inputs: vec![],
        remaining: None,
    }
}

/// (phase, progress, reason) of a `Report`, or a short tag for the other decisions.
#[derive(Clone, Debug, PartialEq)]
enum Got {
    Report(Phase, Progress, &'static str),
    Submit(u32),
    Keep(Requeue),
}

fn got(d: &Plan) -> Got {
    match (&d.action, &d.verdict.kstatus) {
        (Action::Submit { attempt, .. }, _) => Got::Submit(*attempt),
        (Action::Nothing, Some(k)) => Got::Report(d.verdict.phase, k.progress, k.reason),
        (Action::Nothing, None) => Got::Keep(d.verdict.requeue),
        // The apply plan never cancels or deletes.
        (Action::Cancel { .. } | Action::Delete { .. }, _) => unreachable!("a deletion action: {d:?}"),
    }
}

/// What a plan that makes no call and sets the conditions reports, in one value.
#[derive(Clone, Debug, PartialEq)]
struct Report {
    phase: Phase,
    progress: Progress,
    reason: &'static str,
    message: String,
    requeue: Requeue,
    ended: Option<DateTime<Utc>>,
    output: Option<(bool, &'static str, String)>,
}

/// The report of `d`, when it is one (no call, conditions set).
fn report_of(d: Plan) -> Option<Report> {
    let k = d.verdict.kstatus.filter(|_| d.action == Action::Nothing)?;
    Some(Report {
        phase: d.verdict.phase,
        progress: k.progress,
        reason: k.reason,
        message: k.message,
        requeue: d.verdict.requeue,
        ended: d.details.ended,
        output: d.details.output,
    })
}

/// An apply case: (case, template, status, observed, now, expected).
type ApplyCase = (
    &'static str,
    BatchTemplate,
    PreprocessBatchStatus,
    Observed,
    i64,
    Got,
);

/// Plans every case at its `now` and checks the decision.
fn check_apply(cases: Vec<ApplyCase>) {
    for (case, template, status, observed, now, expected) in cases {
        assert_eq!(
            got(&plan(&template, &status, &observed, at(now))),
            expected,
            "case: {case}"
        );
    }
}

/// A report of an attempt still under way.
fn running(phase: Phase, reason: &'static str) -> Got {
    Got::Report(phase, Progress::Reconciling, reason)
}

/// The report of an attempt that ended and will be retried (once the delay is over).
fn retrying() -> Got {
    Got::Report(Phase::Retrying, Progress::Reconciling, reasons::RETRYING)
}

/// A new object submits its first attempt; a batch in flight is followed.
#[test]
fn apply_submits_then_follows_a_batch_in_flight() {
    use Got::*;
    use OutputCheck as O;
    check_apply(vec![
        (
            "new object submits attempt 1",
            template(0, true),
            status(Phase::Pending, 0),
            nothing(),
            0,
            Submit(1),
        ),
        (
            "PENDING",
            template(0, true),
            status(Phase::Submitted, 1),
            seen(batch(State::Pending, 0), O::NotChecked),
            10,
            running(Phase::Submitted, reasons::CREATING),
        ),
        (
            "RUNNING",
            template(0, true),
            status(Phase::Submitted, 1),
            seen(batch(State::Running, 60), O::NotChecked),
            70,
            running(Phase::Running, reasons::RUNNING),
        ),
        (
            "CANCELLING (outside the operator)",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Cancelling, 90), O::NotChecked),
            95,
            running(Phase::Cancelling, reasons::CANCELLING),
        ),
        (
            "UNSPECIFIED",
            template(0, true),
            status(Phase::Submitted, 1),
            seen(batch(State::Unspecified, 0), O::NotChecked),
            5,
            running(Phase::Submitted, reasons::CREATING),
        ),
    ]);
}

/// A SUCCEEDED batch succeeds only with its output (or none declared).
#[test]
fn apply_on_a_succeeded_batch_checks_the_output() {
    use Got::*;
    use OutputCheck as O;
    check_apply(vec![
        (
            "SUCCEEDED with output",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Succeeded, 180), O::Present),
            181,
            Report(Phase::Succeeded, Progress::Ready, reasons::SUCCEEDED),
        ),
        (
            "SUCCEEDED, no output declared",
            template(0, false),
            status(Phase::Running, 1),
            seen(batch(State::Succeeded, 180), O::NotDeclared),
            181,
            Report(Phase::Succeeded, Progress::Ready, reasons::SUCCEEDED),
        ),
        (
            "SUCCEEDED without output, no retries",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Succeeded, 180), O::Missing("none".into())),
            181,
            Report(Phase::Failed, Progress::Stalled, reasons::OUTPUT_MISSING),
        ),
        (
            "SUCCEEDED without output, retries left",
            template(1, true),
            status(Phase::Running, 1),
            seen(batch(State::Succeeded, 180), O::Missing("none".into())),
            181,
            retrying(),
        ),
        (
            "SUCCEEDED, output not yet checked",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Succeeded, 180), O::NotChecked),
            181,
            running(Phase::Running, reasons::RUNNING),
        ),
    ]);
}

/// A FAILED batch is retried when due, until the attempts run out.
#[test]
fn apply_on_a_failed_batch_retries_until_the_attempts_run_out() {
    use Got::*;
    use OutputCheck as O;
    check_apply(vec![
        (
            "FAILED, no retries",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Failed, 180), O::NotChecked),
            181,
            Report(Phase::Failed, Progress::Stalled, reasons::FAILED),
        ),
        (
            "FAILED, retry not yet due",
            template(2, true),
            status(Phase::Running, 1),
            seen(batch(State::Failed, 180), O::NotChecked),
            181,
            retrying(),
        ),
        (
            "FAILED long ago (status lost): retry at once",
            template(2, true),
            status(Phase::Running, 1),
            seen(batch(State::Failed, 180), O::NotChecked),
            180 + 30,
            Submit(2),
        ),
        (
            "FAILED on the last attempt",
            template(2, true),
            status(Phase::Running, 3),
            seen(batch(State::Failed, 180), O::NotChecked),
            181,
            Report(Phase::Failed, Progress::Stalled, reasons::RETRIES_EXHAUSTED),
        ),
    ]);
}

/// A CANCELLED batch, or one deleted behind the operator's back, is retried or reported.
#[test]
fn apply_on_a_cancelled_or_deleted_batch_retries_or_reports() {
    use Got::*;
    use OutputCheck as O;
    check_apply(vec![
        (
            "CANCELLED, no retries",
            template(0, true),
            status(Phase::Running, 1),
            seen(batch(State::Cancelled, 100), O::NotChecked),
            101,
            Report(Phase::Cancelled, Progress::Stalled, reasons::CANCELLED),
        ),
        (
            "CANCELLED, retries left",
            template(1, true),
            status(Phase::Running, 1),
            seen(batch(State::Cancelled, 100), O::NotChecked),
            101,
            retrying(),
        ),
        (
            "CANCELLED, retries exhausted",
            template(1, true),
            status(Phase::Running, 2),
            seen(batch(State::Cancelled, 100), O::NotChecked),
            101,
            Report(Phase::Cancelled, Progress::Stalled, reasons::RETRIES_EXHAUSTED),
        ),
        (
            "batch deleted behind our back, retries left",
            template(1, true),
            status(Phase::Running, 1),
            Observed {
                batch: BatchLookup::Missing,
                ..nothing()
            },
            50,
            retrying(),
        ),
        (
            "batch deleted behind our back, no retries",
            template(0, true),
            status(Phase::Running, 1),
            Observed {
                batch: BatchLookup::Missing,
                ..nothing()
            },
            50,
            Report(Phase::Failed, Progress::Stalled, reasons::NOT_FOUND),
        ),
    ]);
}

/// An object already finished (or refused before any attempt) is left as it is.
#[test]
fn apply_on_a_finished_object_does_nothing() {
    use Got::*;
    check_apply(vec![
        (
            "already succeeded: nothing to do",
            template(0, true),
            status(Phase::Succeeded, 1),
            nothing(),
            999,
            Keep(Requeue::Stable),
        ),
        (
            "already failed: nothing to do",
            template(3, true),
            status(Phase::Failed, 2),
            nothing(),
            999,
            Keep(Requeue::Stable),
        ),
        (
            "already cancelled: nothing to do",
            template(0, true),
            status(Phase::Cancelled, 1),
            nothing(),
            999,
            Keep(Requeue::Stable),
        ),
        (
            "spec refused before any attempt: stays failed",
            template(0, true),
            status(Phase::Failed, 0),
            nothing(),
            0,
            Keep(Requeue::Stable),
        ),
    ]);
}

#[test]
fn retrying_waits_out_the_delay_recorded_in_status_then_submits_the_next_attempt() {
    let t = template(3, true);
    let mut s = status(Phase::Retrying, 2);
    s.completion_time = Some(k8s_time(at(100)));
    // Second failure: 60 s delay from the recorded end, however often we look.
    assert_eq!(retry_delay(2), Duration::from_secs(60));
    assert_eq!(
        plan(&t, &s, &nothing(), at(130)),
        keep(Phase::Retrying, Requeue::After(Duration::from_secs(30)))
    );
    assert_eq!(got(&plan(&t, &s, &nothing(), at(160))), Got::Submit(3));
    // Without a recorded end time (a hand-edited status) the retry is not postponed forever.
    s.completion_time = None;
    assert_eq!(got(&plan(&t, &s, &nothing(), at(500))), Got::Submit(3));
}

#[test]
fn first_failure_reports_when_the_retry_is_due() {
    let mut b = batch(State::Failed, 180);
    b.state_message = "Job failed with exit code 1".into();
    let Some(r) = report_of(plan(
        &template(1, true),
        &status(Phase::Running, 1),
        &seen(b, OutputCheck::NotChecked),
        at(185),
    )) else {
        panic!("expected a report");
    };
    assert_eq!(r.ended, Some(at(180)));
    assert_eq!(r.requeue, Requeue::After(Duration::from_secs(25)));
    assert!(
        r.message
            .contains("attempt 1/2 failed (Failed): Job failed with exit code 1"),
        "{}",
        r.message
    );
    assert!(r.message.contains("2026-03-02T09:03:30"), "{}", r.message);
}

#[test]
fn exhausted_retries_keep_the_api_message_and_output_missing_is_reported() {
    let mut b = batch(State::Failed, 180);
    b.state_message = "Insufficient 'CPUS' quota".into();
    let Some(r) = report_of(plan(
        &template(1, true),
        &status(Phase::Running, 2),
        &seen(b, OutputCheck::NotChecked),
        at(181),
    )) else {
        panic!("expected a report");
    };
    assert_eq!(r.reason, reasons::RETRIES_EXHAUSTED);
    assert!(
        r.message
            .contains("attempt 2/2 failed (Failed): Insufficient 'CPUS' quota"),
        "{}",
        r.message
    );

    let Some(r) = report_of(plan(
        &template(0, true),
        &status(Phase::Running, 1),
        &seen(
            batch(State::Succeeded, 180),
            OutputCheck::Missing("no objects under gs://b/out/".into()),
        ),
        at(181),
    )) else {
        panic!("expected a report");
    };
    assert_eq!(
        r.output,
        Some((
            false,
            reasons::OUTPUT_MISSING,
            "batch SUCCEEDED but wrote no output: no objects under gs://b/out/".to_string()
        ))
    );
    assert_eq!((r.phase, r.reason), (Phase::Failed, reasons::OUTPUT_MISSING));
    assert!(
        r.message.contains("no objects under gs://b/out/"),
        "{}",
        r.message
    );
    assert_eq!(r.ended, Some(at(180)));
}

#[test]
fn missing_inputs_stall_before_submitting() {
    let observed = Observed {
        missing_inputs: vec!["gs://b/raw/".into()],
        ..nothing()
    };
    let d = plan(&template(0, true), &status(Phase::Pending, 0), &observed, at(0));
    assert_eq!(
        got(&d),
        Got::Report(Phase::Pending, Progress::Stalled, reasons::NOT_FOUND)
    );
    let Some(r) = report_of(d) else { unreachable!() };
    assert!(r.message.contains("gs://b/raw/"));
}

#[test]
fn retry_delay_doubles_and_caps() {
    let secs: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
    assert_eq!(secs, vec![30, 60, 120, 240, 480, 600, 600]);
}

#[test]
fn cleanup_cancels_then_waits_then_deletes_every_attempt() {
    let named = |state, n: u32| ObservedBatch {
        name: format!("projects/p/locations/r/batches/b-a{n}"),
        operation: format!("projects/p/regions/r/operations/op{n}"),
        ..batch(state, 0)
    };
    use CleanupStep::*;
    let del = |n: u32| Delete {
        batch: format!("projects/p/locations/r/batches/b-a{n}"),
    };
    let cases: Vec<(&str, DeletionPolicy, Vec<ObservedBatch>, CleanupStep)> = vec![
        ("nothing was created", DeletionPolicy::Delete, vec![], Done),
        (
            "orphan leaves even a running batch",
            DeletionPolicy::Orphan,
            vec![named(State::Running, 1)],
            Orphan,
        ),
        (
            "running batch is cancelled first",
            DeletionPolicy::Delete,
            vec![named(State::Failed, 1), named(State::Running, 2)],
            Cancel {
                batch: "projects/p/locations/r/batches/b-a2".into(),
                operation: "projects/p/regions/r/operations/op2".into(),
            },
        ),
        (
            "pending batch is cancelled too",
            DeletionPolicy::Delete,
            vec![named(State::Pending, 1)],
            Cancel {
                batch: "projects/p/locations/r/batches/b-a1".into(),
                operation: "projects/p/regions/r/operations/op1".into(),
            },
        ),
        (
            "terminal batches are deleted while another is cancelling",
            DeletionPolicy::Delete,
            vec![named(State::Cancelling, 2), named(State::Failed, 1)],
            del(1),
        ),
        (
            "cancelling only: wait",
            DeletionPolicy::Delete,
            vec![named(State::Cancelling, 1)],
            Wait {
                message: "waiting for batches to stop: projects/p/locations/r/batches/b-a1 is CANCELLING"
                    .into(),
            },
        ),
        (
            "succeeded batch deleted",
            DeletionPolicy::Delete,
            vec![named(State::Succeeded, 1)],
            del(1),
        ),
        (
            "cancelled batch deleted",
            DeletionPolicy::Delete,
            vec![named(State::Cancelled, 1)],
            del(1),
        ),
        (
            "unknown state: wait",
            DeletionPolicy::Delete,
            vec![named(State::Unspecified, 1)],
            Wait {
                message:
                    "waiting for batches to stop: projects/p/locations/r/batches/b-a1 is STATE_UNSPECIFIED"
                        .into(),
            },
        ),
    ];
    for (case, policy, batches, expected) in cases {
        assert_eq!(plan_cleanup(policy, &batches), expected, "case: {case}");
    }
}

/// The deletion plan: one call (or a wait) per pass, its phase and message, and whether the
/// finalizer goes once the call succeeded.
#[test]
fn deletion_plan_calls_reports_and_releases() {
    use crate::kinds::preprocess_batch::observe::Remaining;
    let name = |n: u32| format!("projects/p/locations/r/batches/b-a{n}");
    let named = |state, n: u32| ObservedBatch {
        name: name(n),
        operation: format!("projects/p/regions/r/operations/op{n}"),
        ..batch(state, 0)
    };
    let delete = |n: u32| Action::Delete { batch: name(n) };
    let cancel = Action::Cancel {
        operation: "projects/p/regions/r/operations/op2".into(),
    };
    let verdict = |phase, reason, message: String| Some((phase, reason, message));
    let deleted = |n: u32| {
        verdict(
            Phase::Deleting,
            reasons::DELETING,
            format!("deleted batch {}", name(n)),
        )
    };
    let listed = Remaining::Listed;
    let cases = vec![
        (
            "the only batch, by name",
            Remaining::Only(name(1)),
            delete(1),
            deleted(1),
            true,
        ),
        ("nothing listed", listed(vec![]), Action::Nothing, None, true),
        (
            "the last listed batch",
            listed(vec![named(State::Succeeded, 1)]),
            delete(1),
            deleted(1),
            true,
        ),
        (
            "one of two listed",
            listed(vec![named(State::Failed, 1), named(State::Cancelling, 2)]),
            delete(1),
            deleted(1),
            false,
        ),
        (
            "a running batch",
            listed(vec![named(State::Failed, 1), named(State::Running, 2)]),
            cancel,
            verdict(
                Phase::Cancelling,
                reasons::CANCELLING,
                format!("cancelling batch {}", name(2)),
            ),
            false,
        ),
        (
            "a cancelling batch",
            listed(vec![named(State::Cancelling, 1)]),
            Action::Nothing,
            verdict(
                Phase::Cancelling,
                reasons::CANCELLING,
                format!("waiting for batches to stop: {} is CANCELLING", name(1)),
            ),
            false,
        ),
    ];
    for (case, remaining, action, expected, releases) in cases {
        let plan = plan_deletion(&remaining);
        assert_eq!(plan.action, action, "case: {case}");
        assert_eq!(plan.details.releases, releases, "case: {case}");
        if let Some((phase, reason, message)) = expected {
            let kstatus = plan.verdict.kstatus.as_ref().expect("conditions");
            assert_eq!(plan.verdict.phase, phase, "case: {case}");
            assert_eq!(kstatus.progress, Progress::Reconciling, "case: {case}");
            assert_eq!(
                (kstatus.reason, kstatus.message.as_str()),
                (reason, message.as_str()),
                "case: {case}"
            );
            assert_eq!(plan.verdict.requeue, Requeue::Active, "case: {case}");
        }
    }
}
