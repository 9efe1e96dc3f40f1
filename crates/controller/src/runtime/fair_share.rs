//! Workers shared fairly between namespaces.
//!
//! kube-runtime's controller runs up to `concurrency` reconciles at once, taken from one queue in
//! due order, whatever their namespace. One namespace with a thousand objects due (a burst of
//! creates, a thousand refused objects looking again) could occupy every worker while another
//! namespace's object waited its turn behind them. A reconcile first takes a slot of its
//! namespace: a namespace holds at most [`FairShare::limit`] of a controller's workers, so some are
//! always free for the others; a reconcile finding its namespace at the limit does nothing and is
//! requeued a moment later ([`FairShare::wait`]), leaving its worker to the next object in the
//! queue.
//!
//! Turned-away objects keep their place: each (kind, namespace) has a line of the objects it
//! turned away, oldest first, and a freed slot goes to the front of that line. Without it, which
//! object found a slot free was chance: the workers left over pop due objects far faster than
//! slots free up, so under sustained demand some objects lost every draw, and new slices went
//! minutes without a first pass (19 of 300 for three minutes on a loaded machine). An object
//! that stops coming back (deleted, or woken no more) leaves the line after [`GONE_AFTER`].
//!
//! Objects too large for the watch cache to keep whole ([`crate::runtime::watched::Cached::is_large`])
//! take a second, process-wide slot ([`FairShare::enter_large`]): such a pass reads the object from
//! the API server and holds it, decoded, for the whole pass, several MiB for the largest objects the
//! CRDs admit. Only [`LARGE_AT_ONCE`] run at once, whatever the kind and namespace, so a namespace
//! filling its share of workers with them costs the operator a few of them at a time, not a worker's
//! worth each (224 such slices once took the operator past its memory limit).

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

/// Passes over large objects that run at once, process-wide: each holds one object of up to
/// etcd's 1.5 MiB (its response body and its decoded copy, several MiB in all).
pub const LARGE_AT_ONCE: usize = 2;

/// A turned-away object not seen again for this long has stopped asking (it is retried within
/// [`FairShare::wait`], at most 800 ms): it leaves the line.
pub const GONE_AFTER: Duration = Duration::from_secs(3);

type Key = (&'static str, String);

/// Reconciles in flight per (kind, namespace), and the line of the objects turned away.
#[derive(Debug, Default)]
struct Share {
    in_flight: usize,
    /// Turned-away objects, oldest first, with when each last asked.
    line: VecDeque<(String, Instant)>,
}

/// Reconciles in flight per (kind, namespace).
#[derive(Debug)]
pub struct FairShare {
    limit: usize,
    shares: Arc<Mutex<HashMap<Key, Share>>>,
    large: Arc<Semaphore>,
}

/// One reconcile's slot; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    key: Key,
    shares: Arc<Mutex<HashMap<Key, Share>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut shares = self.shares.lock().expect("fair share poisoned");
        if let Some(share) = shares.get_mut(&self.key) {
            share.in_flight = share.in_flight.saturating_sub(1);
            if share.in_flight == 0 && share.line.is_empty() {
                shares.remove(&self.key);
            }
        }
    }
}

impl FairShare {
    /// For controllers of `concurrency` workers each: a namespace may hold three quarters of them
    /// (at least one), so a quarter stays free for every other namespace.
    pub fn new(concurrency: u16) -> Self {
        Self {
            limit: (usize::from(concurrency) * 3 / 4).max(1),
            shares: Arc::default(),
            large: Arc::new(Semaphore::new(LARGE_AT_ONCE)),
        }
    }

    /// A slot for a pass over a large object, `None` while [`LARGE_AT_ONCE`] of them run (the
    /// object is requeued after [`FairShare::wait`], as at a namespace's limit).
    pub fn enter_large(&self) -> Option<OwnedSemaphorePermit> {
        self.large.clone().try_acquire_owned().ok()
    }

    /// Reconciles of one kind that one namespace may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot for a reconcile of object `uid` of `kind` in `namespace`. Refused (the object joins
    /// the namespace's line, or keeps its place in it) while the namespace holds its limit, or
    /// while objects turned away before it take the slots left: then when to ask again, soon
    /// near the front of the line (a freed slot waits for it), later behind.
    pub fn enter(&self, kind: &'static str, namespace: &str, uid: &str, salt: i64) -> Result<Slot, Duration> {
        let now = Instant::now();
        match self.enter_at(kind, namespace, uid, now) {
            Some(slot) => Ok(slot),
            None if self.near_front(kind, namespace, uid) => Err(crate::runtime::spread::between(
                uid,
                salt,
                Duration::from_millis(20),
                Duration::from_millis(60),
            )),
            None => Err(Self::wait(uid, salt)),
        }
    }

