//! Which objects stall on which [`Blocker`], which one of them probes it (the canary), and whom
//! a fix wakes. Pure bookkeeping: the caller passes the time and carries out the wakes.
//!
//! * The first object to stall on a blocker is its **canary**: it retries every
//!   [`CANARY_INTERVAL`], the others keep their long backoff. A grant is seen within one interval
//!   at one call per interval per blocker, not one per object.
//! * The canary's next successful pass wakes every other object of its blocker, and the blocker
//!   is forgotten (objects still refused stall on it afresh).
//! * A canary that leaves (deleted, or failing on something else) hands the probe to the next
//!   object in the order they stalled, which is woken at once to start probing. A canary that
//!   stops reporting (its passes no longer run) is replaced by the next object that stalls.
//! * Wakes of one blocker by a success are at least [`CANARY_INTERVAL`] apart: an object whose
//!   owner makes its passes fail and succeed in turn (by editing its spec) could otherwise wake
//!   every object sharing its blocker on each edit. Within the interval, a success hands the
//!   probe on instead (one object woken).
//! * A credentials recovery reported by the token source itself wakes every object stalled on
//!   [`Blocker::Credentials`] at once: no tenant can cause that.

use std::{
    collections::{HashMap, VecDeque},
    time::Duration,
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use super::blocker::Blocker;

/// How often the canary of a blocker retries: the longest a fix goes unseen, within the 10 s a
/// fix may take to reach every object (the canary's pass and the wakes take milliseconds).
pub const CANARY_INTERVAL: Duration = Duration::from_secs(8);

/// A canary that has not stalled again for this long no longer probes (its object is stuck or
/// gone without a word): the next object to stall takes over.
const CANARY_SILENT: Duration = Duration::from_secs(3 * CANARY_INTERVAL.as_secs());

/// What a failed object is to its blocker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Retries every [`CANARY_INTERVAL`].
    Canary,
    /// Keeps its backoff; woken when the canary passes.
    Waiter,
}

/// Objects by UID, each with the handle that wakes it (`T`).
pub struct Registry<T> {
    members: HashMap<String, (Blocker, T)>,
    stalls: HashMap<Blocker, Stall>,
    /// When each blocker last woke its objects on a success (pruned after the interval).
    woken_at: HashMap<Blocker, Instant>,
}

#[derive(Default)]
struct Stall {
    /// The objects, in the order they stalled (the canary among them).
    order: VecDeque<String>,
    /// The canary and when it last stalled.
    canary: Option<(String, Instant)>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            members: HashMap::new(),
            stalls: HashMap::new(),
            woken_at: HashMap::new(),
        }
    }
}

impl<T: Clone> Registry<T> {
    /// Object `uid` failed on `blocker`. Returns its role, and whom to wake: the next canary when
    /// the object was the canary of another blocker before.
    pub fn stalled(&mut self, uid: &str, blocker: Blocker, handle: T, now: Instant) -> (Role, Vec<T>) {
        let (woken, known) = match self.members.get(uid) {
            Some((before, _)) if *before != blocker => (self.left(uid, now), false),
            Some(_) => (Vec::new(), true),
            None => (Vec::new(), false),
        };
        let stall = self.stalls.entry(blocker.clone()).or_default();
        // By the members map, not a scan of the order: a credentials outage stalls every object
        // on one blocker, each failing again and again.
        if !known {
            stall.order.push_back(uid.to_string());
        }
        self.members.insert(uid.to_string(), (blocker, handle));
        let role = match &mut stall.canary {
            Some((canary, seen)) if canary == uid => {
                *seen = now;
                Role::Canary
            }
            Some((_, seen)) if now.saturating_duration_since(*seen) <= CANARY_SILENT => Role::Waiter,
            _ => {
                stall.canary = Some((uid.to_string(), now));
                Role::Canary
            }
        };
        (role, woken)
    }

    /// Object `uid` passed: a canary's pass wakes its blocker's objects (or, within
    /// [`CANARY_INTERVAL`] of the last such wake, hands the probe to the next one).
    pub fn passed(&mut self, uid: &str, now: Instant) -> Vec<T> {
        self.woken_at
            .retain(|_, at| now.saturating_duration_since(*at) < CANARY_INTERVAL);
        let Some(blocker) = self.members.get(uid).map(|(blocker, _)| blocker.clone()) else {
            return Vec::new();
        };
        if !self.is_canary(&blocker, uid) || self.woken_at.contains_key(&blocker) {
            return self.left(uid, now);
        }
        self.woken_at.insert(blocker.clone(), now);
        self.members.remove(uid);
        self.wake_all(&blocker)
    }

    /// Object `uid` no longer stalls on its blocker (deleted, or failing for another reason):
    /// its canary role passes to the next object, which is returned to be woken.
    pub fn left(&mut self, uid: &str, now: Instant) -> Vec<T> {
        let Some((blocker, _)) = self.members.remove(uid) else {
            return Vec::new();
        };
        let Some(stall) = self.stalls.get_mut(&blocker) else {
            return Vec::new();
        };
        stall.order.retain(|member| member != uid);
        let was_canary = stall.canary.as_ref().is_some_and(|(canary, _)| canary == uid);
        if !was_canary {
            return Vec::new();
        }
        stall.canary = stall.order.front().map(|next| (next.clone(), now));
        match stall.order.front() {
            Some(next) => self
                .members
                .get(next)
                .map(|(_, handle)| handle.clone())
                .into_iter()
                .collect(),
            None => {
                self.stalls.remove(&blocker);
                Vec::new()
            }
        }
    }

