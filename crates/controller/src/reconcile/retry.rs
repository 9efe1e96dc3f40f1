//! The shared `error_policy`: per-object exponential backoff for transient errors, a slow retry
//! for errors that need a human (permissions, quota), metrics by category either way.

use std::{sync::Arc, time::Duration};

use kube::{Resource, ResourceExt, runtime::controller::Action};

use super::context::Context;
use crate::runtime::error::{ReconcileError, Retry};

/// How long to wait after a permanent error before looking again: permissions and quotas are fixed
/// out of band, and nothing tells us when.
pub const PERMANENT_RETRY: Duration = Duration::from_secs(300);

pub fn error_policy<K: Resource>(kind: &'static str, obj: &K, err: &ReconcileError, ctx: &Context) -> Action {
    ctx.metrics.failure(kind, err.category());
    ctx.settled.forget(obj);
    let uid = obj.uid().unwrap_or_default();
    let delay = match err.retry() {
        Retry::Transient => ctx.backoff.on_failure(&uid),
        Retry::Permanent => ctx.backoff.on_failure(&uid).max(PERMANENT_RETRY),
    };
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

/// Called at the end of a successful reconcile: clears the object's failure count.
pub fn on_success<K: Resource>(obj: &K, ctx: &Arc<Context>) {
    if let Some(uid) = obj.uid() {
        ctx.backoff.reset(&uid);
    }
}
