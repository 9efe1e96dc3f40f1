//! Reading what the pipeline owns: its children (by name, checking the controller
//! ownerReference), the Vertex job of the current attempt (by name, or by the UID label when no
//! name was recorded yet), the model output, and TPU VM completion markers under `modelDir`.
//! Reads only; nothing here mutates.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, Resource, ResourceExt};
use tpu_operator_api::common::CostEstimate;
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    training_pipeline::{StageName, StageState, TrainingMode, TrainingPipeline},
};
use tpu_operator_gcp::{
    ErrorKind, OperationState, Service, aiplatform_v1::model::CustomJob, ignore_not_found, operation_state,
    parse_gs_uri,
};

use super::{
    Target, duplicates,
    plan::{Child, JobView, Marker, Observed, TrainingObserved, is_finished, join_uri},
    spec,
    status::{stage, to_chrono},
};
use crate::reconcile::context::Context;
use crate::runtime::error::{ReconcileError, Result};

/// What a pass read besides plan's input.
#[derive(Debug, Default)]
pub struct Reads {
    /// The current Vertex job as read by its recorded name (for the cloud watch).
    pub job: Option<CustomJob>,
    /// No job name was recorded, so every job carrying this pipeline's UID label was listed in
    /// this pass: a job of a newer attempt than the one observed does not exist.
    pub jobs_listed: bool,
    /// The recorded job exists but the list of its attempt does not show it yet: lists lag, and
    /// a job whose create reply was lost (older, so listed no later) may still turn up. The
    /// pipeline polls instead of waiting on the cloud watch until the list has caught up.
    pub list_lags: bool,
    /// The list of the attempt's jobs shows the recorded job: every job created before it
    /// (a lost reply) is listed too, so no create is unconfirmed any more.
    pub list_caught_up: bool,
}

/// What the pipeline owns, and what else the pass read.
pub async fn observe(ctx: &Context, tp: &TrainingPipeline, names: &Target) -> Result<(Observed, Reads)> {
    let mut reads = Reads::default();
    let st = tp.status.clone().unwrap_or_default();
    let finished = is_finished(st.phase);
    let mut costs = Vec::new();
    let preprocess = if tp.spec.preprocess.is_some() {
        let (child, cost) = child::<tpu_operator_api::preprocess_batch::PreprocessBatch, _>(
            ctx,
            tp,
            &names.preprocess,
            |b| {
                b.status
                    .as_ref()
                    .map(|s| (s.conditions.clone(), s.estimated_cost.clone()))
            },
        )
        .await?;
        costs.extend(cost);
        child
    } else {
        Child::Absent
    };
    let mut duplicate_jobs = Vec::new();
    let training = match tp.spec.training.mode() {
        Ok(TrainingMode::TpuVm) => {
            let (slice, cost) =
                child::<tpu_operator_api::tpu_slice::TpuSlice, _>(ctx, tp, &names.train, |s| {
                    s.status
                        .as_ref()
                        .map(|s| (s.conditions.clone(), s.estimated_cost.clone()))
                })
                .await?;
            costs.extend(cost);
            let marker = if finished {
                Marker::None
            } else {
                marker(ctx, tp).await?
            };
            TrainingObserved::TpuVm { slice, marker }
        }
        _ => {
            // Training starts only once preprocessing succeeded (plan never looks at the job
            // before), so the job lookup, a label-filtered list while no name is recorded, waits.
            let preprocessing = tp.spec.preprocess.is_some()
                && !matches!(preprocess, Child::Ready { .. })
                && stage(&st, StageName::Preprocess).state != StageState::Succeeded;
            let job = if finished || preprocessing {
                None
            } else {
                let (job, cost, extra) = current_job(ctx, tp, names, &mut reads).await?;
                duplicate_jobs = extra;
                if let (Some(j), Some(c)) = (&job, &cost) {
                    ctx.metrics.record_spend(&names.id.namespace, &j.name, Some(c));
                }
                costs.extend(cost);
                job
            };
            TrainingObserved::Vertex { job }
        }
    };
    let reaping = finished && st.reaped_time.is_none() && reap_due(ctx, tp);
    let held_jobs = if reaping && tp.spec.training.mode() == Ok(TrainingMode::Vertex) {
        list_jobs(ctx, names, None).await?
    } else {
        Vec::new()
    };
    let pending_operation_done = match (&st.pending_operation, reaping) {
        (Some(op), true) => {
            let op = ctx.gcp.vertex.get_operation(op).await;
            match ignore_not_found(op).map_err(ReconcileError::gcp("get Vertex operation"))? {
                None => Some(true),
                Some(op) => Some(!matches!(
                    operation_state(Service::Vertex, &op),
                    OperationState::Pending
                )),
            }
        }
        _ => None,
    };
    let observed = Observed {
        preprocess,
        training,
        held_jobs,
        duplicate_jobs,
        pending_operation_done,
        costs,
    };
    Ok((observed, reads))
}

