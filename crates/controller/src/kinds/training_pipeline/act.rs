//! Carrying out the plan's one action. What it learns (the job's server-assigned name, a delete
//! operation, a create paced or refused) is returned as [`Did`], which `report` writes into the
//! status persisted right after the call; nothing the action is given is changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use tpu_operator_api::{
    common::DeletionPolicy,
    naming::ObjectIdentity,
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::{TrainingPipeline, TrainingPipelineStatus},
};
use tpu_operator_gcp::ErrorKind;

use crate::reconcile::kind::{Kind, WriteAhead};

use super::{
    Target, checkpoints,
    done::{Did, Outcome},
    observe::{Reads, list_jobs},
    plan::{Action, Record},
    spec, status,
};
use crate::reconcile::handles::Io;
use crate::runtime::{
    capacity::{Asker, Group, Line, Turn},
    error::{ReconcileError, Result},
};

/// Carries out `action`; `record` is the pipeline's record as the plan left it (for the
/// attempt's checkpoint directory).
pub async fn act(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    action: &Action,
    record: &Record,
    reads: &Reads,
    ahead: &mut dyn WriteAhead<TrainingPipelineStatus>,
) -> Result<Did> {
    if let Action::CreateJob { attempt } = action {
        return create_job(io, tp, names, *attempt, record, reads, ahead).await;
    }
    if let Action::DeleteJob { name } = action {
        return delete_job(io, name).await.map(Did::just);
    }
    other(io, tp, names, action, record, reads).await?;
    Ok(Did::default())
}

/// The actions whose outcome the status does not record (the next observe reads it).
async fn other(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    action: &Action,
    record: &Record,
    reads: &Reads,
) -> Result<()> {
    match action {
        // A release is a deletion pass's (`cleanup::act`).
        Action::Nothing | Action::CreateJob { .. } | Action::DeleteJob { .. } | Action::Release { .. } => {
            Ok(())
        }
        Action::CreatePreprocess => {
            let owner = owner_ref(tp).ok_or(ReconcileError::MissingMetadata("uid"))?;
            let child = spec::preprocess_batch(
                &tp.spec,
                &names.id,
                &names.preprocess,
                names.project.clone(),
                owner,
            );
            match child {
                Some(child) => create_child(io, &names.id.namespace, &child).await,
                None => Ok(()),
            }
        }
        Action::CreateSlice { attempt } => create_slice(io, tp, names, record, *attempt).await,
        Action::DeleteSlice | Action::DeletePreprocess => release(io, tp, names, action).await,
        Action::CancelJob { name } => {
            cancel_job(
                io,
                name,
                "cancel the Vertex custom job of a suspended or evicted pipeline",
            )
            .await
        }
        Action::Workload(write) => match &reads.queue {
            Some(queued) => crate::kueue::queued::write(tp, io, queued, *write).await,
            None => Ok(()),
        },
    }
}

/// Creates the attempt's training slice, with the attempt's `CHECKPOINT_DIR` and the pipeline's
/// Kueue labels (Kueue gates the slice itself, in the pipeline's queue: `super::queue`).
async fn create_slice(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    record: &Record,
    attempt: i32,
) -> Result<()> {
    let owner = owner_ref(tp).ok_or(ReconcileError::MissingMetadata("uid"))?;
    let ckpt = checkpoints::current_dir(&tp.spec, &record.stages);
    let child = spec::train_slice(
        &tp.spec,
        &names.id,
        &names.train,
        names.project.clone(),
        owner,
        &ckpt,
        attempt,
    );
    let Some(mut child) = child else {
        return Ok(());
    };
    child.labels_mut().extend(super::queue::child_labels(tp));
    create_child(io, &names.id.namespace, &child).await
}

