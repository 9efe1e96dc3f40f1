//! One deletion pass, written once for every kind: the deletion policy the namespace's tenancy
//! policy allows, an allowed orphan's holdings recorded, else the same hooks as an apply pass
//! (observe → plan → act → report → wait) planning the release of what the object holds; its
//! status written, its Events published (kinds publish none themselves) and what it waits on
//! registered; what the object holds in Kubernetes let go last, once nothing is left.

use kube::runtime::controller::Action;
use tpu_operator_api::DeletionPolicy;

use super::{
    context::Context,
    kind::{Kind, Pass},
    pass, report,
    status::{self, Ahead},
};
use crate::{governance::tenancy, runtime::error::Result};

/// `Some(requeue)` while cloud objects remain, `None` once the finalizer may go.
pub async fn cleanup<K: Kind>(obj: &K, ctx: &Context) -> Result<Option<Action>> {
    // Without a target (no project) nothing was ever created.
    let Ok(t) = obj.target(ctx.settings())? else {
        return Ok(None);
    };
    if policy(ctx, obj) == DeletionPolicy::Orphan {
        if let Some(holding) = obj.orphaned(ctx.settings(), &t) {
            let namespace = pass::namespace(obj)?;
            // Written before the finalizer goes: counted until a sweep sees it gone.
            let orphans = &ctx.tenancy.admissions.orphans;
            orphans.record(&ctx.client, &namespace, holding).await?;
        }
        obj.let_go(&ctx.io()).await?;
        return Ok(None);
    }
    through_hooks(obj, ctx, &t).await
}

/// One deletion pass through the apply hooks: observe → plan → act → released? → status →
/// Events → wait. The kind's hooks see the object's `deletionTimestamp` and plan the release of
/// its cloud resources; no policy is asked (deleting spends nothing).
async fn through_hooks<K: Kind>(obj: &K, ctx: &Context, t: &K::Target) -> Result<Option<Action>> {
    let old = obj.status().cloned().unwrap_or_default();
    let observed = obj.observe(&ctx.io(), t).await?;
    let plan = obj.plan(ctx.clock.now(), t, &observed);
    let (io, mut ahead) = (ctx.io(), Ahead::new(ctx, obj));
    let acted = obj.act(&io, t, &observed, &plan, &mut ahead).await?;
    let pass = Pass {
        obj,
        old: &old,
        target: t,
        observed: &observed,
        plan: &plan,
        done: &acted.done,
    };
    if acted.failed.is_none() && obj.released(&pass) {
        for event in acted.events {
            report::publish(ctx, obj, event).await;
        }
        obj.let_go(&io).await?;
        // Nothing is left to wait on: what the object waited on until now is dropped.
        pass::unregister(ctx, obj.wait(&ctx.config, &pass, &old));
        return Ok(None);
    }
    let new = obj.report(ctx.clock.now(), &pass);
    status::record_spend(ctx, obj, &new);
    status::write(ctx, obj, ahead.base(), Some(&old), &new).await?;
    for event in acted.events {
        report::publish(ctx, obj, event).await;
    }
    if let Some(err) = acted.failed {
        return Err(err);
    }
    let wait = obj.wait(&ctx.config, &pass, &new);
    Ok(Some(pass::settle(ctx, obj, wait)))
}

/// Once the finalizer is being removed: the kind's closing Event.
pub async fn cleaned_up<K: Kind>(obj: &K, ctx: &Context) -> Result<Action> {
    if let Some(event) = obj.cleaned_up(policy(ctx, obj)) {
        report::publish(ctx, obj, event).await;
    }
    Ok(Action::await_change())
}

/// The deletion policy the pass follows (see [`tenancy::deletion_policy`]).
fn policy<K: Kind>(ctx: &Context, obj: &K) -> DeletionPolicy {
    let namespace = obj.meta().namespace.as_deref().unwrap_or_default();
    tenancy::deletion_policy(&ctx.tenancy, namespace, obj.deletion_policy())
}
