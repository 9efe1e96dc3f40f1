//! The TrainingPipeline controller: optional preprocessing (an owned `PreprocessBatch`), then
//! training as a Vertex AI custom job or on an owned `TpuSlice`, then the model in Cloud Storage.
//!
//! Files: [`observe`], [`plan`] (pure), [`act`] (at most one mutating call), [`status`] (the
//! pass's order: [`crate::reconcile::pass`]). Cleanup cancels and deletes the pipeline's
//! Vertex jobs (found by UID label); owned children go through ownerReference garbage collection
//! and their own finalizers clean the cloud.

mod act;
pub mod checkpoints;
mod cleanup;
mod done;
mod duplicates;
pub mod expand;
pub mod holding;
mod links;
mod observe;
pub mod plan;
pub mod policy;
mod progress;
pub mod queue;
mod report;
pub mod spec;
pub mod status;
mod time_spent;
pub mod variants;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{ResourceExt, runtime::Controller};
use tpu_operator_api::{
    DeletionPolicy,
    naming::{self, ObjectIdentity},
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::{
        RERUN_ANNOTATION, TrainingPipeline, TrainingPipelinePhase, TrainingPipelineStatus, placeholders,
    },
};
use tpu_operator_gcp::aiplatform_v1::model::{CustomJob, JobState};

use crate::{
    governance::tenancy,
    reconcile::{
        context::Context,
        driver,
        handles::{Io, Kept, Settings},
        kind::{Acted, Admission, Kind, OwnedHolder, Pass, Stop, Watches, WriteAhead},
        report::Transition,
        wait::{Wait, Watch},
    },
    runtime::{
        cloud_watch::Listable,
        config::ControllerConfig,
        error::{ReconcileError, Result},
        shutdown::Shutdown,
        watched::Cached,
    },
};

