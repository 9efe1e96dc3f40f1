//! Reading what the pipeline owns: its children (by name, checking the controller
//! ownerReference), the Vertex job of the current attempt (by name, or by the UID label when no
//! name was recorded yet), the model output, and TPU VM completion markers under `modelDir`.
//! Reads only; nothing here mutates.
//!
//! - [`child`]: an owned PreprocessBatch or TpuSlice and its state.
//! - [`vertex`]: the Vertex jobs of the current attempt and the model they wrote.
//! - [`markers`]: TPU VM mode's completion markers.

mod child;
mod markers;
mod vertex;

use tpu_operator_api::common::{CostEstimate, Links};
use tpu_operator_api::conditions::{find_condition, types};
use tpu_operator_api::tpu_slice::TpuSliceStatus;
use tpu_operator_api::training_pipeline::{
    Interruptions, StageName, StageState, TrainingMode, TrainingPipeline, TrainingPipelineStatus,
};
use tpu_operator_gcp::{
    OperationState, Service, aiplatform_v1::model::CustomJob, ignore_not_found, operation_state,
};

pub use vertex::{job_view, list_jobs, read_job};

use super::{
    Target,
    plan::{Child, JobView, Marker, Observed, TrainingObserved, is_finished},
    status::to_chrono,
};
use crate::reconcile::handles::Io;
use crate::runtime::error::{ReconcileError, Result};
use child::{ChildStatus, child};

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
    /// The PreprocessBatch child's batch and its links.
    pub preprocess: ChildCloud,
    /// The TpuSlice child's node and its links (workload logs).
    pub train: ChildCloud,
    /// The pipeline's Kueue Workload, when Kueue gates the training stage (read by the pass
    /// after the rest, `super::queue`).
    pub queue: Option<super::queue::Queued>,
    /// A `SuspendAtCheckpoint` budget action in force for the namespace, as the policies' cache
    /// shows it.
    pub budget: Option<crate::governance::tenancy::rules::Suspending>,
}

/// A child's cloud object as its status names it, and the links its status shows.
#[derive(Clone, Debug, Default)]
pub struct ChildCloud {
    pub gcp_name: Option<String>,
    pub links: Option<Links>,
    /// Where a training slice's capacity plan stands.
    pub capacity: Option<String>,
    /// What interrupted the training slice.
    pub interruptions: Option<Interruptions>,
}

