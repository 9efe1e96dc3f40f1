//! The one status writer: every status write of every kind goes through here, so the settled
//! cache, the conditional write and the Events of a transition are handled once.

use kube::ResourceExt;
use tpu_operator_api::{KeepsNewerFields, conditions::reasons};

use futures::future::BoxFuture;

use super::{
    context::Context,
    kind::{Kind, WriteAhead},
    report, waits,
};
use crate::runtime::{
    error::{ReconcileError, Result, unanswered},
    refused,
};

/// `new` by server-side apply when it differs from `old`, conditional on the version of `obj`
/// `base` names, then the Events of the transition. Returns the version written, `None` when
/// nothing changed.
pub async fn write<K: Kind>(
    ctx: &Context,
    obj: &K,
    base: Option<&str>,
    old: Option<&K::Status>,
    new: &K::Status,
) -> Result<Option<String>> {
    // What a newer release wrote and this one does not know goes back as it was read, or this
    // write would erase it (`NewerFields`). Only during a rollback or a hand-over between
    // releases is there any, so the copy is made only then.
    let kept;
    let new = match old.map(KeepsNewerFields::newer_fields) {
        Some(fields) if fields != new.newer_fields() => {
            let mut with = new.clone();
            *with.newer_fields_mut() = fields.clone();
            kept = with;
            &kept
        }
        _ => new,
    };
    if old == Some(new) {
        return Ok(None);
    }
    let version = report::apply_status(ctx, obj, base, K::FIELD_MANAGER, new).await?;
    ctx.settled.replaced(obj, base, version.as_deref());
    if K::SETTLES {
        ctx.settled.wrote(obj, version.clone());
    }
    let unset = K::Status::default();
    for t in waits::with_waits::<K>(old.unwrap_or(&unset), new) {
        report::publish(ctx, obj, t).await;
    }
    Ok(version)
}

/// Stalls `obj` with a reason, no cloud call made: a tenancy-policy refusal, or a spec the
/// operator cannot act on. The caller decides when to look again.
pub async fn stall<K: Kind>(
    ctx: &Context,
    obj: &K,
    reason: &'static str,
    message: &str,
    retry: bool,
) -> Result<()> {
    let old = obj.status().cloned().unwrap_or_default();
    let new = obj.stalled(&old, reason, message, retry, ctx.clock.now());
    write(ctx, obj, obj.resource_version().as_deref(), Some(&old), &new).await?;
    Ok(())
}

/// The pass's [`WriteAhead`]: a marker written inside an action moves the base of the pass's
/// final write to the version it wrote (conditional on the version read, the final write would be
/// refused with 409 by the marker itself).
pub struct Ahead<'a, K: Kind> {
    ctx: &'a Context,
    obj: &'a K,
    base: Option<String>,
}

impl<'a, K: Kind> Ahead<'a, K> {
    pub(super) fn new(ctx: &'a Context, obj: &'a K) -> Self {
        Self {
            ctx,
            obj,
            base: obj.resource_version(),
        }
    }

    /// The version the pass's final write is conditional on.
    pub(super) fn base(&self) -> Option<&str> {
        self.base.as_deref()
    }
}

impl<K: Kind> WriteAhead<K::Status> for Ahead<'_, K> {
    fn write<'a>(&'a mut self, marked: &'a K::Status) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let old = self.obj.status();
            let base = self.base.as_deref();
            if let Some(version) = write(self.ctx, self.obj, base, old, marked).await? {
                self.base = Some(version);
            }
            Ok(())
        })
    }
}

/// A pass's result, after writing what failed it into the object's status where it would
/// otherwise show only in the log: a refused cloud call ([`refused`]), read or write, on every
/// kind; or a Kueue that did not answer (its webhooks down), which left a new object with no
/// status at all. Best effort: a status write that fails
/// here is logged, and the error is returned either way for the backoff.
pub async fn reported<K: Kind, T>(ctx: &Context, obj: &K, result: Result<T>) -> Result<T> {
    let (reason, message) = match &result {
        Err(ReconcileError::Gcp { action, source }) => match refused::reason(source) {
            Some(reason) => (reason, refused::message(action, source)),
            None => return result,
        },
        Err(ReconcileError::Kueue { action, source }) if unanswered(source) => {
            (reasons::KUEUE_UNAVAILABLE, kueue_message(action, source))
        }
        _ => return result,
    };
    let old = obj.status().cloned().unwrap_or_default();
    // Already reported (by this wrapper or by the kind itself, e.g. a refused delete): a second
    // writer with other words would wake the object with every write and retry the failed call
    // at once, again and again, instead of after the backoff.
    if K::stalled_for(&old, reason) {
        return result;
    }
    let new = obj.refused(&old, reason, &message, ctx.clock.now());
    let quiet = K::transitions(&old, &new).is_empty();
    let base = obj.resource_version();
    match write(ctx, obj, base.as_deref(), obj.status(), &new).await {
        Ok(Some(_)) if quiet => report::publish_event(ctx, obj, true, reason, message).await,
        Ok(_) => {}
        Err(err) => tracing::debug!(error = %err, "could not report the failed call in status"),
    }
    result
}

/// What status says of a failed Kueue call: the call and the API server's own words (for a
/// webhook that did not answer: which one, and why).
fn kueue_message(action: &str, err: &kube::Error) -> String {
    let why = match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    format!("the Kueue call failed: {action}: {why}; retried with backoff")
}

/// Records the object's estimated spend for the per-namespace spend metric (every pass, the
/// status written or not).
pub fn record_spend<K: Kind>(ctx: &Context, obj: &K, status: &K::Status) {
    if let (Some(ns), Some(uid)) = (obj.meta().namespace.as_deref(), obj.meta().uid.as_deref()) {
        ctx.metrics.record_spend(ns, uid, K::spend(status));
    }
}