/// Deletes a finished job's record (TTL reaping); the delete operation goes to status.
async fn delete_job(io: &Io<'_>, name: &str) -> Result<Outcome> {
    match io.gcp.vertex.delete_custom_job(name).await {
        Ok(op) => Ok(Outcome::Deleting { operation: op.name }),
        Err(e) if e.is_not_found() => Ok(Outcome::Nothing),
        Err(e) => Err(ReconcileError::gcp("delete finished Vertex custom job")(e)),
    }
}

/// Cancels duplicate jobs of the current attempt (see `duplicates`). One that finished or went in
/// the meantime needs nothing more; cleanup deletes their records with the pipeline's others.
pub async fn cancel_jobs(io: &Io<'_>, names: &[String]) -> Result<()> {
    for name in names {
        cancel_job(io, name, "cancel duplicate Vertex custom job").await?;
    }
    Ok(())
}

/// Cancels one Vertex job; one already finished (FAILED_PRECONDITION) or gone needs nothing more.
/// `what` names the call in the error.
pub async fn cancel_job(io: &Io<'_>, name: &str, what: &'static str) -> Result<()> {
    match io.gcp.vertex.cancel_custom_job(name).await {
        Err(e) if !e.is_not_found() && e.kind != ErrorKind::FailedPrecondition => {
            Err(ReconcileError::gcp(what)(e))
        }
        _ => Ok(()),
    }
}

fn owner_ref(tp: &TrainingPipeline) -> Option<OwnerReference> {
    tp.controller_owner_ref(&())
}

/// Create-if-absent: the plan only asks when the child was absent; AlreadyExists (a watch that
/// lagged) is fine, the next observe reads the existing object and checks its owner.
async fn create_child<K>(io: &Io<'_>, ns: &str, child: &K) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(io.client.clone(), ns);
    match api.create(&PostParams::default(), child).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(ReconcileError::kube("create owned child")(e)),
    }
}

/// Deletes an owned child (its own finalizer cleans the cloud). Absent is fine.
/// Deletes the training slice or the preprocessing batch the plan released.
async fn release(io: &Io<'_>, tp: &TrainingPipeline, names: &Target, action: &Action) -> Result<()> {
    let ns = &names.id.namespace;
    if *action == Action::DeleteSlice {
        let orphan = spec::orphans_slice(&tp.spec);
        release_child::<TpuSlice>(io, ns, &names.train, orphan).await
    } else {
        let orphan = tp.spec.deletion_policy == DeletionPolicy::Orphan;
        release_child::<PreprocessBatch>(io, ns, &names.preprocess, orphan).await
    }
}

/// Releasing a child (a retry, a finished run, suspend) stops what it bills. A child made with
/// `deletionPolicy: Orphan` (the pipeline's, meant for when the pipeline itself is deleted) is
/// switched to `Delete` first: deleted as it was, its node or batch would keep running with no
/// object left to own it.
async fn release_child<K>(io: &Io<'_>, ns: &str, name: &str, orphan: bool) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    if orphan {
        let api: Api<K> = Api::namespaced(io.client.clone(), ns);
        let patch = serde_json::json!({"spec": {"deletionPolicy": "Delete"}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => {
                return Err(ReconcileError::kube(
                    "set deletionPolicy Delete on a released child",
                )(e));
            }
        }
    }
    delete_child::<K>(io, ns, name).await
}

async fn delete_child<K>(io: &Io<'_>, ns: &str, name: &str) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(io.client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ReconcileError::kube("delete owned child")(e)),
    }
}

