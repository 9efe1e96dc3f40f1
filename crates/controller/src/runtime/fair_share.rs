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
//! minutes without a first pass (19 of 300 for three minutes on a loaded machine). A freed slot
//! wakes the objects at the front of the line (a trigger of the controller, as a watch event
//! would), so it is taken as soon as the queue hands the object out, not when the object's
//! requeue comes round: with passes of a few tens of milliseconds, requeues of 20–60 ms left a
//! slot idle about as long as it worked (at ten thousand objects, status lagged ~20 s at the
//! median, docs/benchmarks.md). The requeues stay as a backstop. An object is woken once until it
//! comes back: a second trigger would queue behind its pass and run it again at once from a
//! cache that does not show the pass's writes yet.
//!
//! An object that stops coming back (deleted before its first pass) leaves the line once objects
//! due [`GONE_AFTER`] after it have come back: the controller's queue hands objects out in due
//! order, so those were served and it was not. Judged by the queue, not the wall clock: a busy
//! controller brings every object back late, and forgetting whoever is later than a fixed time
//! forgets them all, each rejoining behind the objects that joined in the last seconds, so under
//! steady arrivals the oldest never reached the front (in `objects_brought_back_late_keep_their_places`,
//! none of twenty did in 300 passes once slots were free).
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

use futures::{StreamExt, stream::BoxStream};
use kube::{Resource, runtime::reflector::ObjectRef};

// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

/// Passes over large objects that run at once, process-wide: each holds one object of up to
/// etcd's 1.5 MiB (its response body and its decoded copy, several MiB in all).
pub const LARGE_AT_ONCE: usize = 2;

/// A turned-away object is gone from its line once an object due this long after it has come
/// back (each is retried within [`FairShare::wait`], at most 800 ms): the margin covers the queue
/// handing out objects due close together in either order.
pub const GONE_AFTER: Duration = Duration::from_secs(3);

