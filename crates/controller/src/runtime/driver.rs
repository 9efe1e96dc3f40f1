//! The reconcile shape every kind runs in, owned once.
//!
//! A kind implements [`Reconciler`] for its custom resource: what it does on an apply pass (its
//! own observe → plan → act → status), what one deletion pass does, what its status looks like
//! stalled, and which cloud-watch wake-ups reach it. This module owns what they all repeat:
//!
//! 1. the settled-object skip (only for kinds that [`Reconciler::SETTLES`]), then each
//!    namespace's fair share of the workers ([`crate::runtime::fair_share`]),
//! 2. the reconcile metrics (count, duration; failures are counted by [`error_policy`]),
//! 3. the guards (the cached object decodes, it has a namespace),
//! 4. the deletion pass before the finalizer: kube's `finalizer` helper drops the finalizer as
//!    soon as its cleanup returns, but a kind's cleanup takes several passes (cancel, wait, delete),
//!    so those passes run here and the helper sees the object only once nothing is left,
//! 5. the finalizer itself (added on the first pass, removed after the last cleanup),
//! 6. clearing the object's backoff after a successful pass, and [`error_policy`] after a failed one,
//! 7. the one status write ([`write_status`]: server-side apply when it changed, then the Events of
//!    the transition) and the one stall writer ([`stall`]),
//! 8. the controller itself ([`run`]): the compact watch cache, the cloud-watch wake-ups, the
//!    tenancy-policy re-evaluation, graceful shutdown.
//!
//! The shape follows kube-rs's controller-rs (finalizer → apply / cleanup); it is no more general
//! than the three kinds need.

use std::{fmt::Debug, future::Future, sync::Arc};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api, Resource, ResourceExt,
    core::NamespaceResourceScope,
    runtime::{
        Controller,
        controller::{Action, Config},
        finalizer::{Event, finalizer},
    },
};
use serde::{Serialize, de::DeserializeOwned};
use tpu_operator_api::{
    FINALIZER,
    conditions::{find_condition, reasons, types},
};

use crate::{
    Shutdown,
    runtime::{
        cloud_watch::CloudWatch,
        context::Context,
        error::{self, ReconcileError, Result},
        fair_share::FairShare,
        refused,
        report::{self, Transition},
        retry,
        watched::{self, Cached, cached_ref},
    },
};

/// One custom resource's reconcile: the parts that differ between kinds.
pub trait Reconciler:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind's name in metrics and logs.
    const KIND: &'static str;
    /// The only writer of the kind's status.
    const FIELD_MANAGER: &'static str;
    /// Whether a pass that finds the object exactly as the last one left it may be skipped (see
    /// [`crate::runtime::settled`]): only for kinds whose reconcile depends on nothing but the
    /// object and the cloud.
    const SETTLES: bool;

    type Status: Clone + Default + PartialEq + Serialize + Send + Sync;

    fn status(&self) -> Option<&Self::Status>;

    /// Further watches that wake an object (its owned children); none by default.
    fn watches(controller: Controller<Cached<Self>>, _ctx: &Context) -> Controller<Cached<Self>> {
        controller
    }

    /// One pass over an object that is not being deleted: observe → plan → act → status.
    fn apply(&self, ctx: &Context) -> impl Future<Output = Result<Action>> + Send;

    /// One deletion pass: `Some(requeue)` while cloud objects remain, `None` once the finalizer
    /// may go.
    fn cleanup(&self, ctx: &Context) -> impl Future<Output = Result<Option<Action>>> + Send;

    /// Called once the finalizer is being removed (every cloud object is gone or orphaned).
    fn cleaned_up(&self, _ctx: &Context) -> impl Future<Output = Result<Action>> + Send {
        async { Ok(Action::await_change()) }
    }

    /// The object is being deleted (with or without our finalizer): drops what the process
    /// remembers about it besides the settled cache and backoff.
    fn forget(&self, _ctx: &Context) {}

    /// The Events a status change publishes, after its write.
    fn transitions(old: &Self::Status, new: &Self::Status) -> Vec<Transition>;

    /// `old` as a stall says it: `Stalled` for `reason` with `message` at `now`, nothing else
    /// changed but what the kind's phase must show (`retry`: the refusal is looked at again, e.g.
    /// a quota that may free up).
    fn stalled(
        &self,
        old: &Self::Status,
        reason: &'static str,
        message: &str,
        retry: bool,
        now: DateTime<Utc>,
    ) -> Self::Status;

    /// `old` after a pass failed on a cloud call Google refused ([`refused`]): `Stalled`, reason
    /// `PermissionDenied`, with `message`. By default as [`Reconciler::stalled`] says a refusal
    /// looked at again; a kind whose phase says what runs keeps it.
    fn refused(&self, old: &Self::Status, message: &str, now: DateTime<Utc>) -> Self::Status {
        self.stalled(old, reasons::PERMISSION_DENIED, message, true, now)
    }

    /// The kstatus conditions of `status`.
    fn conditions(status: &Self::Status) -> &[Condition];

    /// Whether `status` already says `Stalled=True`, reason `PermissionDenied`.
    fn refusal_reported(status: &Self::Status) -> bool {
        find_condition(Self::conditions(status), types::STALLED)
            .is_some_and(|c| c.status == "True" && c.reason == reasons::PERMISSION_DENIED)
    }
}

