//! The controller every kind runs in, owned once: what surrounds a pass.
//!
//! A kind implements [`Kind`]; the pass itself is [`pass::apply`] (and [`deletion::cleanup`]).
//! This module owns what surrounds it:
//!
//! 1. the settled-object skip (only for kinds that [`Kind::SETTLES`]), then each
//!    namespace's fair share of the workers ([`crate::runtime::fair_share`]),
//! 2. the reconcile metrics (count, duration; failures are counted by [`error_policy`]),
//! 3. the guards (the object has a namespace, and decodes from the cache or, if the cache could
//!    not keep it whole, is read from the API server, a few such large objects at a time),
//! 4. the deletion pass before the finalizer: kube's `finalizer` helper drops the finalizer as
//!    soon as its cleanup returns, but a kind's cleanup takes several passes (cancel, wait, delete),
//!    so those passes run here and the helper sees the object only once nothing is left,
//! 5. the finalizer itself (added on the first pass, removed after the last cleanup),
//! 6. clearing the object's backoff after a successful pass, and [`error_policy`] after a failed one,
//! 7. a refused cloud call reported in status ([`status::reported`]),
//! 8. the controller itself ([`run`]): the compact watch cache, the cloud-watch wake-ups, the
//!    fair share's wake of the objects a freed worker is for, the tenancy-policy re-evaluation,
//!    graceful shutdown.
//!
//! The shape follows kube-rs's controller-rs (finalizer → apply / cleanup); it is no more general
//! than the three kinds need.

use std::sync::Arc;

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{
        controller::{Action, Config},
        finalizer::{Event, finalizer},
    },
};
use tpu_operator_api::FINALIZER;

use super::{
    context::Context,
    deletion,
    kind::{Kind, Watches},
    pass, retry,
    status::reported,
};
use crate::runtime::{
    capacity::turns::turns,
    cloud_watch::{CloudWatch, Owner},
    error::{self, ReconcileError, Result},
    fair_share::FairShare,
    shutdown::Shutdown,
    stalled_on::StalledOn,
    watched::{self, Cached, cached_ref},
};

