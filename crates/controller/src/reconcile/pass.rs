//! One apply pass, written once for every kind:
//!
//! target → contention (another object holds what this one needs) → first look (policy, spec alone) → observe → claim (policy, on what was observed) →
//! plan (pure) → admission (policy with usage, under the namespace's lock) → act (at most one
//! mutating call) → status (pure) → the one status write and its Events → what it waits on
//! (cloud watch) → settle and requeue.
//!
//! A kind ([`Kind`]) supplies each step's content; this module owns the order, every policy
//! decision and its report, the status write, the cloud-watch registration and the requeue.

use std::time::Duration;

use kube::{ResourceExt, runtime::controller::Action};
use tpu_operator_api::conditions::reasons;

use super::{
    context::Context,
    kind::{Admission, Claim, Kind, Pass},
    report,
    status::{self, Ahead},
    wait::Wait,
};
use crate::{
    governance::tenancy::{self, AdmissionGuard, Busy, Denial},
    runtime::{
        cloud_watch::Owner,
        error::{ReconcileError, Result},
    },
};

/// One pass over an object that is not being deleted.
pub async fn apply<K: Kind>(obj: &K, ctx: &Context) -> Result<Action> {
    let old = obj.status().cloned().unwrap_or_default();
    let t = match obj.target(ctx.settings())? {
        Ok(t) => t,
        Err(stop) => {
            status::stall(ctx, obj, stop.reason, &stop.message, false).await?;
            return Ok(Action::await_change());
        }
    };
    let namespace = namespace(obj)?;
    if let Some(action) = first_look(ctx, obj, &namespace, &old, &t).await? {
        return Ok(action);
    }
    // After the policy: an object its policy refuses neither waits for another nor learns,
    // from a wait, what another holds.
    if let Some(action) = contended(ctx, obj, &t).await? {
        return Ok(action);
    }
    let observed = obj.observe(&ctx.io(), &t).await?;
    let mut lock = Lock::default();
    let verdict = claim(ctx, obj, &namespace, &t, &observed, &mut lock).await?;
    if let Some(action) = refused(ctx, obj, &old, verdict).await? {
        return Ok(action);
    }
    let plan = obj.plan(ctx.clock.now(), &t, &observed);
    if let Some(admission) = obj.admission(ctx.settings(), &t, &plan) {
        let verdict = admit(ctx, &namespace, &admission, &mut lock).await?;
        if let Some(action) = refused(ctx, obj, &old, verdict).await? {
            return Ok(action);
        }
    }
    let (io, mut ahead) = (ctx.io(), Ahead::new(ctx, obj));
    let acted = obj.act(&io, &t, &observed, &plan, &mut ahead).await?;
    let pass = Pass {
        obj,
        old: &old,
        target: &t,
        observed: &observed,
        plan: &plan,
        done: &acted.done,
    };
    let new = obj.report(ctx.clock.now(), &pass);
    status::record_spend(ctx, obj, &new);
    status::write(ctx, obj, ahead.base(), Some(&old), &new).await?;
    // The lock is held until the create is in status, so concurrent admissions see each other.
    drop(lock);
    for event in acted.events {
        report::publish(ctx, obj, event).await;
    }
    if let Some(err) = acted.failed {
        return Err(err);
    }
    let wait = obj.wait(&ctx.config, &pass, &new);
    Ok(settle(ctx, obj, wait))
}

/// The first look ([`Kind::first_look`]): the policy's rules on the spec alone, before any cloud
/// call. `Some`: refused, the refusal reported.
async fn first_look<K: Kind>(
    ctx: &Context,
    obj: &K,
    namespace: &str,
    old: &K::Status,
    t: &K::Target,
) -> Result<Option<Action>> {
    let first_look = obj.first_look(ctx.settings(), t);
    if !first_look.is_empty()
        && let Err(denial) = tenancy::precheck(&ctx.tenancy, namespace, &first_look)
    {
        return deny(ctx, obj, old, denial).await.map(Some);
    }
    Ok(None)
}

/// The claim ([`Kind::claim`]): the policy's verdict on what was observed, judged under the
/// namespace's lock when it counts usage.
async fn claim<K: Kind>(
    ctx: &Context,
    obj: &K,
    namespace: &str,
    t: &K::Target,
    observed: &K::Observed,
    lock: &mut Lock,
) -> Result<Verdict> {
    Ok(match obj.claim(ctx.settings(), t, observed) {
        Claim::Nothing => Verdict::Admitted,
        Claim::Refused(denial) => Verdict::Denied(denial),
        Claim::Admit(admission) => admit(ctx, namespace, &admission, lock).await?,
    })
}

/// Another object holds what this one needs ([`Kind::contention`]): stalled, no cloud call, and
/// looked at again at the stable interval (the holder also wakes it when it lets go).
async fn contended<K: Kind>(ctx: &Context, obj: &K, t: &K::Target) -> Result<Option<Action>> {
    let Some(held) = obj.contention(ctx.settings(), ctx.kept(), t) else {
        return Ok(None);
    };
    status::stall(ctx, obj, held.reason, &held.message, true).await?;
    Ok(Some(Action::requeue(ctx.config.poll_stable)))
}