fn reap_due(ctx: &Context, tp: &TrainingPipeline) -> bool {
    let (Some(ttl), Some(done)) = (
        tp.spec.ttl_seconds_after_finished,
        tp.status.as_ref().and_then(|s| s.completion_time.as_ref()),
    ) else {
        return false;
    };
    ctx.clock.now() >= to_chrono(done) + chrono::Duration::seconds(ttl)
}

/// An owned child's state from its metadata and kstatus conditions, and its cost estimate.
async fn child<K, F>(
    ctx: &Context,
    tp: &TrainingPipeline,
    name: &str,
    status_of: F,
) -> Result<(Child, Option<CostEstimate>)>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    F: Fn(&K) -> Option<(Vec<Condition>, Option<CostEstimate>)>,
{
    let ns = tp
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(obj) = api
        .get_opt(name)
        .await
        .map_err(ReconcileError::kube("get owned child"))?
    else {
        return Ok((Child::Absent, None));
    };
    let owned = obj
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == tp.metadata.uid.as_ref());
    if !owned {
        return Ok((Child::NotOwned, None));
    }
    let (conds, cost) = status_of(&obj).unwrap_or_default();
    if obj.meta().deletion_timestamp.is_some() {
        return Ok((Child::Deleting, cost));
    }
    let text = |t: &str| {
        find_condition(&conds, t)
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    };
    let child = match progress_of(&conds) {
        Some(Progress::Ready) => Child::Ready {
            message: text(types::READY).1,
        },
        Some(Progress::Stalled) => {
            let (reason, message) = text(types::STALLED);
            Child::Stalled { reason, message }
        }
        Some(Progress::Reconciling) => {
            let (reason, message) = text(types::RECONCILING);
            Child::Progressing { reason, message }
        }
        Some(Progress::Idle) => {
            let (reason, message) = text(types::READY);
            Child::Progressing { reason, message }
        }
        None => Child::Progressing {
            reason: "Pending".into(),
            message: "not reconciled yet".into(),
        },
    };
    Ok((child, cost))
}

