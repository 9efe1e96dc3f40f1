//! Skips reconciles that cannot learn anything new.
//!
//! Every status write comes back as a watch event, and every relist (a watch that ended or
//! expired) replays every object; kube-rs turns each into a reconcile, and each reconcile reads
//! the cloud again. Those reads are pure waste when the object is exactly as the last successful
//! reconcile left it and its next poll is not due: nothing in Kubernetes changed (same
//! `resourceVersion`, which our own status write produced) and the cloud is polled on its own
//! schedule anyway. This cache remembers, per object UID, the `resourceVersion` a successful
//! reconcile left behind and when its next poll is due; a reconcile that finds both unchanged
//! returns the remaining wait without any call.
//!
//! Only for kinds whose reconcile depends on nothing but the object and the cloud (TpuSlice,
//! PreprocessBatch): a TrainingPipeline is also woken by its children, which leave its own
//! `resourceVersion` unchanged. A failed pass settles until its backoff is due, so the watch event
//! of a status it wrote does not repeat the failed call at once; its retry is a full pass.
//!
//! For every kind, a reconcile is also skipped when the cache still shows the version our own
//! last status write replaced ([`Settled::predates_own_write`]): a child or the cloud watch can
//! wake an object between that write and its watch event. Such a pass would compute status from
//! the older object (refused with 409 by the conditional write) after repeating its cloud reads,
//! a pipeline's job lookup by label among them; the write's watch event runs the pass instead.
//! The first pass's write, our finalizer, counts too: a pass from the version before it would
//! add the finalizer again, refused (422) by the helper's test-and-add patch.

use std::{collections::HashMap, sync::Mutex, time::Duration};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use kube::{Resource, ResourceExt, runtime::controller::Action};

#[derive(Default)]
pub struct Settled {
    entries: Mutex<HashMap<String, Entry>>,
    /// By object UID: the `resourceVersion`s our last pass's status writes replaced (two for a
    /// write-ahead marker and the outcome), until the cache shows another.
    superseded: Mutex<HashMap<String, Vec<String>>>,
}

/// How soon a pass skipped for a stale cache looks again, should the watch event of our write
/// not wake it first (it normally does within milliseconds).
const STALE_RECHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Entry {
    /// The `resourceVersion` the object had when the last successful reconcile ended, and when
    /// that reconcile asked to be run again.
    settled: Option<(String, Instant)>,
    /// The `resourceVersion` of a status this reconcile wrote (the object's new version).
    written_rv: Option<String>,
}

impl Settled {
    /// `Some(wait)` when `obj` is exactly as the last successful reconcile left it and its poll
    /// is not due yet. Otherwise drops the entry (a full pass follows). An object being deleted
    /// is skipped only after a deletion pass settled it: setting `deletionTimestamp` gives the
    /// object a new `resourceVersion`, so what the apply path settled never matches.
    pub fn skip<K: Resource>(&self, obj: &K) -> Option<Action> {
        self.skip_at(obj, Instant::now())
    }

    fn skip_at<K: Resource>(&self, obj: &K, now: Instant) -> Option<Action> {
        let (uid, rv) = (obj.uid()?, obj.resource_version()?);
        let mut entries = self.entries.lock().expect("settled cache poisoned");
        if let Some((settled_rv, due)) = entries.get(&uid).and_then(|e| e.settled.as_ref())
            && *settled_rv == rv
            && *due > now
        {
            return Some(Action::requeue(*due - now));
        }
        entries.remove(&uid);
        None
    }

    /// `Some(wait)` when the cache still shows `obj` as it was before our own last status write:
    /// the pass would work from an object older than the server's. The write's watch event wakes
    /// it; `wait` is a backstop.
    pub fn predates_own_write<K: Resource>(&self, obj: &K) -> Option<Action> {
        let (uid, rv) = (obj.uid()?, obj.resource_version()?);
        let mut superseded = self.superseded.lock().expect("settled cache poisoned");
        match superseded.get(&uid) {
            Some(replaced) if replaced.contains(&rv) => Some(Action::requeue(STALE_RECHECK)),
            Some(_) => {
                superseded.remove(&uid);
                None
            }
            None => None,
        }
    }

    /// Our status write replaced version `base` of `obj` with version `written`.
    pub fn replaced<K: Resource>(&self, obj: &K, base: Option<&str>, written: Option<&str>) {
        let (Some(uid), Some(base)) = (obj.uid(), base) else {
            return;
        };
        let mut superseded = self.superseded.lock().expect("settled cache poisoned");
        let replaced = superseded.entry(uid).or_default();
        // A pass's first write starts the list; its second (on the first's version) adds to it.
        if obj.resource_version().as_deref() == Some(base) {
            replaced.clear();
        }
        // A write that changed nothing keeps the version: that version is not stale.
        if written.is_some_and(|w| w != base) && !replaced.iter().any(|r| r == base) {
            replaced.push(base.to_owned());
        }
    }

    /// Our finalizer patch (kube's `finalizer` helper, the only write of that pass, which does
    /// not hand back the new version) replaced `obj`'s version: as stale as a status write's base.
    pub fn finalizer_added<K: Resource>(&self, obj: &K) {
        let (Some(uid), Some(rv)) = (obj.uid(), obj.resource_version()) else {
            return;
        };
        let mut superseded = self.superseded.lock().expect("settled cache poisoned");
        superseded.insert(uid, vec![rv]);
    }

    /// A status write of this reconcile produced `rv`.
    pub fn wrote<K: Resource>(&self, obj: &K, rv: Option<String>) {
        if let Some(uid) = obj.uid() {
            let mut entries = self.entries.lock().expect("settled cache poisoned");
            entries.entry(uid).or_default().written_rv = rv;
        }
    }