/// What the pipeline owns, and what else the pass read.
pub async fn observe(io: &Io<'_>, tp: &TrainingPipeline, names: &Target) -> Result<(Observed, Reads)> {
    let mut reads = Reads::default();
    let st = tp.status.clone().unwrap_or_default();
    let finished = is_finished(st.phase);
    let mut costs = Vec::new();
    let (preprocess, child) = preprocess_child(io, tp, names).await?;
    costs.extend(child.cost);
    reads.preprocess = ChildCloud {
        gcp_name: child.gcp_name,
        links: child.links,
        capacity: None,
        interruptions: None,
    };
    let (training, cost, duplicate_jobs) = match tp.spec.training.mode() {
        Ok(TrainingMode::TpuVm) => tpu_vm_training(io, tp, names, finished, &mut reads).await?,
        _ => {
            let preprocessing = still_preprocessing(tp, &st, &preprocess);
            vertex_training(io, tp, names, finished || preprocessing, &mut reads).await?
        }
    };
    costs.extend(cost);
    let reaping = finished && st.reaped_time.is_none() && reap_due(io, tp);
    let held_jobs = if reaping && tp.spec.training.mode() == Ok(TrainingMode::Vertex) {
        list_jobs(io, names, None).await?
    } else {
        Vec::new()
    };
    let pending_operation_done = pending_operation_done(io, &st, reaping).await?;
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

/// The PreprocessBatch child, when the pipeline has a preprocess stage.
async fn preprocess_child(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
) -> Result<(Child, ChildStatus)> {
    if tp.spec.preprocess.is_none() {
        return Ok((Child::Absent, ChildStatus::default()));
    }
    child::<tpu_operator_api::preprocess_batch::PreprocessBatch, _>(io, tp, &names.preprocess, |b| {
        b.status.as_ref().map(|s| ChildStatus {
            conditions: s.conditions.clone(),
            cost: s.estimated_cost.clone(),
            links: s.links.clone(),
            gcp_name: s.batch_name.clone(),
            capacity: None,
            interruptions: None,
        })
    })
    .await
}

/// Training starts only once preprocessing succeeded (plan never looks at the job before), so
/// the job lookup, a label-filtered list while no name is recorded, waits.
fn still_preprocessing(tp: &TrainingPipeline, st: &TrainingPipelineStatus, preprocess: &Child) -> bool {
    tp.spec.preprocess.is_some()
        && !matches!(preprocess, Child::Ready { .. })
        && st.stage(StageName::Preprocess).state != StageState::Succeeded
}

/// TPU VM training: the TpuSlice child and, until the pipeline finished, its completion marker.
async fn tpu_vm_training(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    finished: bool,
    reads: &mut Reads,
) -> Result<(TrainingObserved, Option<CostEstimate>, Vec<JobView>)> {
    let (slice, child) = child::<tpu_operator_api::tpu_slice::TpuSlice, _>(io, tp, &names.train, |s| {
        s.status.as_ref().map(|s| ChildStatus {
            conditions: s.conditions.clone(),
            cost: s.estimated_cost.clone(),
            links: s.links.clone(),
            gcp_name: s.node_name.clone(),
            capacity: s.capacity_plan.as_ref().map(|p| p.summary()),
            interruptions: interruptions(s),
        })
    })
    .await?;
    let cost = child.cost;
    reads.train = ChildCloud {
        gcp_name: child.gcp_name,
        links: child.links,
        capacity: child.capacity,
        interruptions: child.interruptions,
    };
    let marker = if finished {
        Marker::None
    } else {
        let project = tp
            .spec
            .training
            .tpu_vm
            .as_ref()
            .and_then(|t| t.slice.project.clone());
        markers::marker(io, tp, project.as_deref().or(names.project.as_deref())).await?
    };
    Ok((TrainingObserved::TpuVm { slice, marker }, cost, Vec::new()))
}

/// Vertex training: the current attempt's job (not looked up while `skip`: the pipeline
/// finished or is still preprocessing), its cost (also recorded as spend), and the duplicates.
async fn vertex_training(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    skip: bool,
    reads: &mut Reads,
) -> Result<(TrainingObserved, Option<CostEstimate>, Vec<JobView>)> {
    if skip {
        return Ok((TrainingObserved::Vertex { job: None }, None, Vec::new()));
    }
    let (job, cost, duplicates) = vertex::current_job(io, tp, names, reads).await?;
    if let (Some(j), Some(c)) = (&job, &cost) {
        let metrics = io.kept.metrics;
        metrics.record_spend(&names.id.namespace, &j.name, Some(c));
    }
    Ok((TrainingObserved::Vertex { job }, cost, duplicates))
}

fn reap_due(io: &Io<'_>, tp: &TrainingPipeline) -> bool {
    let (Some(ttl), Some(done)) = (
        tp.spec.ttl_seconds_after_finished,
        tp.status.as_ref().and_then(|s| s.completion_time.as_ref()),
    ) else {
        return false;
    };
    io.clock.now() >= to_chrono(done) + chrono::Duration::seconds(ttl)
}

/// While reaping, whether the recorded pending Vertex operation is done (a gone one is).
async fn pending_operation_done(
    io: &Io<'_>,
    st: &TrainingPipelineStatus,
    reaping: bool,
) -> Result<Option<bool>> {
    let (Some(op), true) = (&st.pending_operation, reaping) else {
        return Ok(None);
    };
    let op = io.gcp.vertex.get_operation(op).await;
    Ok(
        match ignore_not_found(op).map_err(ReconcileError::gcp("get Vertex operation"))? {
            None => Some(true),
            Some(op) => Some(!matches!(
                operation_state(Service::Vertex, &op),
                OperationState::Pending
            )),
        },
    )
}

/// What interrupted a training slice, as its status counts it; `None` while nothing did.
fn interruptions(s: &TpuSliceStatus) -> Option<Interruptions> {
    let maintenance = find_condition(&s.conditions, types::MAINTENANCE_PENDING)
        .filter(|c| c.status == "True")
        .map(|c| c.message.clone());
    let slice_restarts = s.slice_restarts.iter().sum::<i32>();
    let quiet =
        s.recreations == 0 && s.maintenance_restarts == 0 && slice_restarts == 0 && maintenance.is_none();
    (!quiet).then_some(Interruptions {
        preemptions: s.recreations,
        maintenance_restarts: s.maintenance_restarts,
        slice_restarts,
        maintenance,
    })
}
