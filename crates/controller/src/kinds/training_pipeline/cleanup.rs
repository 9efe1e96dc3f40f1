//! Deleting a pipeline. Its Vertex jobs (found by the UID label, every attempt and any duplicate,
//! plus the one its status records) are cancelled, one call per reconcile, and waited for until
//! terminal; once all are terminal they are deleted in one pass and the finalizer is dropped. Owned `PreprocessBatch` / `TpuSlice` children are deleted by ownerReference garbage
//! collection once the pipeline is gone, and their own finalizers cancel and delete their cloud
//! resources (`deletionPolicy: Orphan` was copied to them at creation).

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    training_pipeline::{StageName, TrainingPipeline, TrainingPipelinePhase, TrainingPipelineStatus},
};
use tpu_operator_gcp::{ErrorKind, aiplatform_v1::model::JobState};

use super::{
    Target,
    observe::{job_view, list_jobs, read_job},
    plan::{self, JobView},
    status::{self, time},
};
use crate::{
    reconcile::{handles::Io, kind::Cleaned, report::Transition, wait::Wait},
    runtime::error::{ReconcileError, Result},
};

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

/// One deletion pass (policy `Delete`): `Done` once no Vertex job remains.
pub async fn clean(
    tp: &TrainingPipeline,
    io: &Io<'_>,
    names: &Target,
) -> Result<Cleaned<TrainingPipelineStatus>> {
    clean_jobs(tp, io, names).await
}

async fn clean_jobs(
    tp: &TrainingPipeline,
    io: &Io<'_>,
    names: &Target,
) -> Result<Cleaned<TrainingPipelineStatus>> {
    let jobs = every_job(io, tp, names).await?;
    let now = io.clock.now();
    let settle = settled_after(tp);
    if !jobs.is_empty() && settle.is_none() && jobs.iter().all(|j| job_step(&j.state) == JobStep::Delete) {
        // Every job has finished (bills nothing) and no create is unconfirmed (a job a list may
        // not show yet): delete them all now and let the finalizer go, without a status write
        // that would only wake another pass, nor a list to watch them disappear
        // (deletion at the minimum of calls). A delete Vertex accepts and then fails leaves a
        // finished job, which the orphan sweeper reports (its owner is gone).
        let mut events = Vec::new();
        for job in &jobs {
            match step(io, job).await {
                Ok(event) => events.extend(event),
                // What this pass did is still said; the error goes to the backoff.
                Err(err) => return Ok(failed_after(io, events, err)),
            }
        }
        return Ok(Cleaned::Done {
            unwatch: None,
            events,
        });
    }
    let message = match (jobs.first(), settle) {
        (Some(_), _) => format!("deleting {} Vertex custom job(s) of this pipeline", jobs.len()),
        (None, Some(t)) if now < t => format!(
            "no Vertex custom job listed; listing again until {} in case a new one is not listed yet",
            t.to_rfc3339()
        ),
        (None, _) => return Ok(Cleaned::done()),
    };
    // Cancel everything running first, then delete the terminal ones.
    let next = jobs
        .iter()
        .find(|j| job_step(&j.state) == JobStep::Cancel)
        .or_else(|| jobs.iter().find(|j| job_step(&j.state) == JobStep::Delete));
    let (events, failed) = match next {
        Some(job) => match step(io, job).await {
            Ok(event) => (event.into_iter().collect(), None),
            Err(err) => (Vec::new(), Some(err)),
        },
        None => (Vec::new(), None),
    };
    Ok(Cleaned::Pending {
        status: Some(deleting(tp, message, now)),
        wait: Wait::after(io.settings.config.poll_active),
        failed,
        events,
    })
}

/// A pass that did something (`events`) before a call failed: nothing to write, the Events
/// published, then the error returned.
fn failed_after(
    io: &Io<'_>,
    events: Vec<Transition>,
    err: ReconcileError,
) -> Cleaned<TrainingPipelineStatus> {
    Cleaned::Pending {
        status: None,
        wait: Wait::after(io.settings.config.poll_active),
        failed: Some(err),
        events,
    }
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

/// One job's next deletion call, and the Event that says what it did.
async fn step(io: &Io<'_>, job: &JobView) -> Result<Option<Transition>> {
    Ok(match job_step(&job.state) {
        JobStep::Cancel => {
            // Finished or gone between the list and the cancel: the next pass sees it.
            super::act::cancel_job(io, &job.name, "cancel Vertex custom job").await?;
            let note = format!("cancelling custom job {}", job.name);
            Some(Transition::normal(reasons::CANCELLING, note))
        }
        JobStep::Delete => match io.gcp.vertex.delete_custom_job(&job.name).await {
            Ok(_) => Some(Transition::normal(
                "Deleted",
                format!("deleted custom job {}", job.name),
            )),
            Err(e) if e.is_not_found() || e.kind == ErrorKind::FailedPrecondition => None,
            Err(e) => return Err(ReconcileError::gcp("delete Vertex custom job")(e)),
        },
        JobStep::Wait => None,
    })
}

/// Phase `Deleting`; a Train stage still open ends now (no job is created after this).
fn deleting(tp: &TrainingPipeline, message: String, now: DateTime<Utc>) -> TrainingPipelineStatus {
    let mut st = tp.status.clone().unwrap_or_default();
    st.phase = TrainingPipelinePhase::Deleting;
    st.message = Some(message.clone());
    let now = time(now);
    if let Some(train) = st.stages.iter_mut().find(|s| s.name == StageName::Train) {
        train.end_time.get_or_insert(now.clone());
    }
    st.set_kstatus(Progress::Reconciling, reasons::DELETING, &message, now);
    st
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
}
