//! Deleting a pipeline, through the apply pass's hooks (see `crate::reconcile::deletion`). Its
//! Vertex jobs (found by the UID label, every attempt and any duplicate, plus the one its status
//! records) are cancelled, one call per reconcile, and waited for until terminal; once all are
//! terminal they are deleted in one pass and the finalizer is dropped. Owned `PreprocessBatch` /
//! `TpuSlice` children are deleted by ownerReference garbage collection once the pipeline is
//! gone, and their own finalizers cancel and delete their cloud resources (`deletionPolicy:
//! Orphan` was copied to them at creation).
//!
//! Each hook's deletion part lives here: [`observe`] (the job list and the settle time), [`plan`]
//! (pure: the call, the `Deleting` verdict, and whether the pass releases), [`act`] (the calls
//! and their Events), [`report`] and [`wait`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase, TrainingPipelineStatus},
};
use tpu_operator_gcp::{ErrorKind, aiplatform_v1::model::JobState};

use super::{
    Target,
    done::Done,
    observe::{job_view, list_jobs, read_job},
    plan::{self, Action, Details, JobView, Plan, Requeue},
    status::{self, time},
};
use crate::{
    reconcile::{handles::Io, kind::Acted, plan::Verdict, report::Transition},
    runtime::{
        config::ControllerConfig,
        error::{ReconcileError, Result},
    },
};

/// What a deletion pass reads: every job of the pipeline, and until when a list may still lag
/// behind an unconfirmed create ([`settled_after`]).
#[derive(Debug)]
pub struct Listed {
    pub jobs: Vec<JobView>,
    pub settle: Option<DateTime<Utc>>,
}

/// The deletion pass's reads (policy `Delete`).
pub async fn observe(io: &Io<'_>, tp: &TrainingPipeline, names: &Target) -> Result<Listed> {
    Ok(Listed {
        jobs: every_job(io, tp, names).await?,
        settle: settled_after(tp),
    })
}

/// What to do with one job while deleting.
#[derive(Debug, PartialEq, Eq)]
enum JobStep {
    Cancel,
    Wait,
    Delete,
}

fn job_step(state: &JobState) -> JobStep {
    match state {
        JobState::Cancelling => JobStep::Wait,
        s if plan::cancel_stops_billing(s) => JobStep::Cancel,
        _ => JobStep::Delete,
    }
}

/// The deletion plan (pure): [`Action::Release`] when the pass lets the finalizer go, else one
/// call (cancel everything running first, then delete the terminal ones) with phase `Deleting`.
pub fn plan(listed: &Listed, old: &TrainingPipelineStatus, now: DateTime<Utc>) -> Plan {
    let Listed { jobs, settle } = listed;
    if !jobs.is_empty() && settle.is_none() && jobs.iter().all(|j| job_step(&j.state) == JobStep::Delete) {
        // Every job has finished (bills nothing) and no create is unconfirmed (a job a list may
        // not show yet): delete them all now and let the finalizer go, without a status write
        // that would only wake another pass, nor a list to watch them disappear
        // (deletion at the minimum of calls). A delete Vertex accepts and then fails leaves a
        // finished job, which the orphan sweeper reports (its owner is gone).
        let delete = jobs.iter().map(|j| j.name.clone()).collect();
        return releasing(delete, old, now);
    }
    let message = match (jobs.first(), settle) {
        (Some(_), _) => format!("deleting {} Vertex custom job(s) of this pipeline", jobs.len()),
        (None, Some(t)) if now < *t => format!(
            "no Vertex custom job listed; listing again until {} in case a new one is not listed yet",
            t.to_rfc3339()
        ),
        (None, _) => return releasing(Vec::new(), old, now),
    };
    let next = jobs
        .iter()
        .find(|j| job_step(&j.state) == JobStep::Cancel)
        .or_else(|| jobs.iter().find(|j| job_step(&j.state) == JobStep::Delete));
    let action = match next.map(|j| (job_step(&j.state), j.name.clone())) {
        Some((JobStep::Cancel, name)) => Action::CancelJob { name },
        Some((JobStep::Delete, name)) => Action::DeleteJob { name },
        // Only cancelling jobs (or none yet listed): wait for them.
        Some((JobStep::Wait, _)) | None => Action::Nothing,
    };
    let verdict = Verdict::new(
        TrainingPipelinePhase::Deleting,
        Progress::Reconciling,
        reasons::DELETING,
        message,
    );
    Plan::new(action, verdict, details(old, now))
}