/// Runs the controller of `K` until `shutdown` fires.
pub async fn run<K: Reconciler>(ctx: Arc<Context>, shutdown: Shutdown) {
    // Judge nothing before the policies are known (an unlisted policy reads as none).
    ctx.policies.ready().await;
    CloudWatch::start(&ctx, shutdown.clone());
    K::watches(watched::controller::<K>(&ctx), &ctx)
        .with_config(Config::default().concurrency(ctx.config.concurrency))
        .reconcile_on(ctx.cloud_watch.triggers::<K>().map(cached_ref))
        .reconcile_all_on(ctx.policies.changes())
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(kind = K::KIND, error = %err, "reconcile did not run");
            }
        })
        .await;
}

/// One reconcile of `K`: the shape described in the module docs.
#[tracing::instrument(skip(cached, ctx), fields(kind = K::KIND, namespace = cached.namespace(), name = cached.name_any()))]
pub async fn reconcile<K: Reconciler>(cached: Arc<Cached<K>>, ctx: Arc<Context>) -> Result<Action> {
    if let Some(wait) = ctx.settled.predates_own_write(cached.as_ref()) {
        return Ok(wait);
    }
    if K::SETTLES
        && let Some(wait) = ctx.settled.skip(cached.as_ref())
    {
        return Ok(wait);
    }
    // Not before the skips above: they cost nothing and free their worker at once.
    let namespace = cached.namespace();
    let Some(_slot) = ctx
        .fair_share
        .enter(K::KIND, namespace.as_deref().unwrap_or_default())
    else {
        return Ok(Action::requeue(FairShare::wait()));
    };
    let _timer = ctx.metrics.start(K::KIND);
    let obj = Arc::new(cached.decode().map_err(ReconcileError::Decode)?);
    let ns = obj
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))?;
    let deleting = obj.meta().deletion_timestamp.is_some();
    if deleting {
        obj.forget(&ctx);
    }
    if deleting
        && obj.finalizers().iter().any(|f| f == FINALIZER)
        && let Some(wait) = reported(&ctx, obj.as_ref(), obj.cleanup(&ctx).await).await?
    {
        retry::on_success(obj.as_ref(), &ctx);
        return Ok(wait);
    }
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let action = finalizer(&api, FINALIZER, obj.clone(), |event| async {
        match event {
            Event::Apply(obj) => reported(&ctx, obj.as_ref(), obj.apply(&ctx).await).await,
            Event::Cleanup(obj) => {
                ctx.settled.gone(obj.as_ref());
                obj.cleaned_up(&ctx).await
            }
        }
    })
    .await;
    let action = match action {
        Err(err) if error::already_gone(&err) => Action::await_change(),
        other => other.map_err(ReconcileError::from)?,
    };
    retry::on_success(obj.as_ref(), &ctx);
    Ok(action)
}