type Key = (&'static str, String);

/// Reconciles in flight per (kind, namespace), and the line of the objects turned away.
#[derive(Debug, Default)]
struct Share {
    in_flight: usize,
    /// Turned-away objects, oldest first.
    line: VecDeque<TurnedAway>,
}

/// An object in its namespace's line (its name, to wake it), and when it was told to ask again.
#[derive(Debug)]
struct TurnedAway {
    uid: String,
    name: String,
    due: Instant,
    /// Woken by a freed slot and not back since: woken once, not again by the next slot freed,
    /// since a second trigger queued behind its pass would run again at once from a cache that
    /// does not show that pass's writes yet (a finalizer added twice, a batch deleted twice).
    woken: bool,
}

impl Share {
    /// `uid`'s place in the line, after forgetting whoever its coming back shows gone: those due
    /// [`GONE_AFTER`] before it that have not come back. Only when it comes back at or after its
    /// time, from the queue: one back early was woken (a watch event, a freed slot) ahead of
    /// the queue's order, which then says nothing of who was served before it.
    fn came_back(&mut self, uid: &str, now: Instant) -> Option<usize> {
        let at = self.line.iter().position(|t| t.uid == uid)?;
        let due = self.line[at].due;
        if now < due {
            return Some(at);
        }
        self.line
            .retain(|t| t.uid == uid || due.saturating_duration_since(t.due) <= GONE_AFTER);
        self.line.iter().position(|t| t.uid == uid)
    }
}

/// Reconciles in flight per (kind, namespace).
#[derive(Debug)]
pub struct FairShare {
    limit: usize,
    inner: Arc<Inner>,
    large: Arc<Semaphore>,
}

/// What the slots share with the [`FairShare`] that gave them.
#[derive(Debug, Default)]
struct Inner {
    shares: Mutex<HashMap<Key, Share>>,
    /// Each kind's controllers, to wake an object (namespace, name) a freed slot is for.
    wakes: Mutex<HashMap<&'static str, Vec<Waker>>>,
}

/// One controller's end of its wakes: the (namespace, name) of an object to run now.
type Waker = tokio::sync::mpsc::UnboundedSender<(String, String)>;

/// One reconcile's slot; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    key: Key,
    limit: usize,
    inner: Arc<Inner>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut shares = self.inner.shares.lock().expect("fair share poisoned");
        let Some(share) = shares.get_mut(&self.key) else {
            return;
        };
        share.in_flight = share.in_flight.saturating_sub(1);
        if share.in_flight == 0 && share.line.is_empty() {
            shares.remove(&self.key);
            return;
        }
        // The free slots are held for the front of the line: wake it to take them now.
        let free = self.limit.saturating_sub(share.in_flight);
        let front: Vec<String> = share
            .line
            .iter_mut()
            .take(free)
            .filter_map(|t| (!std::mem::replace(&mut t.woken, true)).then(|| t.name.clone()))
            .collect();
        drop(shares);
        let (kind, namespace) = (self.key.0, &self.key.1);
        let mut wakes = self.inner.wakes.lock().expect("fair share poisoned");
        if let Some(controllers) = wakes.get_mut(kind) {
            for name in front {
                controllers.retain(|tx| tx.send((namespace.clone(), name.clone())).is_ok());
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
            inner: Arc::default(),
            large: Arc::new(Semaphore::new(LARGE_AT_ONCE)),
        }
    }

    /// A slot for a pass over a large object, `None` while [`LARGE_AT_ONCE`] of them run (the
    /// object is requeued after [`FairShare::wait`], as at a namespace's limit).
    pub fn enter_large(&self) -> Option<OwnedSemaphorePermit> {
        self.large.clone().try_acquire_owned().ok()
    }

    /// The objects of `kind` (`K`'s) a freed slot is for, to run now: a controller's trigger.
    pub fn wakes<K>(&self, kind: &'static str) -> BoxStream<'static, ObjectRef<K>>
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut wakes = self.inner.wakes.lock().expect("fair share poisoned");
        wakes.entry(kind).or_default().push(tx);
        futures::stream::unfold(rx, |mut rx| async move {
            let (namespace, name) = rx.recv().await?;
            Some((ObjectRef::new(&name).within(&namespace), rx))
        })
        .boxed()
    }

    /// Reconciles of one kind that one namespace may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot for a reconcile of object `uid` (`name`) of `kind` in `namespace`. Refused (the object joins
    /// the namespace's line, or keeps its place in it) while the namespace holds its limit, or
    /// while objects turned away before it take the slots left: then when to ask again (`salt`
    /// spreads it), soon near the front of the line (a freed slot waits for it), later behind.
    pub fn enter(
        &self,
        kind: &'static str,
        namespace: &str,
        uid: &str,
        name: &str,
        salt: i64,
    ) -> Result<Slot, Duration> {
        self.enter_at(kind, namespace, (uid, name), salt, Instant::now())
    }

    fn enter_at(
        &self,
        kind: &'static str,
        namespace: &str,
        (uid, name): (&str, &str),
        salt: i64,
        now: Instant,
    ) -> Result<Slot, Duration> {
        let key = (kind, namespace.to_owned());
        let mut shares = self.inner.shares.lock().expect("fair share poisoned");
        let share = shares.entry(key.clone()).or_default();
        let place = share.came_back(uid, now);
        let free = self.limit.saturating_sub(share.in_flight);
        // Ahead of this object: everyone in the line before it, or the whole line if it is new.
        let ahead = place.unwrap_or(share.line.len());
        if ahead >= free {
            // Among the first `limit` in line, the next slots freed are for it.
            let wait = if ahead < self.limit {
                crate::runtime::spread::between(
                    uid,
                    salt,
                    Duration::from_millis(20),
                    Duration::from_millis(60),
                )
            } else {
                Self::wait(uid, salt)
            };
            let due = now + wait;
            match place {
                Some(at) => {
                    share.line[at].due = due;
                    share.line[at].woken = false;
                }
                None => share.line.push_back(TurnedAway {
                    uid: uid.to_owned(),
                    name: name.to_owned(),
                    due,
                    woken: false,
                }),
            }
            return Err(wait);
        }
        if let Some(at) = place {
            share.line.remove(at);
        }
        share.in_flight += 1;
        Ok(Slot {
            key,
            limit: self.limit,
            inner: self.inner.clone(),
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
            .map(|i| {
                share
                    .enter("TpuSlice", "team-a", &format!("a-{i}"), &format!("a-{i}"), 0)
                    .unwrap()
            })
            .collect();
        let wait = share
            .enter("TpuSlice", "team-a", "a-12", "a-12", 0)
            .expect_err("team-a is at its share");
        assert!(
            wait <= Duration::from_millis(60),
            "first in line, it asks again soon: {wait:?}"
        );
        let b = share.enter("TpuSlice", "team-b", "b-0", "b-0", 0);
        assert!(b.is_ok(), "another namespace still gets a worker");
        assert!(
            share.enter("TrainingPipeline", "team-a", "p-0", "p-0", 0).is_ok(),
            "each controller has its own workers"
        );
        drop(held);
        assert!(
            share.enter("TpuSlice", "team-a", "a-12", "a-12", 0).is_ok(),
            "slots come back"
        );
        assert_eq!(
            FairShare::new(1).limit(),
            1,
            "one worker: the namespace may use it"
        );
    }

    /// A freed slot wakes the object at the front of the line at once, of its kind's controllers
    /// only; its requeue is only the backstop.
    #[test]
    fn a_freed_slot_wakes_the_front_of_the_line() {
        use futures::FutureExt;
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let share = FairShare::new(4); // 3 slots a namespace
        let mut wakes = share.wakes::<ConfigMap>("TpuSlice");
        let mut others = share.wakes::<Secret>("TrainingPipeline");
        let mut held: Vec<Slot> = ["a", "b", "c"]
            .iter()
            .map(|u| share.enter("TpuSlice", "ns", u, u, 0).unwrap())
            .collect();
        for uid in ["x", "y"] {
            share
                .enter("TpuSlice", "ns", uid, &format!("name-{uid}"), 0)
                .expect_err("at the limit");
        }
        assert!(wakes.next().now_or_never().is_none(), "nothing freed yet");
        held.pop();
        let woken = wakes.next().now_or_never().flatten().expect("the front is woken");
        assert_eq!(
            (woken.name.as_str(), woken.namespace.as_deref()),
            ("name-x", Some("ns"))
        );
        assert!(wakes.next().now_or_never().is_none(), "one slot, one wake");
        assert!(
            others.next().now_or_never().is_none(),
            "another kind's controller is not woken"
        );
        held.pop();
        let woken = wakes.next().now_or_never().flatten().expect("the next is woken");
        assert_eq!(
            woken.name, "name-y",
            "`x` is woken once, not again before it is back"
        );
        assert!(wakes.next().now_or_never().is_none(), "each woken once");
        drop(held);
        assert!(wakes.next().now_or_never().is_none(), "nobody left to wake");
    }

    /// A freed slot goes to the object turned away longest ago, however many others ask first;
    /// one that stopped asking leaves the line once those due after it have come back.
    #[test]
    fn turned_away_objects_keep_their_place_in_line() {
        let share = FairShare::new(4); // 3 slots a namespace
        let t0 = Instant::now();
        let enter = |uid: &str, at: u64| {
            share
                .enter_at("TpuSlice", "ns", (uid, uid), 0, t0 + Duration::from_millis(at))
                .ok()
        };
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
        drop(new);
        // `other` stops asking: however long after, it holds the one free slot for itself
        // until someone due well after it has come back...
        let much_later = 70 + 10 * GONE_AFTER.as_millis() as u64;
        assert!(enter("someone", much_later).is_none(), "`other` is still ahead");
        // ...which `someone` is, back when told: `other` was not, so it is gone.
        let wait = share
            .enter_at(
                "TpuSlice",
                "ns",
                ("someone", "someone"),
                0,
                t0 + Duration::from_millis(much_later),
            )
            .expect_err("still behind `other` until it comes back");
        let back = t0 + Duration::from_millis(much_later) + wait;
        let early = back - Duration::from_millis(1);
        let someone = ("someone", "someone");
        let wait = share
            .enter_at("TpuSlice", "ns", someone, 0, early)
            .expect_err("woken before its time: that says nothing of `other`");
        let back = early + wait;
        assert!(
            share.enter_at("TpuSlice", "ns", someone, 0, back).is_ok(),
            "the line forgot who stopped asking"
        );
        drop((late, held));
    }

    /// A busy controller brings every turned-away object back late, in due order, while new
    /// objects keep joining the line: nobody is forgotten for being late, newcomers do not pass
    /// those ahead, and the freed slots go in line order.
    #[test]
    fn objects_brought_back_late_keep_their_places() {
        use std::{cmp::Reverse, collections::BinaryHeap};
        let share = FairShare::new(4); // 3 slots a namespace
        let t0 = Instant::now();
        let held: Vec<Slot> = ["a", "b", "c"]
            .iter()
            .map(|u| share.enter_at("TpuSlice", "ns", (u, u), 0, t0).unwrap())
            .collect();
        // The controller's queue, handed out in due order, one object every 250 ms (its other
        // work): each comes back seconds after it was due.
        let mut queue: BinaryHeap<Reverse<(Instant, String)>> = BinaryHeap::new();
        let now = std::cell::Cell::new(t0);
        let ask = |uid: String, now: Instant, queue: &mut BinaryHeap<_>| match share.enter_at(
            "TpuSlice",
            "ns",
            (&uid, &uid),
            0,
            now,
        ) {
            Ok(slot) => Some((uid, slot)),
            Err(wait) => {
                queue.push(Reverse((now + wait, uid)));
                None
            }
        };
        for i in 0..20 {
            assert!(
                ask(format!("w-{i:02}"), now.get(), &mut queue).is_none(),
                "at the limit"
            );
        }
        let serve = |round: usize, queue: &mut BinaryHeap<_>| {
            now.set(now.get() + Duration::from_millis(250));
            if round.is_multiple_of(4) {
                // A new object, created now.
                assert!(
                    ask(format!("new-{round:03}"), now.get(), queue).is_none(),
                    "behind the line"
                );
            }
            let Reverse((due, uid)) = queue.pop().unwrap();
            ask(uid, now.get().max(due), queue)
        };
        for round in 0..400 {
            assert!(serve(round, &mut queue).is_none(), "no slot was freed");
        }
        let late = now.get().saturating_duration_since(queue.peek().unwrap().0.0);
        assert!(late > 2 * GONE_AFTER, "the queue runs late: {late:?}");
        drop(held);
        // Slots held until the end: each one entered keeps its slot.
        let entered: Vec<(String, Slot)> = (400..700).filter_map(|round| serve(round, &mut queue)).collect();
        let mut entered: Vec<&str> = entered.iter().map(|(uid, _)| uid.as_str()).collect();
        entered.sort();
        assert_eq!(
            entered,
            ["w-00", "w-01", "w-02"],
            "the first three in line, none forgotten"
        );
    }
}