/// The object's namespace (every kind is namespaced).
pub(super) fn namespace<K: Kind>(obj: &K) -> Result<String> {
    obj.namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))
}

/// What the policy said of one admission.
enum Verdict {
    Admitted,
    Denied(Denial),
    /// Another object of the namespace is being admitted.
    Busy,
}

/// The namespace's admission lock, once taken in this pass (it is not reentrant).
#[derive(Default)]
struct Lock(Option<AdmissionGuard>);

/// Judges `admission`: the spec-alone rules, then (under the namespace's lock) the rules that
/// read the namespace's usage.
async fn admit(ctx: &Context, namespace: &str, admission: &Admission, lock: &mut Lock) -> Result<Verdict> {
    if let Err(denial) = tenancy::precheck(&ctx.tenancy, namespace, &admission.checked) {
        return Ok(Verdict::Denied(denial));
    }
    if admission.counted.is_empty() {
        return Ok(Verdict::Admitted);
    }
    if lock.0.is_none() {
        match ctx.tenancy.try_enter(namespace) {
            Ok(guard) => lock.0 = Some(guard),
            Err(Busy) => return Ok(Verdict::Busy),
        }
    }
    let holder = admission.holder.borrowed();
    Ok(
        match tenancy::admit(&ctx.tenancy, namespace, &admission.counted, &holder).await? {
            Ok(()) => Verdict::Admitted,
            Err(denial) => Verdict::Denied(denial),
        },
    )
}

/// The pass's end for a verdict that is not an admission: the refusal reported, or a short wait
/// for the namespace's lock. `None`: admitted, go on.
async fn refused<K: Kind>(
    ctx: &Context,
    obj: &K,
    old: &K::Status,
    verdict: Verdict,
) -> Result<Option<Action>> {
    match verdict {
        Verdict::Admitted => Ok(None),
        Verdict::Busy => {
            let now = ctx.clock.now().timestamp_millis();
            let uid = obj.meta().uid.as_deref().unwrap_or_default();
            Ok(Some(Action::requeue(Busy::wait(uid, now))))
        }
        Verdict::Denied(denial) => deny(ctx, obj, old, denial).await.map(Some),
    }
}

/// Reports a tenancy-policy refusal: `Stalled` reason `PolicyDenied`, no cloud call made. A
/// refusal that depends on the namespace's usage (chip quota, budget) is looked at again with
/// [`tenancy::refusal_wait`]'s backoff; one that needs a spec or policy change at the stable
/// interval (a policy change wakes every object at once).
async fn deny<K: Kind>(ctx: &Context, obj: &K, old: &K::Status, denial: Denial) -> Result<Action> {
    tracing::debug!(kind = K::KIND, message = %denial.message, "tenancy policy refused the object");
    status::record_spend(ctx, obj, old);
    status::stall(ctx, obj, reasons::POLICY_DENIED, &denial.message, denial.retry).await?;
    let conditions = K::conditions(old);
    let uid = obj.meta().uid.as_deref().unwrap_or_default();
    let wait = tenancy::refusal_wait(&ctx.config, &denial, conditions, uid, ctx.clock.now());
    Ok(Action::requeue(wait))
}

/// Registers what the object waits on with the cloud watch, and settles it (kinds that
/// [`Kind::SETTLES`]) until the wait is over.
pub(super) fn settle<K: Kind>(ctx: &Context, obj: &K, wait: Wait) -> Action {
    let after = register(ctx, obj, wait);
    if K::SETTLES && obj.settles(ctx.settings()) {
        ctx.settled.settle(obj, after)
    } else {
        Action::requeue(after)
    }
}

/// Drops what the object waited on (its deletion is over): no requeue, no watch left behind.
pub(super) fn unregister(ctx: &Context, wait: Wait) {
    match wait {
        Wait::Watch { watch, .. } => ctx.cloud_watch.unwatch(watch.collection, &watch.name),
        Wait::Poll { unwatch, .. } => {
            if let Some(u) = unwatch {
                ctx.cloud_watch.unwatch(u.collection, &u.name);
            }
        }
    }
}

/// The wait's requeue, after registering (or dropping) its cloud watch.
fn register<K: Kind>(ctx: &Context, obj: &K, wait: Wait) -> Duration {
    match wait {
        Wait::Watch { watch, cap, unlisted } => {
            let seen = Some(watch.state);
            let backstop = ctx
                .cloud_watch
                .watch(watch.collection, &watch.name, seen, watch.read, Owner::of(obj))
                .unwrap_or_else(|| unlisted.unwrap_or_else(|| ctx.cloud_watch.unlisted_poll()));
            cap.map_or(backstop, |cap| backstop.min(cap))
        }
        Wait::Poll { after, unwatch } => {
            if let Some(u) = unwatch {
                ctx.cloud_watch.unwatch(u.collection, &u.name);
            }
            after
        }
    }
}