/// Finds the attempt's job by its labels (a create that crashed before its status write) or
/// creates it.
async fn create_job(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    names: &Target,
    attempt: i32,
    record: &Record,
    reads: &Reads,
    ahead: &mut dyn WriteAhead<TrainingPipelineStatus>,
) -> Result<Did> {
    let Some(parent) = &names.vertex_parent else {
        let message = "no project: set spec.project or the operator's default project";
        return Ok(Did::just(invalid(io, message.into())));
    };
    // Find before create (a job created just before a crash carries this attempt's labels),
    // unless this pass's observe already listed every job of the pipeline.
    let existing = if reads.jobs_listed {
        None
    } else {
        list_jobs(io, names, Some(attempt)).await?.into_iter().next()
    };
    if let Some(job) = existing {
        return Ok(Did::just(Outcome::Found { name: job.name }));
    }
    let ckpt = checkpoints::current_dir(&tp.spec, &record.stages);
    let cluster = &io.settings.config.cluster_id;
    let job = match spec::custom_job(&tp.spec, &names.id, cluster, attempt, &ckpt) {
        Ok(job) => job,
        Err(msg) => return Ok(Did::just(invalid(io, msg))),
    };
    if let Some(paced) = turn(io, &names.id, parent) {
        return Ok(Did::just(paced));
    }
    submit_job(io, tp, parent, job, ahead).await
}

/// Creates the job, its create first marked unconfirmed in a status write: the job, or the
/// pipeline failed when Vertex refused the job as invalid (see [`invalid`]).
async fn submit_job(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    parent: &str,
    job: tpu_operator_gcp::aiplatform_v1::model::CustomJob,
    ahead: &mut dyn WriteAhead<TrainingPipelineStatus>,
) -> Result<Did> {
    // Write-ahead: a reply lost, or a crash before the status write, leaves a job no
    // status names and lists may show late; deletion waits for lists only then.
    let mut unconfirmed = None;
    // The stored status's marker: the plan leaves it alone, `report` clears it once a list
    // shows the job.
    let stored = tp
        .status
        .as_ref()
        .and_then(|s| s.unconfirmed_create_time.as_ref());
    if stored.is_none() {
        let started = status::time(io.clock.now());
        let mut marked = tp.status.clone().unwrap_or_default();
        marked.unconfirmed_create_time = Some(started.clone());
        ahead.write(&marked).await?;
        unconfirmed = Some(started);
    }
    let outcome = match io.gcp.vertex.create_custom_job(parent, job).await {
        Ok(job) => Outcome::Created { job: Box::new(job) },
        Err(e) if matches!(e.kind, ErrorKind::InvalidArgument) => {
            io.kept.metrics.capacity.create_failed("TrainingPipeline", &e);
            invalid(io, format!("Vertex refused the custom job: {e}"))
        }
        Err(e) => {
            // Quota, rate limit, permission: counted by reason (the error's category names it
            // too), retried with the error backoff; a refusal reaches status as PermissionDenied.
            // A rate limit also slows the project's line of Vertex creates.
            io.kept.metrics.capacity.create_failed("TrainingPipeline", &e);
            if let Some(line) = Line::under(Group::VertexJobCreate, parent) {
                io.capacity.answered(&line, &e, io.clock.now());
            }
            return Err(ReconcileError::gcp("create Vertex custom job")(e));
        }
    };
    Ok(Did { outcome, unconfirmed })
}

/// May the job be created now? If not, the project's Vertex creates in the region are paced and
/// others are ahead (see [`crate::runtime::capacity::limiter`]): the train stage and the
/// pipeline's conditions will say its place and when its turn is due (`Some`), and nothing is
/// sent. The pipeline looks again on its active poll.
fn turn(io: &Io<'_>, id: &ObjectIdentity, parent: &str) -> Option<Outcome> {
    let line = Line::under(Group::VertexJobCreate, parent)?;
    let asker = Asker::of(id, <TrainingPipeline as Kind>::KIND);
    let at = io.clock.now();
    match io.capacity.turn(&line, asker, at) {
        Turn::Go => None,
        Turn::Wait(waiting) => Some(Outcome::Paced {
            message: waiting.message(&line),
            at,
        }),
    }
}

/// A spec the cloud cannot take: the pipeline fails with `InvalidSpec` (no retry helps).
fn invalid(io: &Io<'_>, message: String) -> Outcome {
    Outcome::Invalid {
        message,
        at: io.clock.now(),
    }
}
