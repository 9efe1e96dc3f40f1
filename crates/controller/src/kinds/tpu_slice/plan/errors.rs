//! How a refused cloud call (or a failed create operation) is reported: which errors are the
//! slice's state (quota, stockout, permission, invalid spec), which are transient, and which
//! only mean the node is busy.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    conditions::{Progress, reasons},
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::{CreateFailure, ErrorKind, Exhaustion, GcpError};

use super::{Action, Outcome, Requeue, Verdict};
use crate::runtime::refused;

/// A patch or start refused because another operation runs on the node: the
/// TPU API answers 409 (ABORTED; FAILED_PRECONDITION is taken the same way, since which one is
/// not documented) and gcloud retries. Not a failure: the plan stands and is tried again at
/// `poll_active`, without the error backoff (a permission or spec problem would not clear so).
pub fn node_busy(action: &Action, err: &GcpError) -> bool {
    action.updates_node()
        && (err.status == Some("ABORTED")
            || err.kind == ErrorKind::FailedPrecondition
            || (err.http_status == Some(409) && err.kind != ErrorKind::AlreadyExists))
}

/// How a failed cloud call is reported. `None`: transient, return the error (backoff).
pub fn on_action_error(action: &Action, err: &GcpError) -> Option<Outcome> {
    match action {
        a if a.creates() => on_create_error(err),
        _ => refused::reason(err).map(|reason| {
            Outcome::from(Verdict::new(
                TpuSlicePhase::Degraded,
                Progress::Stalled,
                reason,
                err.to_string(),
            ))
        }),
    }
}

/// How a failed create (call or operation) is reported: one reason per class of
/// [`CreateFailure`], in the Ready/Reconciling/Stalled condition and in `CapacityAvailable`
/// (a stockout waits as `WaitingForCapacity` with `CapacityAvailable` reason `Stockout`).
/// `None`: transient, retry with backoff.
pub fn on_create_error(err: &GcpError) -> Option<Outcome> {
    use {Progress::Reconciling, Progress::Stalled, TpuSlicePhase as P};
    let (phase, progress, reason, message) = match err.create_failure() {
        // An exhausted project quota does not clear by itself: say so (Stalled, a Warning event)
        // and retry only slowly (`poll_stable`, and the permanent-error backoff for a refused
        // call), so the slice starts on its own once somebody raises the quota.
        CreateFailure::QuotaExhausted => (
            P::Waiting,
            Stalled,
            reasons::QUOTA_EXCEEDED,
            format!(
                "the project's TPU quota{} is exhausted: request a quota increase (or free quota); the create is retried every few minutes: {err}",
                quota(err)
            ),
        ),
        CreateFailure::Stockout => (
            P::Waiting,
            Reconciling,
            reasons::WAITING_FOR_CAPACITY,
            stockout(err),
        ),
        // The project's API rate quota, not its capacity: the next minute window lets the
        // create through, so it waits a short while rather than backing off like an error.
        CreateFailure::RateLimited => (
            P::Waiting,
            Reconciling,
            reasons::RATE_LIMITED,
            format!(
                "the project's API rate quota{} refused the create; retrying once its minute window refills: {err}",
                quota(err)
            ),
        ),
        CreateFailure::PermissionDenied => {
            let reason = refused::reason(err).unwrap_or(reasons::PERMISSION_DENIED);
            (P::Failed, Stalled, reason, err.to_string())
        }
        CreateFailure::InvalidRequest => (P::Failed, Stalled, reasons::INVALID_SPEC, err.to_string()),
        // Finding the object already there is no failure: it is adopted.
        CreateFailure::Other if err.kind == ErrorKind::AlreadyExists => {
            let adopting = "the object already exists (an earlier create): adopting it";
            return Some(Verdict::new(P::Provisioning, Reconciling, reasons::CREATING, adopting).into());
        }
        CreateFailure::Other => return None,
    };
    // What still progresses (a stockout, a rate limit) looks again at the capacity interval.
    let verdict = match Verdict::new(phase, progress, reason, message) {
        v if progress == Reconciling => v.requeue(Requeue::Capacity),
        v => v,
    };
    let mut outcome = Outcome::unavailable(verdict);
    outcome.details.failure = (err.kind != ErrorKind::AlreadyExists).then(|| err.clone());
    Some(outcome)
}

/// The quota `err` names, as a message says it (` (name)`), or nothing.
fn quota(err: &GcpError) -> String {
    err.quota_description()
        .map(|q| format!(" ({q})"))
        .unwrap_or_default()
}

/// What a stockout's message says: the zone's, or one that may be a quota the error does not
/// name.
fn stockout(err: &GcpError) -> String {
    match err.exhaustion() {
        Some(Exhaustion::Stockout) => {
            format!("no TPU capacity in the zone right now (stockout); retrying: {err}")
        }
        _ => format!(
            "no TPU capacity right now (stockout, or a quota the error does not name); retrying: {err}"
        ),
    }
}
