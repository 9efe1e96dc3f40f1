//! When a Workload waiting in a LocalQueue will likely be admitted (`status.kueue.
//! estimatedStartTime`). Kueue shows a position in line but no ETA; this estimates one from the
//! position and the hold times observed so far in the same LocalQueue:
//!
//! - the Workloads of the queue admitted now are its slots, each free again once it has held its
//!   quota for the mean hold time (one already past it frees at once);
//! - so is a slot being handed over: a hold that ended while others waited, whose next admission
//!   has not been seen yet (without it, an estimate made in that second counted one slot less
//!   and doubled the wait);
//! - each freed slot admits the next in line after the mean hand-over time (a hold's end to the
//!   next admission: Kueue's reaction and the operator's), and that one then holds it for the
//!   mean hold time;
//! - position `p` is admitted when the `p`-th slot is handed over.
//!
//! Hold times are admission (the Workload's `Admitted` condition, Kueue's own timestamp) to the
//! end of the hold (the Workload released, deleted, or no longer admitted), of this operator's
//! own Workloads of that LocalQueue: a namespace's estimate never reads another namespace's
//! runs. The record is in memory: after a restart or a leader change the holders are found again
//! at their objects' first passes, and an estimate appears once a hold has ended again.
//!
//! Times here are Kueue's: wall-clock time, as Kueue stamps its conditions, not the controllers'
//! clock (which follows an emulated cloud in tests and in `local`).
//!
//! It assumes the queue's Workloads are alike (each one frees room for the next) and that the
//! line keeps its order; a higher priority arriving, or quota borrowed from a cohort, moves the
//! actual start, and the estimate follows at the next pass (the line moving wakes the waiters).

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, HashSet, VecDeque},
    sync::Mutex,
    time::Duration,
};

use chrono::{DateTime, Utc};

/// How many of the last hold times the mean is taken over.
const SAMPLES: usize = 20;

/// Where the line stands: when each slot's holder was admitted, who waits, the slots being
/// handed over, and the hold times seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Line {
    /// Admission time of each Workload admitted now, by Workload name.
    holding: HashMap<String, DateTime<Utc>>,
    /// The Workloads seen waiting (pending) and not admitted or gone since.
    waiting: HashSet<String>,
    /// When holds ended while Workloads waited, not yet followed by an admission (oldest first).
    handing_over: VecDeque<DateTime<Utc>>,
    /// The last [`SAMPLES`] hold times, oldest first.
    held: VecDeque<Duration>,
    /// The last [`SAMPLES`] hand-over times (a hold's end to the next admission), oldest first.
    handed_over: VecDeque<Duration>,
}

/// Adds a sample, keeping the last [`SAMPLES`].
fn push(samples: &mut VecDeque<Duration>, sample: Duration) {
    if samples.len() == SAMPLES {
        samples.pop_front();
    }
    samples.push_back(sample);
}

fn mean(samples: &VecDeque<Duration>) -> Option<Duration> {
    let n = u32::try_from(samples.len()).ok().filter(|n| *n > 0)?;
    Some(samples.iter().sum::<Duration>() / n)
}

impl Line {
    fn admitted(&mut self, workload: &str, since: DateTime<Utc>) {
        self.waiting.remove(workload);
        if self.holding.insert(workload.into(), since).is_none()
            && let Some(end) = self.handing_over.pop_front()
        {
            // Kueue stamps whole seconds: an admission can read as before the end.
            let gap = (since - end).to_std().unwrap_or_default();
            if self.mean_hold().is_none_or(|hold| gap < hold) {
                push(&mut self.handed_over, gap);
            }
        }
    }

    fn ended(&mut self, workload: &str, now: DateTime<Utc>) {
        self.waiting.remove(workload);
        let Some(since) = self.holding.remove(workload) else {
            return;
        };
        push(&mut self.held, (now - since).to_std().unwrap_or_default());
        if !self.waiting.is_empty() && self.handing_over.len() < SAMPLES {
            self.handing_over.push_back(now);
        }
    }

    fn mean_hold(&self) -> Option<Duration> {
        mean(&self.held)
    }