    /// The token source works again: every object stalled on credentials, to be woken.
    pub fn credentials_recovered(&mut self) -> Vec<T> {
        self.wake_all(&Blocker::Credentials)
    }

    /// Objects stalled on anything now.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    fn is_canary(&self, blocker: &Blocker, uid: &str) -> bool {
        self.stalls
            .get(blocker)
            .and_then(|stall| stall.canary.as_ref())
            .is_some_and(|(canary, _)| canary == uid)
    }

    /// Forgets `blocker`, returning the handles of its objects.
    fn wake_all(&mut self, blocker: &Blocker) -> Vec<T> {
        let Some(stall) = self.stalls.remove(blocker) else {
            return Vec::new();
        };
        stall
            .order
            .iter()
            .filter_map(|uid| self.members.remove(uid).map(|(_, handle)| handle))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use tpu_operator_gcp::Service;

    use super::*;

    fn denied(identity: &str) -> Blocker {
        Blocker::Permission {
            service: Service::Tpu,
            identity: Some(identity.into()),
            scope: "projects/p".into(),
        }
    }

    fn sorted(mut woken: Vec<&'static str>) -> Vec<&'static str> {
        woken.sort();
        woken
    }

    #[test]
    fn the_first_to_stall_probes_and_its_success_wakes_the_others_once() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        assert_eq!(r.stalled("a", denied("x"), "a", t0).0, Role::Canary);
        assert_eq!(r.stalled("b", denied("x"), "b", t0).0, Role::Waiter);
        assert_eq!(r.stalled("c", denied("x"), "c", t0).0, Role::Waiter);
        // The canary stalls again at its interval and stays the canary.
        assert_eq!(
            r.stalled("a", denied("x"), "a", t0 + CANARY_INTERVAL).0,
            Role::Canary
        );
        // A waiter that passes (its owner touched it) wakes nobody.
        assert!(r.passed("c", t0 + CANARY_INTERVAL).is_empty());
        // The grant: the canary passes and wakes the rest; the blocker is forgotten.
        assert_eq!(r.passed("a", t0 + 2 * CANARY_INTERVAL), ["b"]);
        assert_eq!(r.len(), 0);
        assert!(
            r.passed("b", t0 + 2 * CANARY_INTERVAL).is_empty(),
            "already woken"
        );
    }

    #[test]
    fn blockers_of_other_identities_are_apart() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        r.stalled("a1", denied("team-a"), "a1", t0);
        r.stalled("a2", denied("team-a"), "a2", t0);
        assert_eq!(r.stalled("b1", denied("team-b"), "b1", t0).0, Role::Canary);
        r.stalled("b2", denied("team-b"), "b2", t0);
        r.stalled("n1", Blocker::Credentials, "n1", t0);
        assert_eq!(r.passed("a1", t0), ["a2"], "team-a's grant wakes team-a only");
        assert_eq!(r.len(), 3);
        assert_eq!(r.credentials_recovered(), ["n1"]);
        assert_eq!(sorted(r.passed("b1", t0)), ["b2"]);
    }

    #[test]
    fn a_canary_that_leaves_or_goes_silent_hands_the_probe_on() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        r.stalled("a", denied("x"), "a", t0);
        r.stalled("b", denied("x"), "b", t0);
        r.stalled("c", denied("x"), "c", t0);
        // Deleted (or now failing on something else): the next one probes, woken to start now.
        assert_eq!(r.left("a", t0), ["b"]);
        assert_eq!(r.stalled("b", denied("x"), "b", t0).0, Role::Canary);
        // Moved to another blocker: the same hand-over.
        assert_eq!(r.stalled("b", Blocker::Credentials, "b", t0).1, ["c"]);
        assert_eq!(r.stalled("c", denied("x"), "c", t0).0, Role::Canary);
        // Silent for longer than CANARY_SILENT: the next object to stall takes over.
        let later = t0 + CANARY_SILENT + Duration::from_secs(1);
        assert_eq!(r.stalled("d", denied("x"), "d", later).0, Role::Canary);
        assert_eq!(r.stalled("c", denied("x"), "c", later).0, Role::Waiter);
        // The last one leaving forgets the blocker.
        r.left("c", later);
        r.left("d", later);
        r.left("b", later);
        assert_eq!(r.len(), 0);
        assert!(r.stalls.is_empty());
    }

    #[test]
    fn a_success_wakes_a_blocker_at_most_once_per_interval() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        for uid in ["attacker", "v1", "v2"] {
            r.stalled(uid, denied("shared"), uid, t0);
        }
        assert_eq!(sorted(r.passed("attacker", t0)), ["v1", "v2"]);
        // The victims fail again; the attacker's object fails first (a spec edit) and probes.
        let soon = t0 + Duration::from_secs(1);
        for uid in ["attacker", "v1", "v2"] {
            r.stalled(uid, denied("shared"), uid, soon);
        }
        // Its next success, within the interval, hands the probe to one victim only.
        assert_eq!(r.passed("attacker", soon), ["v1"]);
        assert_eq!(r.len(), 2);
        // A success after the interval wakes everyone again.
        assert_eq!(r.passed("v1", t0 + CANARY_INTERVAL), ["v2"]);
    }
}
