//! The PreprocessBatch controller: one Dataproc Serverless batch per attempt.
//!
//! A reconcile is: deletion guard → finalizer → observe (the current attempt's batch by its
//! deterministic name, its output once it succeeded) → plan (pure) → at most one Dataproc call →
//! status by server-side apply, written right after the call. The batch's create operation stays
//! open for the whole Spark run, so progress is read from the batch itself, never by waiting on
//! the operation.
//!
//! Files: [`observe`], [`plan`], [`act`], [`status`] (+ [`events`], [`cost`]), [`spec`] (spec →
//! `Batch` request).

pub mod act;
pub mod cost;
pub mod events;
pub mod observe;
pub mod plan;
pub mod spec;
pub mod status;

use std::sync::Arc;

use kube::{ResourceExt, runtime::controller::Action};
use tpu_operator_api::{
    common::DeletionPolicy,
    conditions::reasons,
    naming::ObjectIdentity,
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase, PreprocessBatchStatus},
};

use tpu_operator_gcp::dataproc_v1::model::{Batch, batch::State as BatchState};

use self::{
    observe::Target,
    plan::{CleanupStep, Plan, Requeue},
};
use crate::{
    Shutdown,
    governance::tenancy,
    runtime::{
        cloud_watch::{Listable, Owner},
        context::Context,
        driver::{self, Reconciler},
        error::{ReconcileError, Result},
        report::{self, Transition},
    },
};

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    driver::run::<PreprocessBatch>(ctx, shutdown).await;
}

impl Reconciler for PreprocessBatch {
    const KIND: &'static str = "PreprocessBatch";
    const FIELD_MANAGER: &'static str = status::FIELD_MANAGER;
    const SETTLES: bool = true;
    type Status = PreprocessBatchStatus;

    fn conditions(
        status: &PreprocessBatchStatus,
    ) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
        &status.conditions
    }

    fn status(&self) -> Option<&PreprocessBatchStatus> {
        self.status.as_ref()
    }

    async fn apply(&self, ctx: &Context) -> Result<Action> {
        apply(self, ctx).await
    }

    async fn cleanup(&self, ctx: &Context) -> Result<Option<Action>> {
        cleanup(self, ctx).await
    }

    async fn cleaned_up(&self, ctx: &Context) -> Result<Action> {
        cleaned_up(self, ctx).await
    }

    fn transitions(old: &PreprocessBatchStatus, new: &PreprocessBatchStatus) -> Vec<Transition> {
        events::transitions(old, new)
    }

    fn stalled(
        &self,
        old: &PreprocessBatchStatus,
        reason: &'static str,
        message: &str,
        _retry: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> PreprocessBatchStatus {
        status::stalled(old, self.metadata.generation, reason, message, now)
    }
}

/// The object's identity and Dataproc location; `None` when no project is known. The error names
/// the missing metadata field.
fn target(obj: &PreprocessBatch, ctx: &Context) -> std::result::Result<Option<Target>, &'static str> {
    let identity = ObjectIdentity::new(
        obj.namespace().ok_or("namespace")?,
        obj.name_any(),
        obj.uid().ok_or("uid")?,
    );
    Ok(ctx
        .project_for(&identity.namespace, obj.spec.project.as_deref())
        .map(|project| Target {
            identity,
            parent: format!("projects/{project}/locations/{}", obj.spec.region),
        }))
}

async fn apply(obj: &PreprocessBatch, ctx: &Context) -> Result<Action> {
    let now = ctx.clock.now();
    let Some(target) = target(obj, ctx).map_err(ReconcileError::MissingMetadata)? else {
        write(ctx, obj, status::no_project(obj, now)).await?;
        return Ok(Requeue::Stable.action(&ctx.config));
    };
    let old = obj.status.clone().unwrap_or_default();
    // Tenancy policy (project, region, service account, network), before the first cloud read
    // and before every submit.
    let project = target.parent.split('/').nth(1).unwrap_or_default();
    let request = tenancy::Request {
        orphan: tenancy::request::orphans(obj.spec.deletion_policy),
        ..tenancy::request::batch(project, &obj.spec.region, &obj.spec.batch)
    };
    let denied = tenancy::precheck(ctx, &target.identity.namespace, std::slice::from_ref(&request)).err();
    if let Some(denial) = denied.as_ref().filter(|_| old.attempts == 0) {
        record_spend(ctx, obj, &old);
        driver::stall(ctx, obj, reasons::POLICY_DENIED, &denial.message, denial.retry).await?;
        return Ok(Requeue::Stable.action(&ctx.config));
    }
    let observed = observe::observe(ctx, &target, &obj.spec, &old).await?;
    // The batch this pass saw (or just submitted), for the cloud watch.
    let mut seen = match &observed.batch {
        observe::BatchLookup::Found(b) => Some((b.name.clone(), b.state.clone())),
        _ => None,
    };
    let (new, next) = match plan::plan(&obj.spec.batch, &old, &observed, now) {
        Plan::Keep(next) => (status::unchanged(obj), next),
        Plan::Report(report) => (status::from_report(obj, &observed, &report, now), report.requeue),
        Plan::Submit { .. } if let Some(denial) = &denied => {
            let stalled = obj.stalled(&old, reasons::POLICY_DENIED, &denial.message, denial.retry, now);
            (stalled, Requeue::Stable)
        }
        Plan::Submit {
            attempt,
            after_failure,
        } => {
            let outcome = act::submit(ctx, &target, &obj.spec, attempt).await?;
            seen = Some((target.batch_name(attempt), BatchState::Pending));
            let next = match &outcome {
                act::SubmitOutcome::Refused { .. } => Requeue::Stable,
                act::SubmitOutcome::Created { .. } | act::SubmitOutcome::Adopted { .. } => Requeue::Active,
            };
            (
                status::after_submit(obj, &outcome, after_failure.as_deref(), now),
                next,
            )
        }
    };
    write(ctx, obj, new).await?;
    let wait = match (next, seen) {
        (Requeue::Active, Some((name, state))) if Batch::lists(&state) => {
            ctx.cloud_watch.watch::<Batch>(ctx, &name, &state, Owner::of(obj))
        }
        (next, seen) => {
            if let Some((name, _)) = seen {
                ctx.cloud_watch.unwatch::<Batch>(&name);
            }
            next.after(&ctx.config)
        }
    };
    Ok(ctx.settled.settle(obj, wait))
}

