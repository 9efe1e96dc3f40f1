//! The Kubernetes Events of a status change: only real transitions (new attempt, finished,
//! retrying, stalled, deletion started), never a repeat of the same state.

use tpu_operator_api::{
    conditions::{self, find_condition, types},
    preprocess_batch::{PreprocessBatchPhase as Phase, PreprocessBatchStatus},
};

pub use crate::reconcile::report::Transition;

/// The Events of going from `old` to `new`: only real transitions (new attempt, finished,
/// retrying, stalled), never a repeat of the same state.
pub fn transitions(old: &PreprocessBatchStatus, new: &PreprocessBatchStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    let message = |type_| {
        find_condition(&new.conditions, type_)
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    };
    if new.attempts > old.attempts {
        let (_, note) = message(types::RECONCILING);
        out.push(Transition {
            warning: false,
            reason: "Submitted".into(),
            note,
        });
    }
    let stalled_now = conditions::is_true(&new.conditions, types::STALLED);
    let stalled_before = conditions::is_true(&old.conditions, types::STALLED);
    if new.phase == old.phase && stalled_now == stalled_before {
        return out;
    }
    let phase_changed = new.phase != old.phase;
    let (warning, type_) = match new.phase {
        _ if stalled_now && !stalled_before => (true, types::STALLED),
        _ if !phase_changed => return out,
        Phase::Succeeded => (false, types::READY),
        Phase::Retrying => (true, types::RECONCILING),
        // Deletion started: cancelling running work, or deleting finished batches.
        Phase::Cancelling | Phase::Deleting => (false, types::RECONCILING),
        // A wait's Events are the pass's (`reconcile::waits`).
        Phase::Waiting
        | Phase::Pending
        | Phase::Submitted
        | Phase::Running
        | Phase::Failed
        | Phase::Cancelled => return out,
    };
    let (reason, note) = message(type_);
    out.push(Transition {
        warning,
        reason,
        note,
    });
    out
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use tpu_operator_api::conditions::{Progress, reasons, set_kstatus};

    use super::*;
    use crate::kinds::preprocess_batch::status::k8s_time;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_772_442_000 + secs, 0).unwrap()
    }

    #[test]
    fn events_only_on_transitions() {
        let mut old = PreprocessBatchStatus::default();
        let mut new = old.clone();
        new.attempts = 1;
        new.phase = Phase::Submitted;
        set_kstatus(
            &mut new.conditions,
            Progress::Reconciling,
            reasons::CREATING,
            "sub",
            None,
            k8s_time(at(0)),
        );
        let t = transitions(&old, &new);
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].reason.as_str(), t[0].warning), ("Submitted", false));
        assert!(transitions(&new, &new).is_empty());

        old = new.clone();
        new.phase = Phase::Failed;
        set_kstatus(
            &mut new.conditions,
            Progress::Stalled,
            reasons::RETRIES_EXHAUSTED,
            "x",
            None,
            k8s_time(at(1)),
        );
        let t = transitions(&old, &new);
        assert_eq!(
            t,
            vec![Transition {
                warning: true,
                reason: "RetriesExhausted".into(),
                note: "x".into()
            }]
        );
        assert!(transitions(&new, &new).is_empty());
    }

    #[test]
    fn retrying_and_a_refusal_while_retrying_are_distinct_events() {
        let running = PreprocessBatchStatus {
            phase: Phase::Running,
            attempts: 1,
            ..Default::default()
        };
        let mut retrying = running.clone();
        retrying.phase = Phase::Retrying;
        set_kstatus(
            &mut retrying.conditions,
            Progress::Reconciling,
            reasons::RETRYING,
            "r",
            None,
            k8s_time(at(0)),
        );
        let t = transitions(&running, &retrying);
        assert_eq!(
            (t.len(), t[0].reason.as_str(), t[0].warning),
            (1, "Retrying", true)
        );

        // The next submit is refused (permission): same phase, Stalled flips on.
        let mut refused = retrying.clone();
        set_kstatus(
            &mut refused.conditions,
            Progress::Stalled,
            reasons::PERMISSION_DENIED,
            "p",
            None,
            k8s_time(at(1)),
        );
        let t = transitions(&retrying, &refused);
        assert_eq!(
            (t.len(), t[0].reason.as_str(), t[0].note.as_str()),
            (1, "PermissionDenied", "p")
        );

        let mut cancelling = running.clone();
        cancelling.phase = Phase::Cancelling;
        set_kstatus(
            &mut cancelling.conditions,
            Progress::Reconciling,
            reasons::CANCELLING,
            "c",
            None,
            k8s_time(at(2)),
        );
        let t = transitions(&running, &cancelling);
        assert_eq!(
            (t.len(), t[0].reason.as_str(), t[0].warning),
            (1, "Cancelling", false)
        );
        assert!(transitions(&cancelling, &cancelling).is_empty());
    }
}