    /// The reconcile of `obj` succeeded and wants to run again `after` from now: records the
    /// object's version (the one it wrote, if it wrote status) and returns the requeue.
    pub fn settle<K: Resource>(&self, obj: &K, after: Duration) -> Action {
        self.settle_at(obj, after, Instant::now())
    }

    fn settle_at<K: Resource>(&self, obj: &K, after: Duration, now: Instant) -> Action {
        if let Some(uid) = obj.uid() {
            let mut entries = self.entries.lock().expect("settled cache poisoned");
            let entry = entries.entry(uid).or_default();
            entry.settled = entry
                .written_rv
                .take()
                .or_else(|| obj.resource_version())
                .map(|rv| (rv, now + after));
        }
        Action::requeue(after)
    }

    /// The next reconcile of `obj` must be a full one (it is being deleted).
    pub fn forget<K: Resource>(&self, obj: &K) {
        if let Some(uid) = obj.uid() {
            self.entries.lock().expect("settled cache poisoned").remove(&uid);
        }
    }

    /// The object is gone: nothing of it is kept.
    pub fn gone<K: Resource>(&self, obj: &K) {
        self.forget(obj);
        if let Some(uid) = obj.uid() {
            self.superseded
                .lock()
                .expect("settled cache poisoned")
                .remove(&uid);
        }
    }

    /// Same as [`Settled::forget`], by UID (the object changed in the cloud).
    pub fn forget_uid(&self, uid: &str) {
        self.entries.lock().expect("settled cache poisoned").remove(uid);
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.entries.lock().expect("settled cache poisoned").is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn obj(rv: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.uid = Some("u1".into());
        cm.metadata.resource_version = Some(rv.into());
        cm
    }

    #[test]
    fn skips_a_cached_object_older_than_our_own_write_until_the_cache_moves_on() {
        let s = Settled::default();
        let recheck = Some(Action::requeue(STALE_RECHECK));
        assert!(s.predates_own_write(&obj("1")).is_none(), "no write yet");
        s.replaced(&obj("1"), Some("1"), Some("2"));
        assert_eq!(s.predates_own_write(&obj("1")), recheck, "cache still at 1");
        assert_eq!(s.predates_own_write(&obj("1")), recheck);
        assert!(s.predates_own_write(&obj("2")).is_none(), "our write arrived");
        assert!(
            s.predates_own_write(&obj("1")).is_none(),
            "forgotten once moved on"
        );
        // A marker then the outcome in one pass: 5 -> 6 -> 7; 5 and 6 are both stale.
        s.replaced(&obj("5"), Some("5"), Some("6"));
        s.replaced(&obj("5"), Some("6"), Some("7"));
        assert_eq!(s.predates_own_write(&obj("6")), recheck, "the marker's version");
        assert_eq!(s.predates_own_write(&obj("5")), recheck, "the version read");
        assert!(s.predates_own_write(&obj("7")).is_none());
        // A write that changed nothing leaves the version current.
        s.replaced(&obj("3"), Some("3"), Some("3"));
        assert!(s.predates_own_write(&obj("3")).is_none());
        // The pass that added our finalizer: the version it read is stale until the cache
        // shows the patch.
        s.finalizer_added(&obj("8"));
        assert_eq!(
            s.predates_own_write(&obj("8")),
            recheck,
            "the version the patch replaced"
        );
        assert!(s.predates_own_write(&obj("9")).is_none(), "the patch arrived");
        s.replaced(&obj("3"), Some("3"), Some("4"));
        s.gone(&obj("3"));
        assert!(
            s.predates_own_write(&obj("3")).is_none(),
            "a deleted object keeps nothing"
        );
    }

    #[test]
    fn skips_only_the_unchanged_object_before_its_poll() {
        let s = Settled::default();
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let wait = |secs| Some(Action::requeue(Duration::from_secs(secs)));
        assert!(s.skip_at(&obj("1"), t0).is_none(), "nothing recorded yet");
        s.wrote(&obj("1"), Some("2".into()));
        s.settle_at(&obj("1"), Duration::from_secs(10), t0);
        // The echo of our own write is skipped, with the remaining wait.
        assert_eq!(s.skip_at(&obj("2"), t0), wait(10));
        assert_eq!(s.skip_at(&obj("2"), at(4)), wait(6));
        // Someone else changed the object: full reconcile.
        assert!(s.skip_at(&obj("3"), at(4)).is_none());
        assert!(
            s.skip_at(&obj("2"), at(4)).is_none(),
            "a full pass drops the entry"
        );
        // Settled without a write: the object's own version counts; the poll falls due.
        s.settle_at(&obj("3"), Duration::from_secs(5), at(4));
        assert_eq!(s.skip_at(&obj("3"), at(5)), wait(4));
        assert!(s.skip_at(&obj("3"), at(9)).is_none(), "poll due");
        s.settle_at(&obj("3"), Duration::from_secs(5), at(9));
        s.forget(&obj("3"));
        assert!(s.skip_at(&obj("3"), at(9)).is_none(), "forgotten after a failure");
        assert!(s.is_empty());
        // Deletion gives the object a new version: what the apply path settled does not hold,
        // while what a deletion pass settled (with its own status write) does.
        s.settle_at(&obj("4"), Duration::from_secs(5), t0);
        let deleting = |rv: &str| {
            let mut o = obj(rv);
            o.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
            o
        };
        assert!(s.skip_at(&deleting("5"), t0).is_none());
        s.wrote(&deleting("5"), Some("6".into()));
        s.settle_at(&deleting("5"), Duration::from_secs(5), t0);
        assert_eq!(s.skip_at(&deleting("6"), at(1)), wait(4));
    }
}