/// One deletion pass. `None` once nothing is left to clean up (or the policy is Orphan).
async fn cleanup(obj: &PreprocessBatch, ctx: &Context) -> Result<Option<Action>> {
    let Some(target) = target(obj, ctx).map_err(ReconcileError::MissingMetadata)? else {
        // Without a project nothing was ever created.
        return Ok(None);
    };
    let policy = tenancy::deletion_policy(ctx, &target.identity.namespace, obj.spec.deletion_policy);
    if policy == DeletionPolicy::Orphan {
        return Ok(None);
    }
    if let Some(batch) = only_batch(obj) {
        // Its one batch finished and status named it after seeing it finish, so no other batch
        // of this object can exist: delete it by name, without listing by label first (issue 25).
        act::delete(ctx, &batch).await?;
        return Ok(None);
    }
    let batches = observe::observe_cleanup(ctx, &target).await?;
    let now = ctx.clock.now();
    let (phase, reason, message) = match plan::plan_cleanup(policy, &batches) {
        CleanupStep::Done | CleanupStep::Orphan => return Ok(None),
        CleanupStep::Cancel { batch, operation } => {
            act::cancel(ctx, &operation).await?;
            (
                PreprocessBatchPhase::Cancelling,
                reasons::CANCELLING,
                format!("cancelling batch {batch}"),
            )
        }
        CleanupStep::Delete { batch } => {
            act::delete(ctx, &batch).await?;
            // Dataproc deletes a batch synchronously, and the listing found every batch of this
            // object (by its UID label; nothing creates more once it is being deleted): when
            // that was the last one the finalizer can go now, without a second listing to see
            // an empty result.
            if batches.len() == 1 {
                return Ok(None);
            }
            (
                PreprocessBatchPhase::Deleting,
                reasons::DELETING,
                format!("deleted batch {batch}"),
            )
        }
        CleanupStep::Wait { message } => (PreprocessBatchPhase::Cancelling, reasons::CANCELLING, message),
    };
    write(ctx, obj, status::cleaning_up(obj, phase, reason, &message, now)).await?;
    Ok(Some(Requeue::Active.action(&ctx.config)))
}

/// The batch a finished single-attempt object ran, when that is provably its only batch: a
/// terminal phase is written only after the batch was seen finished, and a second attempt is
/// created only from `Retrying`.
fn only_batch(obj: &PreprocessBatch) -> Option<String> {
    let status = obj.status.as_ref()?;
    let finished = matches!(
        status.phase,
        PreprocessBatchPhase::Succeeded | PreprocessBatchPhase::Failed | PreprocessBatchPhase::Cancelled
    );
    (finished && status.attempts == 1 && status.pending_operation.is_none())
        .then(|| status.batch_name.clone())
        .flatten()
}

/// Called by the finalizer helper once every batch is gone (or orphaned).
async fn cleaned_up(obj: &PreprocessBatch, ctx: &Context) -> Result<Action> {
    let namespace = obj.metadata.namespace.as_deref().unwrap_or_default();
    let note = match tenancy::deletion_policy(ctx, namespace, obj.spec.deletion_policy) {
        DeletionPolicy::Delete => "all Dataproc batches of this object are deleted".to_string(),
        DeletionPolicy::Orphan => format!(
            "deletionPolicy Orphan: Dataproc batches left in place ({})",
            obj.status
                .as_ref()
                .and_then(|s| s.batch_name.clone())
                .unwrap_or_else(|| "none created".into())
        ),
    };
    report::publish_event(ctx, obj, false, "Deleted", note).await;
    Ok(Action::await_change())
}

/// Writes `new` if it differs from the stored status, then publishes the Events of the change.
async fn write(ctx: &Context, obj: &PreprocessBatch, new: PreprocessBatchStatus) -> Result<()> {
    record_spend(ctx, obj, &new);
    driver::write_status(ctx, obj, Some(&obj.status.clone().unwrap_or_default()), &new).await?;
    Ok(())
}

/// The object's estimated spend, for the per-namespace spend metric (recorded on every pass, the
/// status written or not).
fn record_spend(ctx: &Context, obj: &PreprocessBatch, status: &PreprocessBatchStatus) {
    if let (Some(ns), Some(uid)) = (obj.namespace(), obj.uid()) {
        ctx.metrics
            .record_spend(&ns, &uid, status.estimated_cost.as_ref());
    }
}