    /// The estimated admission of the Workload at `position` (1 = next), `None` while nothing
    /// can be said: no hold has ended yet, or no Workload of this queue holds quota (what it
    /// waits for is held elsewhere).
    pub fn estimate(&self, position: i32, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let hold = self.mean_hold()?;
        let hand_over = mean(&self.handed_over).unwrap_or_default();
        let since = |t: &DateTime<Utc>| (now - *t).to_std().unwrap_or_default();
        let mut slots: Vec<Duration> = self
            .holding
            .values()
            .map(|admitted| hold.saturating_sub(since(admitted)) + hand_over)
            .collect();
        // A hand-over not followed by an admission within a hold went elsewhere (another
        // LocalQueue of the ClusterQueue, a cohort): it is no slot of this line.
        let handing = self.handing_over.iter().filter(|end| since(end) < hold);
        slots.extend(handing.map(|end| hand_over.saturating_sub(since(end))));
        let wait = admitted_after(slots, hold + hand_over, position)?;
        Some(now + chrono::Duration::from_std(wait).ok()?)
    }
}

/// The wait until the `position`-th admission when `slots` are handed over after these waits
/// and each admitted Workload then keeps its slot for `cycle` (a hold and a hand-over; `None`:
/// no slots, or no position).
fn admitted_after(slots: Vec<Duration>, cycle: Duration, position: i32) -> Option<Duration> {
    if slots.is_empty() || position < 1 {
        return None;
    }
    let mut frees: BinaryHeap<Reverse<Duration>> = slots.into_iter().map(Reverse).collect();
    for _ in 1..position {
        let Reverse(next) = frees.pop()?;
        frees.push(Reverse(next + cycle));
    }
    frees.pop().map(|Reverse(at)| at)
}

/// The lines of every LocalQueue the operator's gated objects wait in, by (namespace, queue);
/// shared by every gated kind's passes (Workload names differ between kinds).
#[derive(Default)]
pub struct Lines {
    inner: Mutex<HashMap<(String, String), Line>>,
}

impl Lines {
    fn with<T>(&self, namespace: &str, queue: &str, f: impl FnOnce(&mut Line) -> T) -> T {
        let mut lines = self.inner.lock().expect("lines poisoned");
        f(lines.entry((namespace.into(), queue.into())).or_default())
    }

    /// `workload` of `namespace`/`queue` waits in line (pending).
    pub fn waiting(&self, namespace: &str, queue: &str, workload: &str) {
        self.with(namespace, queue, |line| line.waiting.insert(workload.into()));
    }

    /// `workload` of `namespace`/`queue` is admitted since `since`.
    pub fn admitted(&self, namespace: &str, queue: &str, workload: &str, since: DateTime<Utc>) {
        self.with(namespace, queue, |line| line.admitted(workload, since));
    }

    /// `workload` of `namespace`/`queue` holds no quota and waits no more (from `now`): its
    /// hold time is recorded when it was seen admitted.
    pub fn ended(&self, namespace: &str, queue: &str, workload: &str, now: DateTime<Utc>) {
        self.with(namespace, queue, |line| line.ended(workload, now));
    }