/// Target derived from the pipeline's identity.
pub struct Target {
    pub id: ObjectIdentity,
    /// The pipeline with its artifact URIs' placeholders expanded ([`placeholders`]): every step
    /// of a pass reads this, never the object as stored, so no reader sees `$(PIPELINE_NAME)`.
    pub pipeline: TrainingPipeline,
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
    fn of(tp: &TrainingPipeline, settings: Settings<'_>) -> Result<Self, &'static str> {
        let id = ObjectIdentity::new(
            tp.namespace().ok_or("namespace")?,
            tp.name_any(),
            tp.uid().ok_or("uid")?,
        );
        let project = settings.project_for(&id.namespace, tp.spec.project.as_deref());
        Ok(Target {
            pipeline: expanded(tp, &id),
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

/// `tp` with its artifact URIs expanded for its own identity.
pub fn expanded(tp: &TrainingPipeline, id: &ObjectIdentity) -> TrainingPipeline {
    let mut tp = tp.clone();
    let me = placeholders::Identity {
        name: &id.name,
        namespace: &id.namespace,
        uid: &id.uid,
    };
    tp.spec.artifacts = placeholders::expand_artifacts(&tp.spec.artifacts, me);
    tp
}

/// Runs the controller until `shutdown`: watches pipelines and the children they own.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    driver::run::<TrainingPipeline>(ctx, shutdown).await;
}

/// What a pass read. Its variant is the pass's: every hook after `observe` tells a deletion pass
/// by it.
pub enum Seen {
    /// An apply pass: the pipeline's children and jobs, and how far lists can be trusted.
    Applying {
        observed: Box<plan::Observed>,
        reads: Box<observe::Reads>,
    },
    /// A deletion pass: every Vertex job of the pipeline, and until when a list may lag.
    Deleting(cleanup::Listed),
}

pub use done::Done;

impl Kind for TrainingPipeline {
    const KIND: &'static str = "TrainingPipeline";
    const FIELD_MANAGER: &'static str = status::FIELD_MANAGER;
    /// A pipeline is also woken by its children, which leave its own `resourceVersion` as it was.
    const SETTLES: bool = false;
    /// Deletes through the hooks: each one's deletion part is [`cleanup`]'s.
    type Status = TrainingPipelineStatus;
    type Target = Target;
    type Observed = Seen;
    type Action = plan::Action;
    type Phase = TrainingPipelinePhase;
    type Details = plan::Details;
    type Done = Done;

    fn status(&self) -> Option<&TrainingPipelineStatus> {
        self.status.as_ref()
    }

    fn conditions(status: &TrainingPipelineStatus) -> &[Condition] {
        &status.conditions
    }

    /// Its children wake it, and its Kueue Workload when Kueue gates pipelines (an admission
    /// or eviction leaves the pipeline itself unchanged), and what it awaits besides
    /// (`kueue::waits`).
    fn watches(controller: Controller<Cached<Self>>, watch: &Watches<'_>) -> Controller<Cached<Self>> {
        let controller = controller
            .owns_stream(watch.metadata::<PreprocessBatch>())
            .owns_stream(watch.metadata::<TpuSlice>());
        crate::kueue::waits::watched(controller, watch)
    }

    /// A pipeline without a project fails when it would create a Vertex job (see `act`); its
    /// children name their own project.
    fn target(&self, settings: Settings<'_>) -> Result<Result<Target, Stop>> {
        let target = Target::of(self, settings).map_err(ReconcileError::MissingMetadata)?;
        Ok(Ok(target))
    }

    async fn observe(&self, io: &Io<'_>, t: &Target) -> Result<Seen> {
        if self.deleting() {
            return Ok(Seen::Deleting(cleanup::observe(io, &t.pipeline, t).await?));
        }
        let (observed, mut reads) = observe::observe(io, &t.pipeline, t).await?;
        reads.queue = queue::observe(&t.pipeline, io).await?;
        reads.budget = tenancy::rules::suspending(io.settings.policies.governing(&t.id.namespace).rules());
        Ok(Seen::Applying {
            observed: Box::new(observed),
            reads: Box::new(reads),
        })
    }

    fn plan(&self, now: DateTime<Utc>, t: &Target, seen: &Seen) -> plan::Plan {
        let old = self.status.clone().unwrap_or_default();
        let (observed, reads) = match seen {
            Seen::Applying { observed, reads } => (observed, reads),
            Seen::Deleting(listed) => return cleanup::plan(listed, &old, now),
        };
        plan::plan(&plan::Input {
            spec: &t.pipeline.spec,
            status: &old,
            observed,
            now,
            preprocess_child: &t.preprocess,
            train_child: &t.train,
            rerun: self.annotations().get(RERUN_ANNOTATION).map(String::as_str),
            queue: reads.queue.as_ref(),
            budget: reads.budget.as_ref(),
        })
    }

    /// A pipeline that has not started waits while another live pipeline writes its model or
    /// checkpoint directory ([`variants`]).
    fn contention(&self, settings: Settings<'_>, kept: Kept<'_>, t: &Target) -> Option<Stop> {
        variants::contention(settings.policies, kept, &t.pipeline)
    }

    /// Before preprocessing, everything the pipeline will create (so a pipeline whose training
    /// would be refused does not spend on preprocessing first); before training, the Vertex job
    /// or slice with the namespace's chip quota and budget.
    fn admission(&self, settings: Settings<'_>, t: &Target, decision: &plan::Plan) -> Option<Admission> {
        let project = t.project.as_deref().filter(|_| decision.action.creates())?;
        let prices = settings.prices;
        let spec = &t.pipeline.spec;
        let all = policy::pipeline(spec, project, prices);
        let counted = match decision.action {
            plan::Action::CreateJob { .. } => policy::vertex_job(spec, project, prices).into_iter().collect(),
            plan::Action::CreateSlice { .. } => all.iter().filter(|r| r.tpu.is_some()).cloned().collect(),
            _ => Vec::new(),
        };
        Some(Admission {
            checked: all,
            counted,
            // What usage lists for a pipeline: its Vertex job (a TPU VM slice is a TpuSlice of
            // its own).
            holder: OwnedHolder {
                uid: t.id.uid.clone(),
                what: format!("Vertex job of TrainingPipeline {}", t.id.name),
                holds: matches!(decision.action, plan::Action::CreateJob { .. }),
            },
        })
    }

    /// Cancels the plan's duplicate jobs, carries out its action, then checks training
    /// progress on the status as it will be; everything learned goes into [`Done`] for `report`.
    async fn act(
        &self,
        io: &Io<'_>,
        t: &Target,
        seen: &Seen,
        decision: &plan::Plan,
        ahead: &mut dyn WriteAhead<Self::Status>,
    ) -> Result<Acted<Done>> {
        let (observed, reads) = match seen {
            Seen::Applying { observed, reads } => (observed, reads),
            Seen::Deleting(_) => return Ok(cleanup::act(io, &decision.action).await),
        };
        act::cancel_jobs(io, &decision.details.cancel_jobs).await?;
        let tp = &t.pipeline;
        let record = &decision.details.record;
        let did = act::act(io, tp, t, &decision.action, record, reads, ahead).await?;
        let old = tp.status.clone().unwrap_or_default();
        let basis = report::Basis::of(tp, &old, observed);
        let new = report::acted(&basis, decision, &did, reads.list_caught_up);
        let read = reads.train.interruptions.as_ref();
        let interrupted = new.noticed_interruption(tp.status.as_ref(), read);
        let progress = progress::update(io, tp, &new, interrupted).await;
        let events = decision.details.events.iter().cloned();
        Ok(Acted {
            events: events.chain(progress.events).collect(),
            done: Done {
                action: did,
                progress: progress.found,
                next_check: progress.next_check,
            },
            failed: None,
        })
    }

    fn report(&self, _now: DateTime<Utc>, pass: &Pass<'_, Self>) -> TrainingPipelineStatus {
        let (observed, reads) = match pass.observed {
            Seen::Applying { observed, reads } => (observed, reads),
            Seen::Deleting(_) => return cleanup::report(pass.old, pass.plan),
        };
        let basis = report::Basis::of(&pass.target.pipeline, pass.old, observed);
        report::written(&basis, reads, pass.plan, pass.done)
    }

    /// While training runs, wake for the next checkpoint listing at the latest.
    fn wait(&self, config: &ControllerConfig, pass: &Pass<'_, Self>, new: &TrainingPipelineStatus) -> Wait {
        let cap = pass.done.next_check;
        let decision = pass.plan;
        let reads = match pass.observed {
            Seen::Applying { reads, .. } => reads,
            Seen::Deleting(_) => return Wait::after(cleanup::wait(config, decision)),
        };
        let current = |name: &String| Some(name) == new.custom_job_name.as_ref();
        // The job as just created, else as read.
        let job = pass.done.action.created().or(reads.job.as_ref());
        let watch = match (&decision.action, job) {
            _ if decision.verdict.requeue != plan::Requeue::Active || reads.list_lags => None,
            // The job as read or as just created: reused until a listing shows it change.
            (plan::Action::Nothing | plan::Action::CreateJob { .. }, Some(job))
                if current(&job.name) && CustomJob::lists(&job.state) =>
            {
                Some(Watch::read(job))
            }
            // Found by label after a crash: it is at least QUEUED.
            (plan::Action::CreateJob { .. }, _) => new
                .custom_job_name
                .as_deref()
                .map(|name| Watch::state::<CustomJob>(name, &JobState::Queued)),
            _ => None,
        };
        match watch {
            Some(watch) => Wait::Watch {
                watch,
                cap,
                unlisted: None,
            },
            None => {
                let after = decision.verdict.requeue.after(config);
                let after = cap.map_or(after, |cap| after.min(cap));
                Wait::poll_unwatching::<CustomJob>(after, new.custom_job_name.as_deref())
            }
        }
    }

    fn deletion_policy(&self) -> DeletionPolicy {
        self.spec.deletion_policy
    }

    /// The plan's [`plan::Action::Release`]: its deletes done, no job is left.
    fn released(&self, pass: &Pass<'_, Self>) -> bool {
        cleanup::released(pass.plan)
    }

    /// A Vertex pipeline's Kueue Workload is deleted and let go once its jobs are gone (or
    /// orphaned): the quota is free at once. A TPU VM pipeline has none (its slice has its own).
    async fn let_go(&self, io: &Io<'_>) -> Result<()> {
        if self.spec.training.vertex.is_none() {
            return Ok(());
        }
        crate::kueue::queued::release_on_delete(self, io).await
    }

    fn cleaned_up(&self, policy: DeletionPolicy) -> Option<Transition> {
        (policy == DeletionPolicy::Orphan).then(|| {
            Transition::normal(
                "Orphaned",
                "deletionPolicy Orphan: Vertex jobs and child cloud resources are left running",
            )
        })
    }

    fn forget(&self, settings: Settings<'_>, kept: Kept<'_>) {
        progress::forget(kept.metrics, self);
        crate::kueue::queued::forget(self, settings, kept);
        // Being deleted, it no longer holds its directories.
        if let Some(uid) = self.uid() {
            variants::release(kept, &uid);
        }
    }

    fn transitions(old: &TrainingPipelineStatus, new: &TrainingPipelineStatus) -> Vec<Transition> {
        status::transitions(old, new)
    }

    fn waiting(st: &TrainingPipelineStatus) -> bool {
        st.phase == TrainingPipelinePhase::Waiting
    }

    fn stalled(
        &self,
        old: &TrainingPipelineStatus,
        reason: &'static str,
        message: &str,
        retry: bool,
        now: DateTime<Utc>,
    ) -> TrainingPipelineStatus {
        status::stalled(old, self.metadata.generation, reason, message, retry, now)
    }
}
