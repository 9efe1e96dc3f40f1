//! The mutating Dataproc calls, one per reconcile: create a batch, cancel one, delete one.
//!
//! The caller writes each result to status right after it returns, before anything else.

use tpu_operator_api::{
    conditions::reasons,
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase, PreprocessBatchSpec},
};
use tpu_operator_gcp::{CreateFailure, ErrorKind, GcpError};

use super::{
    observe::{ObservedBatch, Target},
    spec::batch_request,
};
use crate::reconcile::{handles::Io, kind::Kind};
use crate::runtime::{
    capacity::{Asker, Group, Line, Turn},
    error::{ReconcileError, Result},
};

/// How a submit went.
#[derive(Clone, Debug, PartialEq)]
pub enum SubmitOutcome {
    /// The create was accepted (or a replay of the same `requestId` returned the first operation).
    Created {
        attempt: u32,
        batch_name: String,
        operation: String,
    },
    /// A batch with this attempt's id already existed (created by a run that crashed before it
    /// could record it, after the `requestId` was forgotten): adopted, never duplicated.
    Adopted { attempt: u32, batch: ObservedBatch },
    /// Dataproc or the spec refuses the batch; retrying the same call cannot help until a human
    /// acts. `phase` is `Failed` when nothing can change it (the spec is immutable), else `None`
    /// (keep the phase; the submit is tried again on the slow requeue).
    Refused {
        phase: Option<PreprocessBatchPhase>,
        reason: &'static str,
        message: String,
        /// The refused call, when a grant or a binding is what it waits for: the pass fails
        /// with it after writing status, so the batch stalls on it and is re-queued when that
        /// is fixed (`runtime::stalled_on`), instead of at the stable poll.
        refused: Option<Box<GcpError>>,
    },
    /// Not sent: the project's Dataproc creates in the region are paced and others are ahead
    /// (see [`crate::runtime::capacity::limiter`]). Tried again when the turn is due.
    Paced {
        message: String,
        after: std::time::Duration,
    },
}

/// Creates the batch of `attempt` with its deterministic id and `requestId`.
pub async fn submit(
    io: &Io<'_>,
    target: &Target,
    spec: &PreprocessBatchSpec,
    attempt: u32,
) -> Result<SubmitOutcome> {
    let batch = match batch_request(&spec.batch, &target.identity, &io.settings.config.cluster_id) {
        Ok(batch) => batch,
        Err(err) => {
            return Ok(SubmitOutcome::Refused {
                phase: Some(PreprocessBatchPhase::Failed),
                reason: reasons::INVALID_SPEC,
                message: err.to_string(),
                refused: None,
            });
        }
    };
    if let Some(paced) = turn(io, target) {
        return Ok(paced);
    }
    let batch_name = target.batch_name(attempt);
    let created = io
        .gcp
        .dataproc
        .create_batch(
            &target.parent,
            &target.batch_id(attempt),
            &target.request_id(attempt),
            batch,
        )
        .await;
    match created {
        Ok(operation) => Ok(SubmitOutcome::Created {
            attempt,
            batch_name,
            operation: operation.name,
        }),
        Err(err) if err.kind == ErrorKind::AlreadyExists => {
            let existing = io
                .gcp
                .dataproc
                .get_batch(&batch_name)
                .await
                .map_err(ReconcileError::gcp(
                    "read the existing Dataproc batch to adopt it",
                ))?;
            Ok(SubmitOutcome::Adopted {
                attempt,
                batch: ObservedBatch::from_batch(&existing),
            })
        }
        Err(err) => {
            io.kept.metrics.capacity.create_failed("PreprocessBatch", &err);
            if let Some(line) = line(target) {
                io.capacity.answered(&line, &err, io.clock.now());
            }
            refusal(err).map_err(ReconcileError::gcp("create Dataproc batch"))
        }
    }
}

/// The quota a batch create spends: Dataproc's batch operations, per project and region.
fn line(target: &Target) -> Option<Line> {
    Line::under(Group::DataprocBatchCreate, &target.parent)
}

/// `None`: create now. Otherwise the batch waits its turn in the create limiter.
fn turn(io: &Io<'_>, target: &Target) -> Option<SubmitOutcome> {
    let line = line(target)?;
    let asker = Asker::of(&target.identity, <PreprocessBatch as Kind>::KIND);
    let now = io.clock.now();
    match io.capacity.turn(&line, asker, now) {
        Turn::Go => None,
        Turn::Wait(waiting) => Some(SubmitOutcome::Paced {
            message: waiting.message(&line),
            after: waiting.wait(now),
        }),
    }
}

/// Errors that need a human become a `Stalled` status with the API's message, one reason per
/// [`CreateFailure`] class; the rest (a rate limit included: the next minute lets it through)
/// go to `error_policy` for backoff.
fn refusal(err: GcpError) -> std::result::Result<SubmitOutcome, GcpError> {
    let quota = err
        .quota_description()
        .map(|q| format!(" (quota {q})"))
        .unwrap_or_default();
    let (phase, reason) = match err.create_failure() {
        CreateFailure::InvalidRequest if err.kind == ErrorKind::InvalidArgument => {
            (Some(PreprocessBatchPhase::Failed), reasons::INVALID_SPEC)
        }
        CreateFailure::PermissionDenied => (
            None,
            crate::runtime::refused::reason(&err).unwrap_or(reasons::PERMISSION_DENIED),
        ),
        CreateFailure::QuotaExhausted => (None, reasons::QUOTA_EXCEEDED),
        CreateFailure::Stockout => (None, reasons::STOCKOUT),
        CreateFailure::InvalidRequest | CreateFailure::RateLimited | CreateFailure::Other => return Err(err),
    };
    let message = format!("Dataproc refused batches.create{quota}: {}", err.stable_message());
    let refused = crate::runtime::refused::is_refusal(&err).then(|| Box::new(err));
    Ok(SubmitOutcome::Refused {
        phase,
        reason,
        message,
        refused,
    })
}

/// Cancels a running batch through its operation. Already finished or gone is fine.
pub async fn cancel(io: &Io<'_>, operation: &str) -> Result<()> {
    match io.gcp.dataproc.cancel_operation(operation).await {
        Ok(()) => Ok(()),
        Err(err) if matches!(err.kind, ErrorKind::NotFound | ErrorKind::FailedPrecondition) => Ok(()),
        Err(err) => Err(ReconcileError::gcp("cancel Dataproc batch operation")(err)),
    }
}

/// Deletes a terminal batch. Already gone is fine.
pub async fn delete(io: &Io<'_>, batch: &str) -> Result<()> {
    match io.gcp.dataproc.delete_batch(batch).await {
        Ok(()) => Ok(()),
        Err(err) if err.kind == ErrorKind::NotFound => Ok(()),
        Err(err) => Err(ReconcileError::gcp("delete Dataproc batch")(err)),
    }
}
