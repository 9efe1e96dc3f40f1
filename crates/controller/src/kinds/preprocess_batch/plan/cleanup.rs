//! Deleting a PreprocessBatch: which of its batches (every attempt's) to cancel or delete next,
//! one step per pass, or whether to leave them (`deletionPolicy: Orphan`); and the deletion
//! pass's plan built from that step.

use tpu_operator_api::{
    common::DeletionPolicy,
    conditions::{Progress, reasons},
    preprocess_batch::PreprocessBatchPhase as Phase,
};
use tpu_operator_gcp::dataproc_v1::model::batch::State;

use super::{
    super::observe::{ObservedBatch, Remaining},
    Action, Details, Plan, Requeue, Verdict,
};

/// What deletion does next: one step per reconcile, cancel before delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupStep {
    /// Nothing (left) to clean up: drop the finalizer.
    Done,
    /// `deletionPolicy: Orphan`: leave the batches and drop the finalizer.
    Orphan,
    /// Cancel a PENDING / RUNNING batch through its operation.
    Cancel { batch: String, operation: String },
    /// Delete a terminal batch.
    Delete { batch: String },
    /// Batches are stopping; look again soon.
    Wait { message: String },
}

/// The cleanup decision over every batch of the object (all attempts).
pub fn plan_cleanup(policy: DeletionPolicy, batches: &[ObservedBatch]) -> CleanupStep {
    if policy == DeletionPolicy::Orphan {
        return CleanupStep::Orphan;
    }
    let mut waiting = Vec::new();
    let mut deletable = None;
    for b in batches {
        match &b.state {
            State::Cancelled | State::Succeeded | State::Failed => {
                deletable.get_or_insert_with(|| b.name.clone());
            }
            State::Pending | State::Running if !b.operation.is_empty() => {
                return CleanupStep::Cancel {
                    batch: b.name.clone(),
                    operation: b.operation.clone(),
                };
            }
            // CANCELLING, UNSPECIFIED, a state added to the API later (`State` is non-exhaustive),
            // or an active batch without an operation to cancel: wait for it to end.
            _ => {
                waiting.push(format!(
                    "{} is {}",
                    b.name,
                    b.state.name().unwrap_or("in an unknown state")
                ));
            }
        }
    }
    match deletable {
        Some(batch) => CleanupStep::Delete { batch },
        None if waiting.is_empty() => CleanupStep::Done,
        None => CleanupStep::Wait {
            message: format!("waiting for batches to stop: {}", waiting.join(", ")),
        },
    }
}

/// A deletion pass's plan (policy `Delete`; an orphan never gets here): one cancel or delete,
/// or a wait, in phase Cancelling / Deleting; `details.releases` when nothing is left once the
/// action succeeded.
pub fn plan_deletion(remaining: &Remaining) -> Plan {
    let batches = match remaining {
        // The only batch there can be: deleted by name, and the finalizer goes in this pass.
        Remaining::Only(batch) => return deleting(batch, true),
        Remaining::Listed(batches) => batches,
    };
    match plan_cleanup(DeletionPolicy::Delete, batches) {
        CleanupStep::Done | CleanupStep::Orphan => released(),
        CleanupStep::Cancel { batch, operation } => {
            let verdict = cancelling(format!("cancelling batch {batch}"));
            Plan::new(Action::Cancel { operation }, verdict, Details::default())
        }
        // Dataproc deletes a batch synchronously, and the listing found every batch of this
        // object (by its UID label; nothing creates more once it is being deleted): when that
        // was the last one the finalizer can go in this pass, without a second listing to see
        // an empty result.
        CleanupStep::Delete { batch } => deleting(&batch, batches.len() == 1),
        CleanupStep::Wait { message } => Plan::new(Action::Nothing, cancelling(message), Details::default()),
    }
}

/// Delete `batch`; `last`: nothing is left after it.
fn deleting(batch: &str, last: bool) -> Plan {
    let message = format!("deleted batch {batch}");
    let verdict = Verdict::new(Phase::Deleting, Progress::Reconciling, reasons::DELETING, message);
    let details = Details {
        releases: last,
        ..Details::default()
    };
    let action = Action::Delete {
        batch: batch.to_string(),
    };
    Plan::new(action, verdict, details)
}

fn cancelling(message: String) -> Verdict {
    Verdict::new(
        Phase::Cancelling,
        Progress::Reconciling,
        reasons::CANCELLING,
        message,
    )
}

/// Nothing left: no call, the finalizer goes (the verdict is never reported).
fn released() -> Plan {
    let details = Details {
        releases: true,
        ..Details::default()
    };
    Plan::new(
        Action::Nothing,
        Verdict::keep(Phase::Deleting, Requeue::Stable),
        details,
    )
}
