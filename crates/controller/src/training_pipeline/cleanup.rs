//! Deleting a pipeline. Its Vertex jobs (found by the UID label, every attempt) are cancelled,
//! waited for until terminal, then deleted, one call per reconcile; only then is the finalizer
//! dropped. Owned `PreprocessBatch` / `TpuSlice` children are deleted by ownerReference garbage
//! collection once the pipeline is gone, and their own finalizers cancel and delete their cloud
//! resources (`deletionPolicy: Orphan` was copied to them at creation).

use kube::runtime::controller::Action;
use tpu_operator_api::{
    common::DeletionPolicy,
    conditions::{Progress, reasons},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};
use tpu_operator_gcp::{ErrorKind, aiplatform_v1::model::JobState};

use super::{
    Names,
    observe::list_jobs,
    plan::JobView,
    status::{self, time},
};
use crate::{
    context::Context,
    error::{ReconcileError, Result},
    report,
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
        JobState::Succeeded
        | JobState::PartiallySucceeded
        | JobState::Failed
        | JobState::Cancelled
        | JobState::Expired => JobStep::Delete,
        JobState::Cancelling => JobStep::Wait,
        JobState::Queued | JobState::Pending | JobState::Running | JobState::Paused | JobState::Updating => {
            JobStep::Cancel
        }
        // Unknown states: cancelling is harmless and stops billing if it runs.
        _ => JobStep::Cancel,
    }
}

/// One deletion pass: `Some(requeue)` while Vertex jobs remain, `None` once the finalizer may go.
pub async fn cleanup_pass(tp: &TrainingPipeline, ctx: &Context) -> Result<Option<Action>> {
    if tp.spec.deletion_policy == DeletionPolicy::Orphan {
        report::publish_event(
            ctx,
            tp,
            false,
            "Orphaned",
            "deletionPolicy Orphan: Vertex jobs and child cloud resources are left running".into(),
        )
        .await;
        return Ok(None);
    }
    let names = Names::of(tp, ctx).map_err(ReconcileError::MissingMetadata)?;
    let jobs = list_jobs(ctx, &names, None).await?;
    let message = match jobs.first() {
        None => return Ok(None),
        Some(_) => format!("deleting {} Vertex custom job(s) of this pipeline", jobs.len()),
    };
    mark_deleting(ctx, tp, &message).await?;
    // Cancel everything running first, then delete the terminal ones.
    let next = jobs
        .iter()
        .find(|j| job_step(&j.state) == JobStep::Cancel)
        .or_else(|| jobs.iter().find(|j| job_step(&j.state) == JobStep::Delete));
    if let Some(job) = next {
        step(ctx, tp, job).await?;
    }
    Ok(Some(Action::requeue(ctx.config.poll_active)))
}

async fn step(ctx: &Context, tp: &TrainingPipeline, job: &JobView) -> Result<()> {
    match job_step(&job.state) {
        JobStep::Cancel => {
            match ctx.gcp.vertex.cancel_custom_job(&job.name).await {
                Ok(()) => {}
                // Finished or gone between the list and the cancel: the next pass sees it.
                Err(e) if e.is_not_found() || e.kind == ErrorKind::FailedPrecondition => {}
                Err(e) => return Err(ReconcileError::gcp("cancel Vertex custom job")(e)),
            }
            let note = format!("cancelling custom job {}", job.name);
            report::publish_event(ctx, tp, false, reasons::CANCELLING, note).await;
        }
        JobStep::Delete => match ctx.gcp.vertex.delete_custom_job(&job.name).await {
            Ok(_) => {
                let note = format!("deleted custom job {}", job.name);
                report::publish_event(ctx, tp, false, "Deleted", note).await;
            }
            Err(e) if e.is_not_found() || e.kind == ErrorKind::FailedPrecondition => {}
            Err(e) => return Err(ReconcileError::gcp("delete Vertex custom job")(e)),
        },
        JobStep::Wait => {}
    }
    Ok(())
}

async fn mark_deleting(ctx: &Context, tp: &TrainingPipeline, message: &str) -> Result<()> {
    let mut st = tp.status.clone().unwrap_or_default();
    st.phase = TrainingPipelinePhase::Deleting;
    st.message = Some(message.to_string());
    let now = time(ctx.clock.now());
    status::set_kstatus(&mut st, Progress::Reconciling, reasons::DELETING, message, now);
    status::write(ctx, tp, &st).await?;
    Ok(())
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