/// The pass lets the finalizer go once `delete` is done; the status stays as it is.
fn releasing(delete: Vec<String>, old: &TrainingPipelineStatus, now: DateTime<Utc>) -> Plan {
    let verdict = Verdict::keep(old.phase, Requeue::Active);
    Plan::new(Action::Release { delete }, verdict, details(old, now))
}

/// A deletion plan changes nothing of the record, cancels no duplicate and decides no Event.
fn details(old: &TrainingPipelineStatus, now: DateTime<Utc>) -> Details {
    Details {
        now,
        record: plan::Record::of(old),
        cancel_jobs: Vec::new(),
        events: Vec::new(),
    }
}

/// Whether the pass lets the finalizer go once its action is done (pure).
pub fn released(plan: &Plan) -> bool {
    matches!(plan.action, Action::Release { .. })
}

/// Carries the deletion plan out; each call's Event says what it did. A failed call is
/// `Acted.failed`: what this pass did before it is still said, the error goes to the backoff.
pub async fn act(io: &Io<'_>, action: &Action) -> Acted<Done> {
    let names = match action {
        Action::Release { delete } => delete.as_slice(),
        Action::CancelJob { name } | Action::DeleteJob { name } => std::slice::from_ref(name),
        _ => &[],
    };
    let cancel = matches!(action, Action::CancelJob { .. });
    let mut acted = Acted {
        events: Vec::new(),
        done: Done::default(),
        failed: None,
    };
    for name in names {
        let call = if cancel {
            cancel_job(io, name).await
        } else {
            delete_job(io, name).await
        };
        match call {
            Ok(event) => acted.events.extend(event),
            Err(err) => {
                acted.failed = Some(err);
                break;
            }
        }
    }
    acted
}

/// The status a deletion pass writes: phase `Deleting` with the verdict's message; a Train stage
/// still open ends now (no job is created after this). A releasing pass reaches here only when
/// a delete failed midway: nothing to write then (the status stays `old`).
pub fn report(old: &TrainingPipelineStatus, plan: &Plan) -> TrainingPipelineStatus {
    let mut st = old.clone();
    let Some(k) = plan.verdict.kstatus.as_ref().filter(|_| !released(plan)) else {
        return st;
    };
    st.phase = plan.verdict.phase;
    st.message = Some(k.message.clone());
    let now = time(plan.details.now);
    if let Some(train) = st.stages.iter_mut().find(|s| s.name == StageName::Train) {
        train.end_time.get_or_insert(now.clone());
    }
    st.set_kstatus(k.progress, k.reason, &k.message, now);
    st
}

/// The wait of a deletion pass still pending: the verdict's (the active poll).
pub fn wait(config: &ControllerConfig, plan: &Plan) -> Duration {
    plan.verdict.requeue.after(config)
}

/// How long a Vertex list may lag behind a create, as assumed here: Google does not document
/// whether `customJobs.list` is strongly consistent (docs/reliability.md, "Not verified against
/// real GCP"), and gcp-emulator's `VertexListLag` makes it lag.
pub const LIST_SETTLE: chrono::Duration = chrono::Duration::minutes(5);

/// Until when a Vertex pipeline keeps listing its jobs after the list came back empty: only
/// while a create is unconfirmed (`status.unconfirmedCreateTime`, written before each
/// `customJobs.create` and cleared once a list shows the recorded job). Such a job (a lost
/// reply, or a crash before the status write) is in no status and shows only in lists, which may
/// lag; lists show it by the create's start plus [`LIST_SETTLE`]. Otherwise every job is in
/// status or listed, and deletion does not wait. A duplicate whose list lag outlasted that is
/// left to the orphan sweeper (its owner is gone).
fn settled_after(tp: &TrainingPipeline) -> Option<DateTime<Utc>> {
    tp.spec.training.vertex.as_ref()?;
    let started = tp.status.as_ref()?.unconfirmed_create_time.as_ref()?;
    Some(status::to_chrono(started) + LIST_SETTLE)
}

/// Every job of the pipeline: all that carry its UID label (every attempt, duplicates included)
/// and the one its status records, read by name, since a list may not show a new job yet.
async fn every_job(io: &Io<'_>, tp: &TrainingPipeline, names: &Target) -> Result<Vec<JobView>> {
    let mut jobs = list_jobs(io, names, None).await?;
    let recorded = tp.status.as_ref().and_then(|s| s.custom_job_name.as_deref());
    if let Some(name) = recorded.filter(|n| !jobs.iter().any(|j| j.name == *n)) {
        // Malformed (400) or gone: nothing to clean.
        jobs.extend(read_job(io, name).await?.map(job_view));
    }
    Ok(jobs)
}

