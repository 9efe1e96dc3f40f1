//! The Vertex side of a pipeline: its custom jobs (the recorded one by name, an attempt's by
//! the UID label) and whether the current job wrote a model.

use tpu_operator_api::common::CostEstimate;
use tpu_operator_api::training_pipeline::TrainingPipeline;
use tpu_operator_gcp::{ErrorKind, aiplatform_v1::model::CustomJob, ignore_not_found, parse_gs_uri};

use super::super::{
    Target, duplicates,
    plan::{JobView, join_uri},
    spec,
};
use super::Reads;
use crate::reconcile::handles::Io;
use crate::runtime::error::{ReconcileError, Result};

pub fn job_view(job: CustomJob) -> JobView {
    let message = job.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
    JobView {
        preempted: spot_preempted(&job),
        attempt: spec::attempt_of(&job),
        exit_code: exit_code(&message),
        message,
        name: job.name,
        state: job.state,
        model_exists: None,
    }
}

/// The exit code in a failed job's error message. Vertex AI reports a replica's exit as "The
/// replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error." (the
/// message of a FAILED custom job, as recorded in public reports such as
/// GoogleCloudPlatform/vertex-ai-samples#1504; the API documents no structured field for it).
/// With several replicas the first one named decides. `None` when the message names none.
pub fn exit_code(message: &str) -> Option<i32> {
    const SAID: &str = "exited with a non-zero status of ";
    let start = message.find(SAID)? + SAID.len();
    let digits: String = message[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A Spot custom job that failed because its VMs were reclaimed. Vertex documents that a
/// preempted Spot job "fails with a STOCKOUT error"
/// (https://cloud.google.com/vertex-ai/docs/training/use-spot-vms,
/// https://cloud.google.com/vertex-ai/docs/predictions/use-spot-vms#preemption-handling) but not
/// the `google.rpc` code, so either sign counts: code 8 RESOURCE_EXHAUSTED (what capacity errors
/// use) or `STOCKOUT` / `preempt` in the message. Only for `scheduling.strategy: SPOT`: an
/// on-demand job is never preempted, so its failures always count.
pub(crate) fn spot_preempted(job: &CustomJob) -> bool {
    use tpu_operator_gcp::aiplatform_v1::model::{JobState, scheduling::Strategy};
    let spot = job
        .job_spec
        .as_ref()
        .and_then(|s| s.scheduling.as_ref())
        .is_some_and(|s| s.strategy == Strategy::Spot);
    let Some(error) = job
        .error
        .as_ref()
        .filter(|_| spot && job.state == JobState::Failed)
    else {
        return false;
    };
    let message = error.message.to_ascii_lowercase();
    error.code == 8 || message.contains("stockout") || message.contains("preempt")
}

/// This pipeline's jobs (of one attempt, or all), newest attempt first.
pub async fn list_jobs(io: &Io<'_>, names: &Target, attempt: Option<i32>) -> Result<Vec<JobView>> {
    let jobs = list_custom_jobs(io, names, attempt).await?;
    let mut views: Vec<JobView> = jobs.into_iter().map(job_view).collect();
    views.sort_by_key(|j| std::cmp::Reverse(j.attempt));
    Ok(views)
}

/// This pipeline's jobs (of one attempt, or all) as Vertex lists them.
pub async fn list_custom_jobs(io: &Io<'_>, names: &Target, attempt: Option<i32>) -> Result<Vec<CustomJob>> {
    let Some(parent) = &names.vertex_parent else {
        return Ok(Vec::new());
    };
    let filter = spec::job_filter(&names.id, attempt);
    io.gcp
        .vertex
        .list_custom_jobs(parent, &filter)
        .await
        .map_err(ReconcileError::gcp("list Vertex custom jobs by UID label"))
}

/// The recorded job as read (if it still exists) and the jobs Vertex lists for its attempt: a
/// create whose reply was lost may have made another one, which a list shows only later.
async fn attempt_jobs(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    recorded: Option<CustomJob>,
    reads: &mut Reads,
) -> Result<Vec<CustomJob>> {
    let attempt = match &recorded {
        Some(job) => spec::attempt_of(job),
        None => tp.status.as_ref().map_or(0, |s| s.attempts),
    };
    let listed = list_custom_jobs(io, names, Some(attempt)).await?;
    let shown = |r: &CustomJob| listed.iter().any(|j| j.name == r.name);
    reads.list_lags = recorded.as_ref().is_some_and(|r| !shown(r));
    reads.list_caught_up = recorded.as_ref().is_some_and(shown);
    // The read by name first: it is authoritative, and a lagging list may not show it at all.
    Ok(recorded.into_iter().chain(listed).collect())
}

/// A recorded Vertex job read by name; `None` when it is gone, or when Vertex calls the name
/// malformed (400, as for a non-numeric id): retrying the same get cannot succeed, so it counts
/// as gone.
pub async fn read_job(io: &Io<'_>, name: &str) -> Result<Option<CustomJob>> {
    match io.gcp.vertex.get_custom_job(name).await {
        Err(e) if e.kind == ErrorKind::InvalidArgument => Ok(None),
        other => ignore_not_found(other).map_err(ReconcileError::gcp("get Vertex custom job")),
    }
}

/// The job of the current attempt and, once it started, its cost estimate, plus the other jobs of
/// that attempt that still run (duplicates to cancel, see [`duplicates`]). The job is the one
/// recorded in status, else the newest attempt's carrying this pipeline's UID label (a job created
/// just before a crash, before its name reached the status); when an attempt has several jobs,
/// the oldest.
pub(super) async fn current_job(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    reads: &mut Reads,
) -> Result<(Option<JobView>, Option<CostEstimate>, Vec<JobView>)> {
    let jobs = match tp.status.as_ref().and_then(|s| s.custom_job_name.clone()) {
        Some(name) => recorded_attempt_jobs(io, tp, names, &name, reads).await?,
        None => {
            reads.jobs_listed = true;
            newest_attempt_jobs(io, names).await?
        }
    };
    let split = duplicates::split(jobs);
    let extra = split.to_cancel.into_iter().map(job_view).collect();
    let mut cost = None;
    if let (Some(job), Some(v)) = (&split.kept, &tp.spec.training.vertex) {
        cost = super::super::status::vertex_cost(v, job, io.settings.prices, io.clock.now());
    }
    reads.job.clone_from(&split.kept);
    let Some(mut job) = split.kept.map(job_view) else {
        return Ok((None, cost, extra));
    };
    if matches!(
        job.state,
        tpu_operator_gcp::aiplatform_v1::model::JobState::Succeeded
            | tpu_operator_gcp::aiplatform_v1::model::JobState::PartiallySucceeded
    ) {
        let created = reads.job.as_ref().and_then(|j| j.create_time);
        job.model_exists = Some(model_written_since(io, tp, created).await?);
    }
    Ok((Some(job), cost, extra))
}

/// The recorded job and, while a create is unconfirmed or the name reads as gone, the other
/// jobs its attempt lists.
async fn recorded_attempt_jobs(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    name: &str,
    reads: &mut Reads,
) -> Result<Vec<CustomJob>> {
    // The cloud watch saves reads: a job it just listed in a new state, or one that has
    // not changed since this pipeline last read it (a pipeline is woken by its children
    // and its own status writes far more often than its job changes).
    let watched = io
        .take_listed::<CustomJob>(name)
        .or_else(|| io.unchanged_listed(name));
    let got = match watched {
        Some(job) => Some(job),
        None => read_job(io, name).await?,
    };
    // Duplicates can only come from a create whose outcome was unknown; once a list
    // showed the recorded job (and so every older one), the marker is cleared and a
    // pass costs no list. A recorded name that reads as gone is looked for by label.
    let unconfirmed = tp
        .status
        .as_ref()
        .is_some_and(|s| s.unconfirmed_create_time.is_some());
    if unconfirmed || got.is_none() {
        attempt_jobs(io, tp, names, got, reads).await
    } else {
        Ok(got.into_iter().collect())
    }
}

/// No job name recorded: every job carrying this pipeline's UID label, kept to the newest attempt.
async fn newest_attempt_jobs(io: &Io<'_>, names: &Target) -> Result<Vec<CustomJob>> {
    let mut all = list_custom_jobs(io, names, None).await?;
    let newest = all.iter().map(spec::attempt_of).max();
    all.retain(|j| Some(spec::attempt_of(j)) == newest);
    Ok(all)
}

/// Most objects of a model directory looked at for one written by this attempt: one listing page.
const MODEL_OBJECTS_LOOKED_AT: u32 = 1000;

/// Whether the model directory (`modelDir/model/`, Vertex's `AIP_MODEL_DIR`) holds an object
/// written since `created` (the job's create time; every object when unknown). A re-run into a
/// `modelDir` that holds an earlier run's model must not succeed on it when its own job wrote
/// nothing. One listing of up to [`MODEL_OBJECTS_LOOKED_AT`] objects in name
/// order, as many calls as the existence check it replaces; a model whose first thousand objects
/// by name are all older than the job is taken as not written (a fresh run rewrites its files).
async fn model_written_since(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    created: Option<tpu_operator_gcp::wkt::Timestamp>,
) -> Result<bool> {
    let model = join_uri(&tp.spec.artifacts.model_dir, "model/");
    let Some(uri) = parse_gs_uri(&model) else {
        return Ok(false);
    };
    let objects = io
        .storage_for(&kube::ResourceExt::namespace(tp).unwrap_or_default())
        .list_objects(uri.bucket, uri.path, MODEL_OBJECTS_LOOKED_AT)
        .await
        .map_err(ReconcileError::gcp("check the model output"))?;
    let since = created.and_then(|t| chrono::DateTime::<chrono::Utc>::from_timestamp(t.seconds(), 0));
    Ok(objects.iter().any(|o| match since {
        None => true,
        Some(since) => chrono::DateTime::parse_from_rfc3339(&o.updated)
            .is_ok_and(|t| t.with_timezone(&chrono::Utc) >= since),
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exit_code_is_read_from_vertex_s_failure_message() {
        let cases = [
            (
                "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error.",
                Some(3),
            ),
            (
                "The replica workerpool1-1 exited with a non-zero status of 137.",
                Some(137),
            ),
            ("Internal error occurred for the current attempt.", None),
            ("exited with a non-zero status of x", None),
        ];
        for (message, want) in cases {
            assert_eq!(super::exit_code(message), want, "{message}");
        }
    }
}