    /// Whether `uid` is among the first `limit` of its namespace's line: the next slots freed
    /// are for it.
    fn near_front(&self, kind: &'static str, namespace: &str, uid: &str) -> bool {
        let shares = self.shares.lock().expect("fair share poisoned");
        shares
            .get(&(kind, namespace.to_owned()))
            .and_then(|s| s.line.iter().position(|(who, _)| who == uid))
            .is_some_and(|at| at < self.limit)
    }

    fn enter_at(&self, kind: &'static str, namespace: &str, uid: &str, now: Instant) -> Option<Slot> {
        let key = (kind, namespace.to_owned());
        let mut shares = self.shares.lock().expect("fair share poisoned");
        let share = shares.entry(key.clone()).or_default();
        share
            .line
            .retain(|(_, asked)| now.saturating_duration_since(*asked) < GONE_AFTER);
        let free = self.limit.saturating_sub(share.in_flight);
        let place = share.line.iter().position(|(who, _)| who == uid);
        // Ahead of this object: everyone in the line before it, or the whole line if it is new.
        let ahead = place.unwrap_or(share.line.len());
        if ahead >= free {
            match place {
                Some(at) => share.line[at].1 = now,
                None => share.line.push_back((uid.to_owned(), now)),
            }
            return None;
        }
        if let Some(at) = place {
            share.line.remove(at);
        }
        share.in_flight += 1;
        Some(Slot {
            key,
            shares: self.shares.clone(),
        })
    }

    /// When to look again at an object (`uid`) whose namespace was at its limit at `now`
    /// (milliseconds of the controllers' clock): soon, spread out.
    pub fn wait(uid: &str, now: i64) -> Duration {
        crate::runtime::spread::between(uid, now, Duration::from_millis(200), Duration::from_millis(800))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_objects_pass_a_few_at_a_time_whatever_their_namespace() {
        let share = FairShare::new(16);
        let held: Vec<_> = (0..LARGE_AT_ONCE).map(|_| share.enter_large().unwrap()).collect();
        assert!(share.enter_large().is_none(), "at the limit");
        drop(held);
        assert!(share.enter_large().is_some(), "given back when dropped");
    }

    #[test]
    fn a_namespace_holds_at_most_its_share_and_others_still_enter() {
        let share = FairShare::new(16);
        assert_eq!(share.limit(), 12);
        let held: Vec<Slot> = (0..12)
            .map(|i| share.enter("TpuSlice", "team-a", &format!("a-{i}"), 0).unwrap())
            .collect();
        let wait = share
            .enter("TpuSlice", "team-a", "a-12", 0)
            .expect_err("team-a is at its share");
        assert!(
            wait <= Duration::from_millis(60),
            "first in line, it asks again soon: {wait:?}"
        );
        let b = share.enter("TpuSlice", "team-b", "b-0", 0);
        assert!(b.is_ok(), "another namespace still gets a worker");
        assert!(
            share.enter("TrainingPipeline", "team-a", "p-0", 0).is_ok(),
            "each controller has its own workers"
        );
        drop(held);
        assert!(
            share.enter("TpuSlice", "team-a", "a-12", 0).is_ok(),
            "slots come back"
        );
        assert_eq!(
            FairShare::new(1).limit(),
            1,
            "one worker: the namespace may use it"
        );
    }

    /// A freed slot goes to the object turned away longest ago, however many others ask first;
    /// one that stopped asking leaves the line.
    #[test]
    fn turned_away_objects_keep_their_place_in_line() {
        let share = FairShare::new(4); // 3 slots a namespace
        let t0 = Instant::now();
        let enter =
            |uid: &str, at: u64| share.enter_at("TpuSlice", "ns", uid, t0 + Duration::from_millis(at));
        let mut held: Vec<Slot> = ["a", "b", "c"].iter().map(|u| enter(u, 0).unwrap()).collect();
        assert!(enter("new", 10).is_none(), "at the limit: `new` joins the line");
        assert!(enter("late", 20).is_none(), "behind `new`");
        held.pop();
        assert!(enter("late", 30).is_none(), "one slot free, and `new` is ahead");
        assert!(enter("other", 40).is_none(), "nor anyone else's");
        let new = enter("new", 50).expect("the front of the line takes the freed slot");
        held.pop();
        assert!(enter("other", 60).is_none(), "`late` is ahead");
        let late = enter("late", 70).expect("next in line");
        drop((new, late));
        // `other` stops asking; after GONE_AFTER it no longer holds anyone back.
        let much_later = 70 + GONE_AFTER.as_millis() as u64 + 1;
        assert!(
            enter("someone", much_later).is_some(),
            "the line forgot who stopped asking"
        );
        drop(held);
    }
}
