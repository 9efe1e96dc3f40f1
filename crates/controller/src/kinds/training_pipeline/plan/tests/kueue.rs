//! The training stage's Kueue gate: no Vertex job before admission, an eviction stops it before
//! the quota is released, the attempt after re-admission spends no retry, and the Workload goes
//! once the run is over. A TPU VM stage is gated at its slice: its waits spend nothing either.

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
        estimated_start: None,
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

/// One pass of a gated pipeline whose Workload is as `gate` says, its status fed back.
fn gated_step(
    spec: &TrainingPipelineSpec,
    status: &mut TrainingPipelineStatus,
    observed: &Observed,
    gate: Gate,
) -> Planned {
    queued_step(spec, status, observed, &gated(gate))
}

/// One pass with the Workload read as `queued`, its status fed back.
fn queued_step(
    spec: &TrainingPipelineSpec,
    status: &mut TrainingPipelineStatus,
    observed: &Observed,
    queued: &Queued,
) -> Planned {
    let p = planned(&Input {
        queue: Some(queued),
        ..input(spec, status, observed, now())
    });
    *status = p.status.clone();
    p
}

fn reason(p: &Planned) -> String {
    tpu_operator_api::conditions::describing(&p.status.conditions)
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

/// Evicted while running: cancel the job, wait until it has ended, release the quota, wait, and
/// on re-admission resume with an attempt that spends no retry (`maxRetries: 0`, so a counted one
/// would fail the pipeline).
#[test]
fn an_eviction_stops_the_run_then_releases_the_quota_and_resuming_spends_no_retry() {
    let spec = vertex_only();
    let running = vertex(Child::Absent, Some(job(1, JobState::Running)));
    let stopped = vertex(Child::Absent, Some(job(1, JobState::Cancelled)));
    let mut st = TrainingPipelineStatus::default();
    gated_step(&spec, &mut st, &vertex(Child::Absent, None), admitted());
    gated_step(&spec, &mut st, &running, admitted());
    assert_eq!(train(&st).attempts, 1);

    let p = gated_step(&spec, &mut st, &running, evicted());
    let cancel = Action::CancelJob {
        name: job(1, JobState::Running).name,
    };
    assert_eq!((&p.action, p.status.phase), (&cancel, Phase::Waiting));
    assert_eq!(reason(&p), reasons::EVICTED);
    let message = p.status.message.clone().unwrap();
    assert!(
        message.starts_with("evicted by Kueue (Preempted)") && message.contains("checkpoints are kept"),
        "{message}"
    );
    let k = kueue(&st);
    assert_eq!((k.evictions, k.stopped, k.stopped_attempt), (1, true, Some(1)));

    // A cancelling job still bills: the quota is kept.
    let cancelling = vertex(Child::Absent, Some(job(1, JobState::Cancelling)));
    let p = gated_step(&spec, &mut st, &cancelling, evicted());
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(kueue(&st).evictions, 1, "counted once");
    let p = gated_step(&spec, &mut st, &stopped, evicted());
    assert_eq!(p.action, Action::Workload(Write::Release));
    let p = gated_step(&spec, &mut st, &stopped, pending());
    assert_eq!((&p.action, p.status.phase), (&Action::Nothing, Phase::Waiting));
    assert_eq!(st.attempts, 1, "nothing started while queued again");

    let p = gated_step(&spec, &mut st, &stopped, admitted());
    assert_eq!(p.action, Action::CreateJob { attempt: 2 });
    assert_eq!(train(&st).attempts, 1, "the resumption spent no retry");
    let k = kueue(&st);
    assert_eq!((k.resumes, k.stopped_attempt, k.stopped), (1, None, false));
    let message = train(&st).message.clone().unwrap_or_default();
    assert!(message.contains("a Kueue eviction"), "{message}");
}

/// TPU VM: the pipeline writes no Workload (its slice has its own); the slice queued, evicted or
/// waiting for its priority class is a wait of the pipeline, never a spent retry.
#[test]
fn a_tpu_vm_stage_waits_on_its_slices_queue_without_spending_retries() {
    let mut spec = tpu_vm();
    spec.preprocess = None;
    spec.max_retries = 0;
    let mut st = TrainingPipelineStatus::default();
    let p = step(&spec, &mut st, &vm(Child::Absent, Marker::None));
    assert_eq!(p.action, Action::CreateSlice { attempt: 1 });
    let queued = Child::Progressing {
        reason: reasons::QUEUED_IN_KUEUE.into(),
        message: "waiting in Kueue LocalQueue tpu (position 1): insufficient unused quota".into(),
    };
    let p = step(&spec, &mut st, &vm(queued, Marker::None));
    assert_eq!((&p.action, p.status.phase), (&Action::Nothing, Phase::Waiting));
    assert_eq!(reason(&p), reasons::QUEUED_IN_KUEUE);
    let no_class = Child::Stalled {
        reason: reasons::PRIORITY_CLASS_NOT_FOUND.into(),
        message: "WorkloadPriorityClass x does not exist".into(),
    };
    let p = step(&spec, &mut st, &vm(no_class, Marker::None));
    assert_eq!((&p.action, p.status.phase), (&Action::Nothing, Phase::Waiting));
    assert_eq!(reason(&p), reasons::PRIORITY_CLASS_NOT_FOUND);
    let evicted = Child::Progressing {
        reason: reasons::EVICTED.into(),
        message: "evicted by Kueue (Preempted): ...; deleting the node so that nothing bills".into(),
    };
    let p = step(&spec, &mut st, &vm(evicted, Marker::None));
    assert_eq!(p.action, Action::Nothing);
    step(&spec, &mut st, &vm(ready(), Marker::None));
    assert_eq!(
        (st.attempts, train(&st).attempts),
        (1, 1),
        "one attempt, no retry spent"
    );
    assert_eq!(st.kueue, None, "the slice's status has the Kueue view");
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
    let p = queued_step(&spec, &mut st, &vertex(Child::Absent, None), &queued);
    assert_eq!(p.action, Action::Nothing);
    assert_eq!(progress_of(&p.status.conditions), Some(Progress::Stalled));
    assert_eq!(reason(&p), reasons::PRIORITY_CLASS_NOT_FOUND);
    assert_eq!(st.attempts, 0);
}

/// Finished, suspended: the Workload is deleted once the job has ended, so the team's quota is
/// free at once; resuming queues again.
#[test]
fn the_workload_goes_once_the_run_is_over_and_nothing_bills() {
    let spec = vertex_only();
    let mut st = TrainingPipelineStatus::default();
    gated_step(&spec, &mut st, &vertex(Child::Absent, None), admitted());
    let succeeded = vertex(
        Child::Absent,
        Some(JobView {
            model_exists: Some(true),
            ..job(1, JobState::Succeeded)
        }),
    );
    let p = gated_step(&spec, &mut st, &succeeded, admitted());
    assert_eq!(
        (&p.action, p.status.phase),
        (&Action::Workload(Write::Delete), Phase::Succeeded)
    );
    // Gone: nothing more to do.
    let p = gated_step(&spec, &mut st, &vertex(Child::Absent, None), Gate::Missing);
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
    let cancelling = vertex(Child::Absent, Some(job(1, JobState::Cancelling)));
    let p = gated_step(&spec, &mut st, &cancelling, admitted());
    assert_eq!(
        (&p.action, p.requeue),
        (&Action::Nothing, Requeue::Active),
        "a cancelling job is followed (watched), not left to the stable poll: its end frees the quota"
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
