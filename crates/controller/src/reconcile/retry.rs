//! The shared `error_policy`: per-object exponential backoff for transient errors, a slow retry
//! for errors that need a human (permissions, quota), metrics by category either way.

use std::{sync::Arc, time::Duration};

use kube::{Resource, ResourceExt, runtime::controller::Action};

use super::context::Context;
use crate::runtime::{
    cloud_watch::Owner,
    error::{ReconcileError, Retry},
};

/// How long to wait after a permanent error before looking again: permissions and quotas are fixed
/// out of band. A refused call's fix is seen sooner ([`crate::runtime::stalled_on`]: one object
/// per refusal probes it and wakes the others); a quota increase is not.
pub const PERMANENT_RETRY: Duration = Duration::from_secs(300);

/// After a failed pass of `obj`: its backoff by the error's class, and the failure metric.
///
/// `owner` is how the object is woken (its kind's controller stream): an object refused by a
/// cloud call registers with [`crate::runtime::stalled_on`], and the one that probes the refusal
/// for the others retries at its interval instead of after [`PERMANENT_RETRY`].
pub fn error_policy<K: Resource>(
    kind: &'static str,
    obj: &K,
    owner: Option<Owner>,
    err: &ReconcileError,
    ctx: &Context,
) -> Action {
    ctx.metrics.failure(kind, err.category());
    let uid = obj.uid().unwrap_or_default();
    let backoff = match err.retry() {
        Retry::Transient => ctx.backoff.on_failure(&uid),
        Retry::Permanent => ctx.backoff.on_failure(&uid).max(PERMANENT_RETRY),
    };
    let delay = ctx
        .stalled_on
        .failed(owner, err)
        .map_or(backoff, |canary| canary.min(backoff));
    // The failed pass may have written status (a refused delete says so; a billing node's cost
    // moves on every minute). Its own write's watch event must not run the failed call again
    // before the backoff: the object settles at the version the pass left until the retry is
    // due, and only a change made by someone else (a new version), a cloud-watch wake-up or the
    // retry itself runs the next full pass.
    ctx.settled.settle(obj, delay);
    tracing::warn!(
        kind,
        namespace = obj.meta().namespace.as_deref().unwrap_or(""),
        name = obj.meta().name.as_deref().unwrap_or(""),
        category = err.category(),
        retry_in_s = delay.as_secs_f32(),
        error = %err,
        // Google's per-request id (kept out of the message and status), for support cases.
        error_id = err.gcp_error_id().unwrap_or(""),
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// Called at the end of a successful reconcile: clears the object's failure count, and wakes
/// the objects stalled with it when it was their canary.
pub fn on_success<K: Resource>(obj: &K, ctx: &Arc<Context>) {
    if let Some(uid) = obj.uid() {
        ctx.backoff.reset(&uid);
        ctx.stalled_on.passed(&uid);
    }
}
