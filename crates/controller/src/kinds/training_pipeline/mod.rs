//! The TrainingPipeline controller: optional preprocessing (an owned `PreprocessBatch`), then
//! training as a Vertex AI custom job or on an owned `TpuSlice`, then the model in Cloud Storage.
//!
//! Reconcile: finalizer → observe ([`observe`]) → plan ([`plan`], pure) → act ([`act`], at most one
//! mutating call) → status ([`status`]) and events. Cleanup cancels and deletes the pipeline's
//! Vertex jobs (found by UID label); owned children go through ownerReference garbage collection
//! and their own finalizers clean the cloud.

mod act;
pub mod checkpoints;
mod cleanup;
mod duplicates;
pub mod expand;
mod observe;
pub mod plan;
mod progress;
pub mod spec;
pub mod status;

use std::{sync::Arc, time::Duration};

use kube::{
    ResourceExt,
    runtime::{Controller, controller::Action},
};
use tpu_operator_api::{
    naming::{self, ObjectIdentity},
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::{TrainingPipeline, TrainingPipelineStatus},
};

use tpu_operator_gcp::aiplatform_v1::model::{CustomJob, JobState};

use crate::{
    Shutdown,
    governance::tenancy,
    runtime::{
        cloud_watch::{Listable, Owner},
        context::Context,
        driver::{self, Reconciler},
        error::{ReconcileError, Result},
        report::{self, Transition},
        watched::{self, Cached},
    },
};

/// Target derived from the pipeline's identity.
pub struct Target {
    pub id: ObjectIdentity,
    /// `<name>-preprocess`.
    pub preprocess: String,
    /// `<name>-train`.
    pub train: String,
    pub project: Option<String>,
    /// `projects/<p>/locations/<region>`, when a project is known.
    pub vertex_parent: Option<String>,
}

impl Target {
    /// `Err` names the missing metadata field.
    fn of(tp: &TrainingPipeline, ctx: &Context) -> Result<Self, &'static str> {
        let id = ObjectIdentity::new(
            tp.namespace().ok_or("namespace")?,
            tp.name_any(),
            tp.uid().ok_or("uid")?,
        );
        let project = ctx.project_for(&id.namespace, tp.spec.project.as_deref());
        Ok(Target {
            preprocess: naming::child_name(&id, "preprocess"),
            train: naming::child_name(&id, "train"),
            vertex_parent: project
                .as_ref()
                .map(|p| format!("projects/{p}/locations/{}", tp.spec.region)),
            project,
            id,
        })
    }
}

/// Runs the controller until `shutdown`: watches pipelines and the children they own.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    driver::run::<TrainingPipeline>(ctx, shutdown).await;
}

impl Reconciler for TrainingPipeline {
    const KIND: &'static str = "TrainingPipeline";
    const FIELD_MANAGER: &'static str = status::FIELD_MANAGER;
    /// A pipeline is also woken by its children, which leave its own `resourceVersion` as it was.
    const SETTLES: bool = false;
    type Status = TrainingPipelineStatus;

    fn conditions(
        status: &TrainingPipelineStatus,
    ) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
        &status.conditions
    }

    fn status(&self) -> Option<&TrainingPipelineStatus> {
        self.status.as_ref()
    }

    fn watches(controller: Controller<Cached<Self>>, ctx: &Context) -> Controller<Cached<Self>> {
        controller
            .owns_stream(watched::metadata::<PreprocessBatch>(ctx))
            .owns_stream(watched::metadata::<TpuSlice>(ctx))
    }

    async fn apply(&self, ctx: &Context) -> Result<Action> {
        apply(self, ctx).await
    }

    async fn cleanup(&self, ctx: &Context) -> Result<Option<Action>> {
        cleanup::cleanup(self, ctx).await
    }

    fn forget(&self, ctx: &Context) {
        progress::forget(ctx, self);
    }

    fn transitions(old: &TrainingPipelineStatus, new: &TrainingPipelineStatus) -> Vec<Transition> {
        status::transitions(old, new)
    }

    fn stalled(
        &self,
        old: &TrainingPipelineStatus,
        reason: &'static str,
        message: &str,
        _retry: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> TrainingPipelineStatus {
        status::stalled(old, self.metadata.generation, reason, message, now)
    }
}

