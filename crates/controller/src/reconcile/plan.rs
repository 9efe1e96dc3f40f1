//! What every kind's pure plan decides, in one shape: the pass's one action, and the verdict the
//! kind's `report` turns into status. `report` is the only place status is built, from the old
//! status, the verdict, its details and what the action did; `act` carries the action out and
//! changes none of what it is given.

use tpu_operator_api::conditions::Progress;

use crate::runtime::requeue::Requeue;

/// One pass's plan. `A` is the kind's action (one mutating call at most; its `Nothing` variant
/// makes none), `P` the kind's phase, `D` what only this kind reports besides the verdict (a
/// slice's `CapacityAvailable`, a batch's output check); `()` when nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<A, P, D = ()> {
    pub action: A,
    pub verdict: Verdict<P>,
    pub details: D,
}

impl<A, P, D> Plan<A, P, D> {
    pub fn new(action: A, verdict: Verdict<P>, details: D) -> Self {
        Self {
            action,
            verdict,
            details,
        }
    }
}

/// What the status will say, as far as the plan knows before the action: the phase, the kstatus
/// conditions (`None` leaves them as they are, e.g. on a finished object) and when to look again.
/// What the action did (a create refused, a turn not yet due) may change it in `report`.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict<P> {
    pub phase: P,
    pub kstatus: Option<Kstatus>,
    pub requeue: Requeue,
}

impl<P> Verdict<P> {
    /// `phase`, with the kstatus conditions `progress` for `reason` with `message`, looked at
    /// again as `progress` suggests (see [`Kstatus::requeue`]).
    pub fn new(phase: P, progress: Progress, reason: &'static str, message: impl Into<String>) -> Self {
        let kstatus = Kstatus {
            progress,
            reason,
            message: message.into(),
        };
        Self {
            phase,
            requeue: kstatus.requeue(),
            kstatus: Some(kstatus),
        }
    }

    /// `phase` with the conditions left as they are, looked at again after `requeue`.
    pub fn keep(phase: P, requeue: Requeue) -> Self {
        Self {
            phase,
            kstatus: None,
            requeue,
        }
    }

    /// The same verdict, looked at again after `requeue`.
    #[must_use]
    pub fn requeue(mut self, requeue: Requeue) -> Self {
        self.requeue = requeue;
        self
    }

    /// The progress the verdict reports, if it sets the conditions.
    pub fn progress(&self) -> Option<Progress> {
        self.kstatus.as_ref().map(|k| k.progress)
    }
}

/// The kstatus conditions (`Ready`, `Reconciling`, `Stalled`) as one value.
#[derive(Clone, Debug, PartialEq)]
pub struct Kstatus {
    pub progress: Progress,
    pub reason: &'static str,
    pub message: String,
}

impl Kstatus {
    /// The poll `progress` suggests: a settled or stuck object at the stable interval, one that
    /// is changing at the active one.
    pub fn requeue(&self) -> Requeue {
        match self.progress {
            Progress::Ready | Progress::Stalled | Progress::Idle => Requeue::Stable,
            Progress::Reconciling => Requeue::Active,
        }
    }
}