/// Cancels one running job, and the Event that says so.
async fn cancel_job(io: &Io<'_>, name: &str) -> Result<Option<Transition>> {
    // Finished or gone between the list and the cancel: the next pass sees it.
    super::act::cancel_job(io, name, "cancel Vertex custom job").await?;
    let note = format!("cancelling custom job {name}");
    Ok(Some(Transition::normal(reasons::CANCELLING, note)))
}

/// Deletes one finished job, and the Event that says so (none when it was gone already).
async fn delete_job(io: &Io<'_>, name: &str) -> Result<Option<Transition>> {
    Ok(match io.gcp.vertex.delete_custom_job(name).await {
        Ok(_) => Some(Transition::normal(
            "Deleted",
            format!("deleted custom job {name}"),
        )),
        Err(e) if e.is_not_found() || e.kind == ErrorKind::FailedPrecondition => None,
        Err(e) => return Err(ReconcileError::gcp("delete Vertex custom job")(e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_jobs_are_cancelled_before_terminal_ones_are_deleted() {
        assert_eq!(job_step(&JobState::Running), JobStep::Cancel);
        assert_eq!(job_step(&JobState::Pending), JobStep::Cancel);
        assert_eq!(job_step(&JobState::Cancelling), JobStep::Wait);
        assert_eq!(job_step(&JobState::Cancelled), JobStep::Delete);
        assert_eq!(job_step(&JobState::Failed), JobStep::Delete);
        assert_eq!(job_step(&JobState::Succeeded), JobStep::Delete);
    }

    fn job(name: &str, state: JobState) -> JobView {
        JobView {
            name: name.into(),
            attempt: 1,
            state,
            message: String::new(),
            exit_code: None,
            model_exists: None,
            preempted: false,
        }
    }

    fn listed(jobs: Vec<JobView>, settle: Option<DateTime<Utc>>) -> Listed {
        Listed { jobs, settle }
    }

    fn at(minute: u32) -> DateTime<Utc> {
        chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 1, 0, minute, 0).unwrap()
    }

    #[test]
    fn finished_jobs_are_deleted_in_one_pass_that_releases() {
        let old = TrainingPipelineStatus::default();
        let jobs = vec![job("a", JobState::Succeeded), job("b", JobState::Cancelled)];
        let p = plan(&listed(jobs, None), &old, at(0));
        let delete = vec!["a".to_string(), "b".to_string()];
        assert_eq!(p.action, Action::Release { delete });
        assert!(released(&p));
        // Should a delete fail midway, nothing is written.
        assert_eq!(report(&old, &p), old);
    }

    #[test]
    fn running_job_is_cancelled_first_and_the_pipeline_says_deleting() {
        let old = TrainingPipelineStatus::default();
        let jobs = vec![job("done", JobState::Failed), job("run", JobState::Running)];
        let p = plan(&listed(jobs, None), &old, at(0));
        assert_eq!(p.action, Action::CancelJob { name: "run".into() });
        assert!(!released(&p));
        let st = report(&old, &p);
        assert_eq!(st.phase, TrainingPipelinePhase::Deleting);
        let message = "deleting 2 Vertex custom job(s) of this pipeline";
        assert_eq!(st.message.as_deref(), Some(message));
        assert_eq!(p.verdict.requeue, Requeue::Active);
    }

    #[test]
    fn an_unconfirmed_create_deletes_one_by_one_and_lists_again_until_settled() {
        let old = TrainingPipelineStatus::default();
        let settle = Some(at(5));
        let done = vec![job("a", JobState::Succeeded), job("b", JobState::Cancelled)];
        let p = plan(&listed(done, settle), &old, at(0));
        assert_eq!(p.action, Action::DeleteJob { name: "a".into() });
        let cancelling = vec![job("c", JobState::Cancelling)];
        let p = plan(&listed(cancelling, None), &old, at(0));
        assert_eq!(p.action, Action::Nothing);
        assert!(!released(&p));
        let p = plan(&listed(Vec::new(), settle), &old, at(4));
        assert_eq!(p.action, Action::Nothing);
        assert!(!released(&p));
        let p = plan(&listed(Vec::new(), settle), &old, at(5));
        assert_eq!(p.action, Action::Release { delete: Vec::new() });
        let p = plan(&listed(Vec::new(), None), &old, at(0));
        assert!(released(&p));
    }
}