async fn apply(tp: &TrainingPipeline, ctx: &Context) -> Result<Action> {
    let names = Target::of(tp, ctx).map_err(ReconcileError::MissingMetadata)?;
    let (observed, mut reads) = observe::observe(ctx, tp, &names).await?;
    let old = tp.status.clone().unwrap_or_default();
    let decision = plan::plan(&plan::Input {
        spec: &tp.spec,
        status: &old,
        generation: tp.metadata.generation,
        observed: &observed,
        now: ctx.clock.now(),
        preprocess_child: &names.preprocess,
        train_child: &names.train,
        rerun: tp
            .annotations()
            .get(tpu_operator_api::training_pipeline::RERUN_ANNOTATION)
            .map(String::as_str),
    });
    // Tenancy policy before anything billable is created; the lock is held until the create is
    // in status, so concurrent admissions in the namespace see each other.
    let _admission = if decision.action.creates() {
        let Ok(guard) = ctx.admission.try_enter(&ctx.policies, &names.id.namespace) else {
            return Ok(Action::requeue(tenancy::Busy::wait()));
        };
        if let Some(denial) = admit(ctx, tp, &names, &decision.action).await? {
            return deny(ctx, tp, denial).await;
        }
        guard
    } else {
        None
    };
    let mut new = decision.status;
    act::cancel_jobs(ctx, &decision.cancel_jobs).await?;
    act::act(ctx, tp, &names, &decision.action, &mut new, &mut reads).await?;
    if reads.list_caught_up {
        new.unconfirmed_create_time = None;
    }
    let progress = progress::update(ctx, tp, &mut new).await;
    let base = reads.marker_version.clone().or_else(|| tp.resource_version());
    status::write(ctx, tp, base.as_deref(), &new).await?;
    for e in decision.events.into_iter().chain(progress.events) {
        report::publish(ctx, tp, e).await;
    }
    // While training runs, wake for the next checkpoint listing at the latest.
    let cap = |wait: Duration| progress.next_check.map_or(wait, |next| wait.min(next));
    if decision.requeue == plan::Requeue::Active && !reads.list_lags {
        let owner = Owner::of(tp);
        let current = |name: &String| Some(name) == new.custom_job_name.as_ref();
        let wait = match (&decision.action, reads.job) {
            // The job as read or as just created: reused until a listing shows it change.
            (plan::Action::Nothing | plan::Action::CreateJob { .. }, Some(job))
                if current(&job.name) && CustomJob::lists(&job.state) =>
            {
                Some(ctx.cloud_watch.watch_read(ctx, &job, owner))
            }
            // Found by label after a crash: it is at least QUEUED.
            (plan::Action::CreateJob { .. }, _) => new.custom_job_name.as_deref().map(|name| {
                ctx.cloud_watch
                    .watch::<CustomJob>(ctx, name, &JobState::Queued, owner)
            }),
            _ => None,
        };
        if let Some(wait) = wait {
            return Ok(Action::requeue(cap(wait)));
        }
    }
    if let Some(name) = &new.custom_job_name {
        ctx.cloud_watch.unwatch::<CustomJob>(name);
    }
    Ok(Action::requeue(cap(decision.requeue.after(&ctx.config))))
}

/// Checks what `action` would create against the namespace's tenancy policy: before
/// preprocessing, everything the pipeline will create (so a pipeline whose training would be
/// refused does not spend on preprocessing first); before training, the Vertex job or slice with
/// the namespace's chip quota and budget.
async fn admit(
    ctx: &Context,
    tp: &TrainingPipeline,
    names: &Target,
    action: &plan::Action,
) -> Result<Option<tenancy::Denial>> {
    use tenancy::request;
    let Some(project) = names.project.as_deref() else {
        return Ok(None);
    };
    let ns = names.id.namespace.as_str();
    let all = request::pipeline(&tp.spec, project, &ctx.prices);
    if let Err(denial) = tenancy::precheck(ctx, ns, &all) {
        return Ok(Some(denial));
    }
    let training: Vec<_> = match action {
        plan::Action::CreateJob { .. } => request::vertex_job(&tp.spec, project, &ctx.prices)
            .into_iter()
            .collect(),
        plan::Action::CreateSlice { .. } => all.into_iter().filter(|r| r.tpu.is_some()).collect(),
        _ => Vec::new(),
    };
    if training.is_empty() {
        return Ok(None);
    }
    // What usage lists for a pipeline: its Vertex job (a TPU VM slice is a TpuSlice of its own).
    let what = format!("Vertex job of TrainingPipeline {}", names.id.name);
    let holder = tenancy::Holder {
        uid: &names.id.uid,
        what: &what,
        holds: matches!(action, plan::Action::CreateJob { .. }),
    };
    Ok(tenancy::admit(ctx, ns, &training, &holder).await?.err())
}

/// Reports a tenancy refusal on the pipeline: `Stalled` reason `PolicyDenied`, nothing created,
/// the rest of the status as it was. Quota and budget refusals are looked at again.
async fn deny(ctx: &Context, tp: &TrainingPipeline, denial: tenancy::Denial) -> Result<Action> {
    use tpu_operator_api::conditions::reasons;
    driver::stall(ctx, tp, reasons::POLICY_DENIED, &denial.message, denial.retry).await?;
    let conditions = tp.status.as_ref().map_or(&[][..], |s| &s.conditions);
    let wait = tenancy::refusal_wait(&ctx.config, &denial, conditions, ctx.clock.now());
    Ok(Action::requeue(wait))
}
