//! Deleting a PreprocessBatch: which of its batches (every attempt's) to cancel or delete next,
//! one step per pass, or whether to leave them (`deletionPolicy: Orphan`).

use tpu_operator_api::common::DeletionPolicy;
use tpu_operator_gcp::dataproc_v1::model::batch::State;

use super::super::observe::ObservedBatch;

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
