//! The training stage's Kueue gate: no job or slice before admission, an eviction stops what
//! bills before the quota is released, the attempt after re-admission spends no retry, and the
//! Workload goes once the run is over.

use tpu_operator_api::kueue::KueueStatus;

use super::*;
use crate::kueue::{
    Gate,
    queued::{Queued, Write},
    workload::{Workload, WorkloadSpec},
};

fn gated(gate: Gate) -> Queued {
    let exists = !matches!(gate, Gate::Missing);
    Queued {
        workload: "trainingpipeline-p-uid-1".into(),
        local_queue: "tpu".into(),
        gate,
        found: exists.then(|| Workload::new("trainingpipeline-p-uid-1", WorkloadSpec::default())),
        desired: None,
        position: Some(2),
        priority: Ok(None),
    }
}

fn pending() -> Gate {
    Gate::Pending {
        message: "couldn't assign flavors to pod set hosts: insufficient unused quota for google.com/tpu"
            .into(),
    }
}

fn admitted() -> Gate {
    Gate::Admitted {
        cluster_queue: "team-a".into(),
    }
}

fn evicted() -> Gate {
    Gate::Evicted {
        reason: "Preempted".into(),
        message: "Preempted to accommodate a workload due to prioritization".into(),
    }
}

/// One pass of a gated pipeline, its status fed back.
fn gated_step(
    spec: &TrainingPipelineSpec,
    status: &mut TrainingPipelineStatus,
    observed: &Observed,
    gate: Gate,
) -> Plan {
    let queued = gated(gate);
    let p = plan(&Input {
        spec,
        status,
        generation: Some(1),
        observed,
        now: now(),
        preprocess_child: "p-preprocess",
        train_child: "p-train",
        rerun: None,
        queue: Some(&queued),
    });
    *status = p.status.clone();
    p
}

fn reason(p: &Plan) -> String {
    conditions_reason(&p.status)
}