/// Runs the controller of `K` until `shutdown` fires.
pub async fn run<K: Kind>(ctx: Arc<Context>, shutdown: Shutdown) {
    // Judge nothing before the policies are known (an unlisted policy reads as none).
    ctx.tenancy.policies.ready().await;
    CloudWatch::start(&ctx.cloud_watch, &ctx.config, shutdown.clone());
    StalledOn::listen(&ctx.stalled_on, ctx.gcp.credentials_recoveries());
    let namespace = ctx.config.namespace.as_deref();
    let watches = Watches {
        client: &ctx.client,
        namespace,
        kueue: ctx.config.kueue,
        shared: &ctx.shared,
    };
    let controller = watched::controller::<K>(&ctx.client, namespace);
    // A pass may look at the other objects of its kind (a pipeline at the live pipelines that
    // write where it would): this cache, not a list per pass.
    ctx.shared.set(controller.store());
    K::watches(controller, &watches)
        .with_config(Config::default().concurrency(ctx.config.concurrency))
        .reconcile_on(ctx.cloud_watch.triggers::<K>().map(cached_ref))
        .reconcile_on(ctx.fair_share.wakes::<K>(K::KIND).map(cached_ref))
        .reconcile_on(
            turns::<K>(
                ctx.capacity.clone(),
                K::KIND,
                ctx.clock.clone(),
                ctx.settled.clone(),
                ctx.config.poll_active,
            )
            .map(cached_ref),
        )
        .reconcile_all_on(ctx.tenancy.policies.changes())
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
pub async fn reconcile<K: Kind>(cached: Arc<Cached<K>>, ctx: Arc<Context>) -> Result<Action> {
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
    let uid = cached.uid().unwrap_or_default();
    let salt = ctx.clock.now().timestamp_millis();
    let name = cached.name_any();
    let _slot = match ctx.fair_share.enter(
        K::KIND,
        namespace.as_deref().unwrap_or_default(),
        &uid,
        &name,
        salt,
    ) {
        Ok(slot) => slot,
        Err(wait) => return Ok(Action::requeue(wait)),
    };
    let _large = if cached.is_large() {
        let Some(permit) = ctx.fair_share.enter_large() else {
            return Ok(soon(&cached, &ctx));
        };
        Some(permit)
    } else {
        None
    };
    let _timer = ctx.metrics.start(K::KIND);
    let ns = cached
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(obj) = whole(&cached, &api).await? else {
        // Deleted since the watch saw it: the watch's delete event ends it.
        return Ok(Action::await_change());
    };
    let obj = Arc::new(obj);
    let deleting = obj.deleting();
    if deleting {
        obj.forget(ctx.settings(), ctx.kept());
    }
    if deleting
        && obj.finalizers().iter().any(|f| f == FINALIZER)
        && let Some(wait) = reported(&ctx, obj.as_ref(), deletion::cleanup(obj.as_ref(), &ctx).await).await?
    {
        retry::on_success(obj.as_ref(), &ctx);
        return Ok(wait);
    }
    let action = finalized(&api, obj.clone(), &ctx).await?;
    retry::on_success(obj.as_ref(), &ctx);
    Ok(action)
}

/// The finalizer step (items 5 and 7 of the module docs): the apply pass, its refused cloud call
/// reported in status, under kube's `finalizer` helper, which adds the finalizer on the first
/// pass and, once the deletion passes left nothing, forgets the object and drops the finalizer.
/// An object gone meanwhile waits for its delete event.
async fn finalized<K: Kind>(api: &Api<K>, obj: Arc<K>, ctx: &Context) -> Result<Action> {
    // The helper's first pass adds the finalizer and does nothing else.
    let adds_finalizer = !obj.deleting() && !obj.finalizers().iter().any(|f| f == FINALIZER);
    let read = adds_finalizer.then(|| obj.clone());
    let action = finalizer(api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(obj) => reported(ctx, obj.as_ref(), pass::apply(obj.as_ref(), ctx).await).await,
            Event::Cleanup(obj) => {
                ctx.settled.gone(obj.as_ref());
                if let Some(uid) = obj.uid() {
                    ctx.stalled_on.gone(&uid);
                }
                deletion::cleaned_up(obj.as_ref(), ctx).await
            }
        }
    })
    .await;
    if let (Some(read), Ok(_)) = (read, &action) {
        ctx.settled.finalizer_added(read.as_ref());
    }
    Ok(match action {
        Err(err) if error::already_gone(&err) => Action::await_change(),
        other => other.map_err(ReconcileError::from)?,
    })
}

/// Requeued a moment later, spread out, for want of a worker slot ([`FairShare::wait`]).
fn soon<K: Kind>(cached: &Cached<K>, ctx: &Context) -> Action {
    let now = ctx.clock.now().timestamp_millis();
    Action::requeue(FairShare::wait(cached.uid().as_deref().unwrap_or_default(), now))
}

/// The whole object behind `cached`: decoded from the cache, or, for one too large for the cache
/// to keep whole ([`watched::KEPT_BUDGET`]), read from the API server. `None`: it is gone.
async fn whole<K: Kind>(cached: &Cached<K>, api: &Api<K>) -> Result<Option<K>> {
    if cached.is_whole() {
        return cached.decode().map(Some).map_err(ReconcileError::Decode);
    }
    api.get_opt(&cached.name_any())
        .await
        .map_err(ReconcileError::kube("reading an object the cache keeps lean"))
}

/// After a failed reconcile: per-object backoff, by the error's classification.
pub fn error_policy<K: Kind>(obj: Arc<Cached<K>>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    let owner = Owner::of_kind::<K>(obj.as_ref());
    retry::error_policy(K::KIND, obj.as_ref(), owner, err, &ctx)
}