    /// The estimated admission of the Workload at `position` of `namespace`/`queue`.
    pub fn estimate(
        &self,
        namespace: &str,
        queue: &str,
        position: i32,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let lines = self.inner.lock().expect("lines poisoned");
        lines
            .get(&(namespace.into(), queue.into()))?
            .estimate(position, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn each_freed_slot_admits_the_next_in_line() {
        // Two slots free in 10 s and 30 s; each admitted Workload then holds 60 s.
        let slots = || vec![secs(30), secs(10)];
        let at = |p| admitted_after(slots(), secs(60), p);
        assert_eq!(at(1), Some(secs(10)));
        assert_eq!(at(2), Some(secs(30)));
        assert_eq!(at(3), Some(secs(70)));
        assert_eq!(at(4), Some(secs(90)));
        assert_eq!(at(5), Some(secs(130)));
        assert_eq!(at(0), None);
        assert_eq!(admitted_after(Vec::new(), secs(60), 1), None);
    }

    #[test]
    fn the_estimate_follows_the_holders_and_the_mean_hold() {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let lines = Lines::default();
        lines.admitted("team-a", "tpu", "a", at(0));
        lines.admitted("team-a", "tpu", "b", at(0));
        // No hold has ended yet: nothing to go on.
        assert_eq!(lines.estimate("team-a", "tpu", 1, at(10)), None);
        lines.ended("team-a", "tpu", "a", at(100));
        lines.admitted("team-a", "tpu", "c", at(100));
        // Mean hold 100 s; b (admitted at 0) frees at 100, c at 200; the next then hold 100 s.
        assert_eq!(lines.estimate("team-a", "tpu", 1, at(100)), Some(at(100)));
        assert_eq!(lines.estimate("team-a", "tpu", 2, at(100)), Some(at(200)));
        assert_eq!(lines.estimate("team-a", "tpu", 3, at(100)), Some(at(200)));
        assert_eq!(lines.estimate("team-a", "tpu", 4, at(100)), Some(at(300)));
        // The estimate is a time, not a countdown: the same one at a later pass.
        assert_eq!(lines.estimate("team-a", "tpu", 4, at(150)), Some(at(300)));
        lines.ended("team-a", "tpu", "b", at(300));
        // Mean (100 + 300) / 2 = 200: c frees at 300.
        assert_eq!(lines.estimate("team-a", "tpu", 1, at(300)), Some(at(300)));
        assert_eq!(lines.estimate("team-a", "tpu", 2, at(300)), Some(at(500)));
        // Another namespace's queue of the same name knows nothing of these.
        assert_eq!(lines.estimate("team-b", "tpu", 1, at(300)), None);
        // An end never seen admitted records nothing.
        lines.ended("team-a", "tpu", "z", at(300));
        assert_eq!(lines.estimate("team-a", "tpu", 2, at(300)), Some(at(500)));
    }

    #[test]
    fn a_slot_being_handed_over_is_still_a_slot() {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let lines = Lines::default();
        lines.admitted("ns", "q", "a", at(0));
        lines.admitted("ns", "q", "b", at(50));
        lines.waiting("ns", "q", "c");
        lines.waiting("ns", "q", "d");
        // a ends at 100 s with c and d waiting; c's admission is not seen yet.
        lines.ended("ns", "q", "a", at(100));
        // Two slots, not one: the handed-over one now, b's at 150 s.
        assert_eq!(lines.estimate("ns", "q", 1, at(100)), Some(at(100)));
        assert_eq!(lines.estimate("ns", "q", 2, at(100)), Some(at(150)));
        // c admitted 1 s after a's end: the hand-over is done (1 s, added to every later one),
        // and c holds the slot.
        lines.admitted("ns", "q", "c", at(101));
        assert_eq!(lines.estimate("ns", "q", 1, at(101)), Some(at(151)));
        assert_eq!(lines.estimate("ns", "q", 2, at(101)), Some(at(202)));
        // An end while nobody waits hands nothing over.
        lines.ended("ns", "q", "d", at(110));
        lines.ended("ns", "q", "b", at(150));
        assert_eq!(lines.estimate("ns", "q", 1, at(150)), Some(at(202)));
        // A hand-over no admission followed within a hold went elsewhere.
        lines.waiting("ns", "q", "e");
        lines.ended("ns", "q", "c", at(200));
        assert_eq!(lines.estimate("ns", "q", 1, at(200)), Some(at(201)));
        assert_eq!(lines.estimate("ns", "q", 1, at(400)), None);
    }

    #[test]
    fn the_mean_is_over_the_last_holds() {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let lines = Lines::default();
        for i in 0..SAMPLES + 5 {
            let hold = if i < 5 { 1_000 } else { 60 };
            let name = i.to_string();
            lines.admitted("ns", "q", &name, t0);
            lines.ended("ns", "q", &name, t0 + chrono::Duration::seconds(hold));
        }
        lines.admitted("ns", "q", "now", t0);
        let eta = lines.estimate("ns", "q", 1, t0).unwrap();
        assert_eq!(eta, t0 + chrono::Duration::seconds(60));
    }
}