fn conditions_reason(st: &TrainingPipelineStatus) -> String {
    tpu_operator_api::conditions::describing(&st.conditions)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn kueue(st: &TrainingPipelineStatus) -> KueueStatus {
    st.kueue.clone().unwrap_or_default()
}

fn vertex_only() -> TrainingPipelineSpec {
    let mut spec = quickstart();
    spec.preprocess = None;
    spec.max_retries = 0;
    spec
}

#[test]
fn nothing_is_created_before_admission_and_the_wait_writes_one_status() {
    let spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    let absent = vertex(Child::Absent, None);
    let p = gated_step(&spec, &mut st, &absent, Gate::Missing);
    assert_eq!(p.action, Action::Workload(Write::Create));
    assert_eq!(
        (p.status.phase, reason(&p).as_str()),
        (Phase::Waiting, reasons::QUEUED_IN_KUEUE)
    );
    assert_eq!(
        (st.attempts, train(&st).attempts),
        (0, 0),
        "a held attempt records nothing"
    );
    let p = gated_step(&spec, &mut st, &absent, pending());
    assert_eq!((&p.action, p.requeue), (&Action::Nothing, Requeue::Capacity));
    let message = p.status.message.clone().unwrap();
    assert!(
        message.contains("waiting in Kueue LocalQueue tpu (position 2): couldn't assign flavors"),
        "{message}"
    );
    let again = gated_step(&spec, &mut st, &absent, pending());
    assert_eq!(again.status, p.status, "an unchanged wait changes nothing");
    assert!(again.events.is_empty(), "{:?}", again.events);

    let p = gated_step(&spec, &mut st, &absent, admitted());
    assert_eq!(p.action, Action::CreateJob { attempt: 1 });
    assert!(p.events.iter().any(|e| e.reason == "Admitted"), "{:?}", p.events);
    let k = kueue(&st);
    assert!(
        k.admitted && k.cluster_queue.as_deref() == Some("team-a"),
        "{k:?}"
    );
}

#[test]
fn preprocessing_holds_no_quota() {
    let spec = quickstart();
    let mut st = TrainingPipelineStatus::default();
    let p = gated_step(&spec, &mut st, &vertex(Child::Absent, None), Gate::Missing);
    assert_eq!(p.action, Action::CreatePreprocess);
    let p = gated_step(&spec, &mut st, &vertex(running(), None), Gate::Missing);
    assert_eq!(p.action, Action::Nothing);
    let p = gated_step(&spec, &mut st, &vertex(ready(), None), Gate::Missing);
    assert_eq!(
        p.action,
        Action::Workload(Write::Create),
        "written when training is next"
    );
}

/// Evicted while running, for both backends: stop what bills, wait until it no longer does,
/// release the quota, wait, and on re-admission resume with an attempt that spends no retry
/// (`maxRetries: 0`, so a counted one would fail the pipeline).
#[test]
fn an_eviction_stops_the_run_then_releases_the_quota_and_resuming_spends_no_retry() {
    let mut vm_spec = tpu_vm();
    vm_spec.preprocess = None;
    vm_spec.max_retries = 0;
    let cancel = Action::CancelJob {
        name: job(1, JobState::Running).name,
    };
    // (spec, running, stop, stopping, stopped, resumed)
    let cases = vec![
        (
            vertex_only(),
            vertex(Child::Absent, Some(job(1, JobState::Running))),
            cancel,
            vertex(Child::Absent, Some(job(1, JobState::Cancelling))),
            vertex(Child::Absent, Some(job(1, JobState::Cancelled))),
            Action::CreateJob { attempt: 2 },
        ),
        (
            vm_spec,
            vm(ready(), Marker::None),
            Action::DeleteSlice,
            vm(Child::Deleting, Marker::None),
            vm(Child::Absent, Marker::None),
            Action::CreateSlice { attempt: 2 },
        ),
    ];
    for (i, (spec, running, stop, stopping, stopped, resumed)) in cases.into_iter().enumerate() {
        let mut st = TrainingPipelineStatus::default();
        let first = match running.training {
            TrainingObserved::Vertex { .. } => vertex(Child::Absent, None),
            TrainingObserved::TpuVm { .. } => vm(Child::Absent, Marker::None),
        };
        gated_step(&spec, &mut st, &first, admitted());
        gated_step(&spec, &mut st, &running, admitted());
        assert_eq!(train(&st).attempts, 1, "case {i}");

        let p = gated_step(&spec, &mut st, &running, evicted());
        assert_eq!((&p.action, p.status.phase), (&stop, Phase::Waiting), "case {i}");
        assert_eq!(reason(&p), reasons::EVICTED, "case {i}");
        let message = p.status.message.clone().unwrap();
        assert!(
            message.starts_with("evicted by Kueue (Preempted)") && message.contains("checkpoints are kept"),
            "case {i}: {message}"
        );
        let k = kueue(&st);
        assert_eq!(
            (k.evictions, k.stopped, k.stopped_attempt),
            (1, true, Some(1)),
            "case {i}"
        );

        // Still billing (a cancelling job, a deleting slice): the quota is kept.
        let p = gated_step(&spec, &mut st, &stopping, evicted());
        assert_eq!(p.action, Action::Nothing, "case {i}");
        assert_eq!(kueue(&st).evictions, 1, "case {i}: counted once");
        let p = gated_step(&spec, &mut st, &stopped, evicted());
        assert_eq!(p.action, Action::Workload(Write::Release), "case {i}");
        let p = gated_step(&spec, &mut st, &stopped, pending());
        assert_eq!(
            (&p.action, p.status.phase),
            (&Action::Nothing, Phase::Waiting),
            "case {i}"
        );
        assert_eq!(st.attempts, 1, "case {i}: nothing started while queued again");

        let p = gated_step(&spec, &mut st, &stopped, admitted());
        assert_eq!(p.action, resumed, "case {i}");
        assert_eq!(train(&st).attempts, 1, "case {i}: the resumption spent no retry");
        let k = kueue(&st);
        assert_eq!(
            (k.resumes, k.stopped_attempt, k.stopped),
            (1, None, false),
            "case {i}"
        );
        let message = train(&st).message.clone().unwrap_or_default();
        assert!(message.contains("a Kueue eviction"), "case {i}: {message}");
    }
}

#[test]
fn a_queue_label_added_to_a_running_pipeline_stops_it_until_admitted() {
    let spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    step(&spec, &mut st, &vertex(Child::Absent, None));
    let running = vertex(Child::Absent, Some(job(1, JobState::Running)));
    step(&spec, &mut st, &running);
    let p = gated_step(&spec, &mut st, &running, Gate::Missing);
    assert!(matches!(p.action, Action::CancelJob { .. }), "{:?}", p.action);
    let cancelled = vertex(Child::Absent, Some(job(1, JobState::Cancelled)));
    let p = gated_step(&spec, &mut st, &cancelled, Gate::Missing);
    assert_eq!(p.action, Action::Workload(Write::Create));
}

#[test]
fn a_foreign_workload_is_not_trusted_even_when_admitted_for_something_else() {
    let spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    let absent = vertex(Child::Absent, None);
    let foreign = || Gate::Foreign {
        why: "Workload w is not this TrainingPipeline's: its pod sets are not what the object holds".into(),
    };
    let p = gated_step(&spec, &mut st, &absent, foreign());
    assert_eq!(p.action, Action::Workload(Write::Delete));
    assert_eq!(st.attempts, 0);
}

#[test]
fn a_missing_priority_class_stalls_without_a_workload() {
    let spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    let mut queued = gated(Gate::Missing);
    queued.priority = Err("WorkloadPriorityClass urgent (label kueue.x-k8s.io/priority-class) does not exist: create it or fix the label".into());
    let p = plan(&Input {
        spec: &spec,
        status: &st,
        generation: Some(1),
        observed: &vertex(Child::Absent, None),
        now: now(),
        preprocess_child: "p-preprocess",
        train_child: "p-train",
        rerun: None,
        queue: Some(&queued),
    });
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(progress_of(&p.status.conditions), Some(Progress::Stalled));
    assert_eq!(reason(&p), reasons::PRIORITY_CLASS_NOT_FOUND);
    st = p.status;
    assert_eq!(st.attempts, 0);
}

/// Finished, suspended: the Workload is deleted once nothing bills (a TPU VM run's slice is
/// released first), so the team's quota is free at once.
#[test]
fn the_workload_goes_once_the_run_is_over_and_nothing_bills() {
    let mut spec = tpu_vm();
    spec.preprocess = None;
    let mut st = TrainingPipelineStatus::default();
    gated_step(&spec, &mut st, &vm(Child::Absent, Marker::None), admitted());
    gated_step(&spec, &mut st, &vm(ready(), Marker::None), admitted());
    let p = gated_step(&spec, &mut st, &vm(ready(), Marker::Succeeded), admitted());
    assert_eq!(
        (&p.action, p.status.phase),
        (&Action::DeleteSlice, Phase::Succeeded)
    );
    let p = gated_step(&spec, &mut st, &vm(Child::Deleting, Marker::None), admitted());
    assert_eq!(p.action, Action::Nothing, "the slice's node still bills");
    let p = gated_step(&spec, &mut st, &vm(Child::Absent, Marker::None), admitted());
    assert_eq!(p.action, Action::Workload(Write::Delete));
    // Gone: nothing more to do.
    let p = gated_step(&spec, &mut st, &vm(Child::Absent, Marker::None), Gate::Missing);
    assert_eq!((&p.action, p.status.phase), (&Action::Nothing, Phase::Succeeded));

    let mut spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    gated_step(&spec, &mut st, &vertex(Child::Absent, None), admitted());
    let cancelled = vertex(Child::Absent, Some(job(1, JobState::Cancelled)));
    spec.suspend = true;
    let p = gated_step(
        &spec,
        &mut st,
        &vertex(Child::Absent, Some(job(1, JobState::Running))),
        admitted(),
    );
    assert!(
        matches!(p.action, Action::CancelJob { .. }),
        "suspend stops first"
    );
    let p = gated_step(&spec, &mut st, &cancelled, admitted());
    assert_eq!(
        (&p.action, p.status.phase),
        (&Action::Workload(Write::Delete), Phase::Suspended)
    );
    // Resuming queues again: the Workload is written anew.
    spec.suspend = false;
    let p = gated_step(&spec, &mut st, &cancelled, Gate::Missing);
    assert_eq!(p.action, Action::Workload(Write::Create));
    assert_eq!(train(&st).attempts, 1);
}
