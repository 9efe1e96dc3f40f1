//! The Events of a wait, the same for every kind: an object that starts waiting for capacity, a
//! quota or its namespace's policy ([`Kind::waiting`]) gets one Warning named by its reason (e.g.
//! `WaitingForCapacity`), a change of what it waits for another, and the end of the wait one
//! Normal `WaitEnded`. A pass that re-checks a wait publishes nothing.

use tpu_operator_api::conditions::{describing, reasons};

use super::{kind::Kind, report::Transition};

/// Whether a stall for `reason` is a wait (the kind's `Waiting` phase): a refusal looked at again
/// (`retry`) that ends by itself, as the namespace's usage falls (`PolicyDenied`) or the
/// pipeline writing the same directories finishes (`ArtifactsInUse`).
pub fn stall_waits(reason: &str, retry: bool) -> bool {
    retry && matches!(reason, reasons::POLICY_DENIED | reasons::ARTIFACTS_IN_USE)
}

/// Event reason of an object that no longer waits.
pub const WAIT_ENDED: &str = "WaitEnded";

/// The wait's Events of a status change from `old` to `new`.
pub fn transitions<K: Kind>(old: &K::Status, new: &K::Status) -> Vec<Transition> {
    let said = |s: &K::Status| {
        describing(K::conditions(s))
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    };
    let (before, now) = (said(old), said(new));
    match (K::waiting(old), K::waiting(new)) {
        (false, true) => vec![Transition::warning(now.0, now.1)],
        (true, true) if before.0 != now.0 => vec![Transition::warning(now.0, now.1)],
        (true, false) => vec![Transition::normal(
            WAIT_ENDED,
            format!("no longer waiting ({}): {}", before.0, now.1),
        )],
        _ => Vec::new(),
    }
}

/// `kind`'s Events and the wait's, a wait's Warning left out when the kind already says the
/// same reason (a TpuSlice's `QuotaExceeded` stall, say).
pub fn with_waits<K: Kind>(old: &K::Status, new: &K::Status) -> Vec<Transition> {
    let mut events = K::transitions(old, new);
    for wait in transitions::<K>(old, new) {
        if !events.iter().any(|e| e.reason == wait.reason) {
            events.push(wait);
        }
    }
    events
}
