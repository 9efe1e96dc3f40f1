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

use super::{Action, Assessment, Requeue};
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
pub fn on_action_error(action: &Action, err: &GcpError) -> Option<Assessment> {
    match action {
        a if a.creates() => on_create_error(err),
        _ => refused::reason(err).map(|reason| {
            Assessment::new(
                Progress::Stalled,
                reason,
                TpuSlicePhase::Degraded,
                err.to_string(),
            )
        }),
    }
}

/// How a failed create (call or operation) is reported: one reason per class of
/// [`CreateFailure`], in the Ready/Reconciling/Stalled condition and in `CapacityAvailable`
/// (a stockout waits as `WaitingForCapacity` with `CapacityAvailable` reason `Stockout`).
/// `None`: transient, retry with backoff.
pub fn on_create_error(err: &GcpError) -> Option<Assessment> {
    use TpuSlicePhase as P;
    let stalled =
        |reason| Some(Assessment::new(Progress::Stalled, reason, P::Failed, err.to_string()).capacity(false));
    let quota = || {
        err.quota_description()
            .map(|q| format!(" ({q})"))
            .unwrap_or_default()
    };
    let assessment = match err.create_failure() {
        // An exhausted project quota does not clear by itself: say so (Stalled, a Warning event)
        // and retry only slowly (`poll_stable`, and the permanent-error backoff for a refused
        // call), so the slice starts on its own once somebody raises the quota.
        CreateFailure::QuotaExhausted => Some(
            Assessment::new(
                Progress::Stalled,
                reasons::QUOTA_EXCEEDED,
                P::Waiting,
                format!(
                    "the project's TPU quota{} is exhausted: request a quota increase (or free quota); the create is retried every few minutes: {err}",
                    quota()
                ),
            )
            .capacity(false),
        ),
        CreateFailure::Stockout => Some(
            Assessment::new(
                Progress::Reconciling,
                reasons::WAITING_FOR_CAPACITY,
                P::Waiting,
                match err.exhaustion() {
                    Some(Exhaustion::Stockout) => format!("no TPU capacity in the zone right now (stockout); retrying: {err}"),
                    _ => format!("no TPU capacity right now (stockout, or a quota the error does not name); retrying: {err}"),
                },
            )
            .requeue(Requeue::Capacity)
            .capacity(false),
        ),
        // The project's API rate quota, not its capacity: the next minute window lets the
        // create through, so it waits a short while rather than backing off like an error.
        CreateFailure::RateLimited => Some(
            Assessment::new(
                Progress::Reconciling,
                reasons::RATE_LIMITED,
                P::Waiting,
                format!(
                    "the project's API rate quota{} refused the create; retrying once its minute window refills: {err}",
                    quota()
                ),
            )
            .requeue(Requeue::Capacity)
            .capacity(false),
        ),
        CreateFailure::PermissionDenied => stalled(refused::reason(err).unwrap_or(reasons::PERMISSION_DENIED)),
        CreateFailure::InvalidRequest => stalled(reasons::INVALID_SPEC),
        CreateFailure::Other if err.kind == ErrorKind::AlreadyExists => Some(Assessment::new(
            Progress::Reconciling,
            reasons::CREATING,
            P::Provisioning,
            "the object already exists (an earlier create): adopting it",
        )),
        CreateFailure::Other => None,
    };
    assessment.map(|mut a| {
        // Finding the object already there is no failure: it is adopted.
        a.failure = (err.kind != ErrorKind::AlreadyExists).then(|| err.clone());
        a
    })
}