pub fn job_view(job: CustomJob) -> JobView {
    JobView {
        preempted: spot_preempted(&job),
        attempt: spec::attempt_of(&job),
        message: job.error.as_ref().map(|e| e.message.clone()).unwrap_or_default(),
        name: job.name,
        state: job.state,
        model_exists: None,
    }
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
pub async fn list_jobs(ctx: &Context, names: &Target, attempt: Option<i32>) -> Result<Vec<JobView>> {
    let jobs = list_custom_jobs(ctx, names, attempt).await?;
    let mut views: Vec<JobView> = jobs.into_iter().map(job_view).collect();
    views.sort_by_key(|j| std::cmp::Reverse(j.attempt));
    Ok(views)
}

/// This pipeline's jobs (of one attempt, or all) as Vertex lists them.
pub async fn list_custom_jobs(ctx: &Context, names: &Target, attempt: Option<i32>) -> Result<Vec<CustomJob>> {
    let Some(parent) = &names.vertex_parent else {
        return Ok(Vec::new());
    };
    let filter = spec::job_filter(&names.id, attempt);
    ctx.gcp
        .vertex
        .list_custom_jobs(parent, &filter)
        .await
        .map_err(ReconcileError::gcp("list Vertex custom jobs by UID label"))
}

/// The recorded job as read (if it still exists) and the jobs Vertex lists for its attempt: a
/// create whose reply was lost may have made another one, which a list shows only later.
async fn attempt_jobs(
    ctx: &Context,
    tp: &TrainingPipeline,
    names: &Target,
    recorded: Option<CustomJob>,
    reads: &mut Reads,
) -> Result<Vec<CustomJob>> {
    let attempt = match &recorded {
        Some(job) => spec::attempt_of(job),
        None => tp.status.as_ref().map_or(0, |s| s.attempts),
    };
    let listed = list_custom_jobs(ctx, names, Some(attempt)).await?;
    let shown = |r: &CustomJob| listed.iter().any(|j| j.name == r.name);
    reads.list_lags = recorded.as_ref().is_some_and(|r| !shown(r));
    reads.list_caught_up = recorded.as_ref().is_some_and(shown);
    // The read by name first: it is authoritative, and a lagging list may not show it at all.
    Ok(recorded.into_iter().chain(listed).collect())
}

/// A recorded Vertex job read by name; `None` when it is gone, or when Vertex calls the name
/// malformed (400, as for a non-numeric id): retrying the same get cannot succeed, so it counts
/// as gone.
pub async fn read_job(ctx: &Context, name: &str) -> Result<Option<CustomJob>> {
    match ctx.gcp.vertex.get_custom_job(name).await {
        Err(e) if e.kind == ErrorKind::InvalidArgument => Ok(None),
        other => ignore_not_found(other).map_err(ReconcileError::gcp("get Vertex custom job")),
    }
}

/// The job of the current attempt and, once it started, its cost estimate, plus the other jobs of
/// that attempt that still run (duplicates to cancel, see [`duplicates`]). The job is the one
/// recorded in status, else the newest attempt's carrying this pipeline's UID label (a job created
/// just before a crash, before its name reached the status); when an attempt has several jobs,
/// the oldest.
async fn current_job(
    ctx: &Context,
    tp: &TrainingPipeline,
    names: &Target,
    reads: &mut Reads,
) -> Result<(Option<JobView>, Option<CostEstimate>, Vec<JobView>)> {
    let recorded = tp.status.as_ref().and_then(|s| s.custom_job_name.clone());
    let jobs = match recorded {
        Some(name) => {
            // The cloud watch saves reads: a job it just listed in a new state, or one that has
            // not changed since this pipeline last read it (a pipeline is woken by its children
            // and its own status writes far more often than its job changes).
            let watched = ctx
                .cloud_watch
                .take::<CustomJob>(&name)
                .or_else(|| ctx.cloud_watch.unchanged(&name));
            let got = match watched {
                Some(job) => Some(job),
                None => read_job(ctx, &name).await?,
            };
            // Duplicates can only come from a create whose outcome was unknown; once a list
            // showed the recorded job (and so every older one), the marker is cleared and a
            // pass costs no list. A recorded name that reads as gone is looked for by label.
            let unconfirmed = tp
                .status
                .as_ref()
                .is_some_and(|s| s.unconfirmed_create_time.is_some());
            if unconfirmed || got.is_none() {
                attempt_jobs(ctx, tp, names, got, reads).await?
            } else {
                got.into_iter().collect()
            }
        }
        None => {
            reads.jobs_listed = true;
            let mut all = list_custom_jobs(ctx, names, None).await?;
            let newest = all.iter().map(spec::attempt_of).max();
            all.retain(|j| Some(spec::attempt_of(j)) == newest);
            all
        }
    };
    let split = duplicates::split(jobs);
    let extra = split.to_cancel.into_iter().map(job_view).collect();
    let mut cost = None;
    if let (Some(job), Some(v)) = (&split.kept, &tp.spec.training.vertex) {
        cost = super::status::vertex_cost(v, job, &ctx.tenancy.prices, ctx.clock.now());
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
        job.model_exists = Some(model_written_since(ctx, tp, created).await?);
    }
    Ok((Some(job), cost, extra))
}

/// Most objects of a model directory looked at for one written by this attempt: one listing page.
const MODEL_OBJECTS_LOOKED_AT: u32 = 1000;

/// Whether the model directory (`modelDir/model/`, Vertex's `AIP_MODEL_DIR`) holds an object
/// written since `created` (the job's create time; every object when unknown). A re-run into a
/// `modelDir` that holds an earlier run's model must not succeed on it when its own job wrote
/// nothing (issue 35 item 4). One listing of up to [`MODEL_OBJECTS_LOOKED_AT`] objects in name
/// order, as many calls as the existence check it replaces; a model whose first thousand objects
/// by name are all older than the job is taken as not written (a fresh run rewrites its files).
async fn model_written_since(
    ctx: &Context,
    tp: &TrainingPipeline,
    created: Option<tpu_operator_gcp::wkt::Timestamp>,
) -> Result<bool> {
    let model = join_uri(&tp.spec.artifacts.model_dir, "model/");
    let Some(uri) = parse_gs_uri(&model) else {
        return Ok(false);
    };
    let objects = ctx
        .gcp
        .storage
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

/// What the status says of a `_FAILED` marker's content. The operator's startup script writes
/// the workload's exit code there and nothing else; anything other than a number (someone else's
/// object under a `modelDir` the tenant named) is not copied into status.
pub fn exit_code(content: &str) -> String {
    match content.trim() {
        "" => "exit code unknown".to_string(),
        c => match c.parse::<i64>() {
            Ok(code) => format!("exit code {code}"),
            Err(_) => format!(
                "its {} bytes are not an exit code and are not shown",
                content.len()
            ),
        },
    }
}

/// TPU VM mode: `_SUCCESS` / `_FAILED` under `modelDir`, written since the current attempt began.
async fn marker(ctx: &Context, tp: &TrainingPipeline) -> Result<Marker> {
    let Some(started) = tp
        .status
        .as_ref()
        .and_then(|s| stage(s, StageName::Train).start_time.as_ref().map(to_chrono))
    else {
        return Ok(Marker::None);
    };
    let dir = &tp.spec.artifacts.model_dir;
    let Some(uri) = parse_gs_uri(dir) else {
        return Ok(Marker::None);
    };
    let prefix = format!("{}_", uri.path);
    let objects = ctx.gcp.storage.list_objects(uri.bucket, &prefix, 10).await;
    let objects = match objects {
        // The bucket may not exist until the workload writes to it.
        Err(e) if e.is_not_found() => return Ok(Marker::None),
        other => other.map_err(ReconcileError::gcp("list completion markers"))?,
    };
    let fresh = |leaf: &str| {
        objects.iter().any(|o| {
            o.name == format!("{}{leaf}", uri.path)
                && chrono::DateTime::parse_from_rfc3339(&o.updated)
                    .is_ok_and(|t| t.with_timezone(&chrono::Utc) >= started)
        })
    };
    if fresh("_SUCCESS") {
        return Ok(Marker::Succeeded);
    }
    if fresh("_FAILED") {
        let uri = format!("{dir}_FAILED");
        let content = ctx.gcp.storage.read_object(&uri).await.unwrap_or_default();
        return Ok(Marker::Failed {
            detail: format!("{uri} written ({})", exit_code(&content)),
        });
    }
    Ok(Marker::None)
}

#[cfg(test)]
mod tests {
    /// Only an exit code reaches status: another team's object under the named `modelDir` is not
    /// copied (issue 32).
    #[test]
    fn only_an_exit_code_is_copied_into_status() {
        assert_eq!(super::exit_code("3\n"), "exit code 3");
        assert_eq!(super::exit_code(""), "exit code unknown");
        let secret = "team-b: loss=0.12 step=9000 api_key=...";
        let shown = super::exit_code(secret);
        assert!(!shown.contains("team-b") && !shown.contains("loss"), "{shown}");
    }
}