/// A pass's result, after writing a refused cloud call into the object's status
/// ([`refused`]): read or write, on every kind, the refusal reaches status (best effort: a status
/// write that fails here is logged, and the error is returned either way for the backoff).
async fn reported<K: Reconciler, T>(ctx: &Context, obj: &K, result: Result<T>) -> Result<T> {
    let Err(ReconcileError::Gcp { action, source }) = &result else {
        return result;
    };
    if !refused::is_refusal(source) {
        return result;
    }
    let old = obj.status().cloned().unwrap_or_default();
    let message = refused::message(action, source);
    let new = obj.refused(&old, &message, ctx.clock.now());
    // Already reported (by this wrapper or by the kind itself, e.g. a refused delete): a second
    // writer with other words would wake the object with every write and retry the refused call
    // at once, again and again, instead of after the backoff.
    if K::refusal_reported(&old) {
        return result;
    }
    let quiet = K::transitions(&old, &new).is_empty();
    match write_status(ctx, obj, obj.status(), &new).await {
        Ok(Some(_)) if quiet => {
            report::publish_event(ctx, obj, true, reasons::PERMISSION_DENIED, message).await;
        }
        Ok(_) => {}
        Err(err) => tracing::debug!(error = %err, "could not report the refused call in status"),
    }
    result
}

/// After a failed reconcile: per-object backoff, by the error's classification.
pub fn error_policy<K: Reconciler>(obj: Arc<Cached<K>>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    retry::error_policy(K::KIND, obj.as_ref(), err, &ctx)
}

/// The one status write: `new` by server-side apply when it differs from `old`, conditional on
/// the version of `obj` the reconcile read, then the Events of the transition. Returns the
/// version written, `None` when nothing changed.
pub async fn write_status<K: Reconciler>(
    ctx: &Context,
    obj: &K,
    old: Option<&K::Status>,
    new: &K::Status,
) -> Result<Option<String>> {
    write_status_on(ctx, obj, obj.resource_version().as_deref(), old, new).await
}

/// [`write_status`] conditional on `base`: for a second write in one pass (a write-ahead marker,
/// then the outcome), the version the first one returned. Conditional on the version read, it
/// would be refused with 409 by the pass's own first write.
pub async fn write_status_on<K: Reconciler>(
    ctx: &Context,
    obj: &K,
    base: Option<&str>,
    old: Option<&K::Status>,
    new: &K::Status,
) -> Result<Option<String>> {
    if old == Some(new) {
        return Ok(None);
    }
    let written = report::apply_status(ctx, obj, base, K::FIELD_MANAGER, new).await?;
    let version = written.resource_version();
    ctx.settled.replaced(obj, base, version.as_deref());
    if K::SETTLES {
        ctx.settled.wrote(obj, version.clone());
    }
    let unset = K::Status::default();
    for t in K::transitions(old.unwrap_or(&unset), new) {
        report::publish(ctx, obj, t).await;
    }
    Ok(version)
}

/// Stalls `obj` with a reason, no cloud call made: a tenancy-policy refusal, or a spec the
/// operator cannot act on. The caller decides when to look again.
pub async fn stall<K: Reconciler>(
    ctx: &Context,
    obj: &K,
    reason: &'static str,
    message: &str,
    retry: bool,
) -> Result<()> {
    let old = obj.status().cloned().unwrap_or_default();
    let new = obj.stalled(&old, reason, message, retry, ctx.clock.now());
    write_status(ctx, obj, Some(&old), &new).await?;
    Ok(())
}
