//! The bookkeeping of the cloud watch, free of I/O: which owners wait on which cloud resource in
//! which state, what a listing changed, and the listed objects a reconcile may use instead of a
//! `get`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use super::{Collection, Listed, Owner, packed::Packed};

/// A collection in one location: `(collection, "projects/<p>/locations/<l>")`.
pub type Key = (Collection, String);

/// What a reconcile last saw of the resource it waits on: its state, or `None` when it does not
/// exist (yet).
pub type Seen = Option<String>;

#[derive(Default)]
pub struct Registry {
    parents: BTreeMap<Key, Parent>,
}

#[derive(Default)]
struct Parent {
    /// By full resource name.
    interests: HashMap<String, Interest>,
    /// Listed objects whose change woke their owner, by full resource name, with when they
    /// were listed: the owner's next observe uses them instead of a `get`. Packed: after a burst
    /// of changes thousands wait here for their owners' passes.
    fresh: HashMap<String, (Packed, Instant)>,
    /// Set while listing this collection fails: owners poll on their own meanwhile.
    failing_since: Option<Instant>,
    last_listed: Option<Instant>,
}

struct Interest {
    owner: Owner,
    seen: Seen,
    /// The object as the reconcile read it, when it asked to reuse it until it changes.
    last: Option<Packed>,
    /// When the reconcile read what it saw: a listing that started earlier may predate it.
    since: Instant,
    /// Whether [`Registry::unchanged`] handed `last` out since the registration: the owner's pass
    /// then read nothing new, and re-registering keeps `since`.
    served: bool,
}

/// Owners to wake.
pub type Wake = Vec<Owner>;

/// What a listing in progress keeps of the pages seen so far: only the resources somebody waits
/// on, and of those only the listed object when it changed. A zone's nodes (startup scripts
/// included) are megabytes a thousand; held whole they were the operator's largest transient.
#[derive(Default)]
pub struct Sifted {
    /// Listed objects whose state differs from what their owner saw, by full resource name
    /// (`None` if it could not be packed: its owner is woken and reads it).
    changed: HashMap<String, Option<Packed>>,
    /// Resources listed in the state their owner saw.
    same: HashSet<String>,
}

impl Registry {
    /// Records that `owner` waits on `name` (in `key`), last seen as `seen`, keeping `last` (the
    /// object as read) for [`Registry::unchanged`]. Returns `false` while this collection cannot
    /// be listed (the owner must poll on its own).
    pub fn watch(
        &mut self,
        key: Key,
        name: String,
        seen: Seen,
        last: Option<Listed>,
        owner: Owner,
        now: Instant,
    ) -> bool {
        let parent = self.parents.entry(key).or_default();
        parent.fresh.remove(&name);
        // A pass that used the kept copy saw nothing newer than the read it came from. Dating
        // the interest anew would let an owner woken more often than its collection is listed
        // (a status refresh every emulated minute) never be judged by a listing, and so never
        // woken by its resource's change, while the copy it reuses never ages.
        let since = match parent.interests.get(&name) {
            Some(i) if i.served && i.seen == seen && i.owner.same(&owner) => i.since,
            _ => now,
        };
        parent.interests.insert(
            name,
            Interest {
                owner,
                seen,
                last: last.as_ref().and_then(Packed::of),
                since,
                served: false,
            },
        );
        parent.failing_since.is_none()
    }

    /// The object as its owner last read it, while no listing has shown it change and the read
    /// is younger than `max_age` (older ones are read again: the watch's backstop).
    pub fn unchanged(&mut self, key: &Key, name: &str, now: Instant, max_age: Duration) -> Option<Listed> {
        let interest = self.parents.get_mut(key)?.interests.get_mut(name)?;
        let listed = (now.duration_since(interest.since) < max_age)
            .then(|| interest.last.as_ref()?.unpack())
            .flatten()?;
        interest.served = true;
        Some(listed)
    }

    /// Drops `name`'s interest (its owner stopped waiting on it).
    pub fn unwatch(&mut self, key: &Key, name: &str) {
        if let Some(parent) = self.parents.get_mut(key) {
            parent.interests.remove(name);
            parent.fresh.remove(name);
        }
    }

    /// The collections to list now: those with interests, listed at most every `every`, and
    /// every `retry` while listing them fails.
    pub fn due(&self, now: Instant, every: Duration, retry: Duration) -> Vec<Key> {
        self.parents
            .iter()
            .filter(|(_, p)| !p.interests.is_empty())
            .filter(|(_, p)| {
                let wait = if p.failing_since.is_some() { retry } else { every };
                p.last_listed.is_none_or(|at| now.duration_since(at) >= wait)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Keeps of one page of a listing of `key` what [`Registry::finish`] needs and drops the
    /// rest. Compared with the interests of the moment: one registered later is newer than the
    /// listing and not judged by it (see `finish`).
    pub fn sift(&self, key: &Key, page: impl IntoIterator<Item = Listed>, sifted: &mut Sifted) {
        let Some(parent) = self.parents.get(key) else {
            return;
        };
        for item in page {
            let Some(interest) = parent.interests.get(item.name()) else {
                continue;
            };
            if Some(item.state()) == interest.seen {
                sifted.same.insert(item.name().to_owned());
            } else {
                sifted.changed.insert(item.name().to_owned(), Packed::of(&item));
            }
        }
    }

    /// The listing of `key` that started at `started` is complete. Wakes the owners whose
    /// resource changed from what they saw (a resource the listing does not show counts as
    /// changed unless it was not seen either), keeping the listed object for them.
    pub fn finish(&mut self, key: &Key, started: Instant, mut sifted: Sifted) -> Wake {
        let Some(parent) = self.parents.get_mut(key) else {
            return Vec::new();
        };
        parent.failing_since = None;
        parent.last_listed = Some(started);
        let changed: Vec<String> = parent
            .interests
            .iter()
            .filter(|(_, i)| i.since <= started)
            .filter(|(name, i)| {
                sifted.changed.contains_key(*name) || (!sifted.same.contains(*name) && i.seen.is_some())
            })
            .map(|(name, _)| name.clone())
            .collect();
        let mut wake = Vec::with_capacity(changed.len());
        for name in changed {
            let interest = parent.interests.remove(&name).expect("listed above");
            if let Some(Some(packed)) = sifted.changed.remove(&name) {
                parent.fresh.insert(name, (packed, started));
            }
            wake.push(interest.owner);
        }
        wake
    }

    /// Listing `key` failed: every owner waiting there is woken to poll on its own.
    pub fn failed(&mut self, key: &Key, now: Instant) -> Wake {
        let Some(parent) = self.parents.get_mut(key) else {
            return Vec::new();
        };
        parent.failing_since.get_or_insert(now);
        parent.last_listed = Some(now);
        parent.interests.drain().map(|(_, i)| i.owner).collect()
    }

    /// The listed object that woke `name`'s owner, if it is still unused.
    pub fn take(&mut self, key: &Key, name: &str) -> Option<Listed> {
        self.parents
            .get_mut(key)?
            .fresh
            .remove(name)
            .and_then(|(packed, _)| packed.unpack())
    }

    /// Forgets interests and listed objects older than `ttl` (owners that were deleted or stopped
    /// waiting without saying so re-register on their next poll), and empty collections.
    pub fn expire(&mut self, now: Instant, ttl: Duration) {
        for parent in self.parents.values_mut() {
            parent.interests.retain(|_, i| now.duration_since(i.since) < ttl);
            parent.fresh.retain(|_, (_, at)| now.duration_since(*at) < ttl);
        }
        self.parents
            .retain(|_, p| !p.interests.is_empty() || !p.fresh.is_empty() || p.failing_since.is_some());
    }

    pub fn interests(&self) -> usize {
        self.parents.values().map(|p| p.interests.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::TpuSlice;
    use tpu_operator_gcp::tpu_v2::model::{Node, node};

    const PARENT: &str = "projects/p/locations/z";

    fn key() -> Key {
        (Collection::TpuNodes, PARENT.into())
    }

    fn name(id: &str) -> String {
        format!("{PARENT}/nodes/{id}")
    }

    fn owner(uid: &str) -> Owner {
        let mut slice = TpuSlice::new(uid, Default::default());
        slice.metadata.namespace = Some("ns".into());
        slice.metadata.uid = Some(uid.into());
        Owner::of(&slice).expect("has a UID")
    }

    fn node(id: &str, state: node::State) -> Listed {
        Listed::Node(Box::new(Node::new().set_name(name(id)).set_state(state)))
    }

    fn creating() -> Seen {
        Some(format!("{:?}", node::State::Creating))
    }

    impl Registry {
        /// A whole listing at once: [`Registry::sift`] then [`Registry::finish`].
        fn listed(&mut self, key: &Key, started: Instant, items: Vec<Listed>) -> Wake {
            let mut sifted = Sifted::default();
            self.sift(key, items, &mut sifted);
            self.finish(key, started, sifted)
        }
    }

    fn uids(wake: &Wake) -> Vec<&str> {
        let mut v: Vec<&str> = wake.iter().map(Owner::uid).collect();
        v.sort();
        v
    }

    #[test]
    fn wakes_only_owners_whose_resource_changed_and_keeps_the_listed_object() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        assert!(r.watch(key(), name("a"), creating(), None, owner("a"), t0));
        assert!(r.watch(key(), name("b"), creating(), None, owner("b"), t0));
        assert!(r.watch(key(), name("c"), None, None, owner("c"), t0));
        assert!(r.watch(key(), name("d"), creating(), None, owner("d"), t0));
        let listing = vec![
            node("a", node::State::Creating),
            node("b", node::State::Ready),
            // c was absent and still is; d vanished; e is nobody's.
            node("e", node::State::Ready),
        ];
        let wake = r.listed(&key(), later, listing);
        assert_eq!(uids(&wake), ["b", "d"]);
        assert!(matches!(r.take(&key(), &name("b")), Some(Listed::Node(n)) if n.state == node::State::Ready));
        assert!(r.take(&key(), &name("b")).is_none(), "used once");
        assert!(
            r.take(&key(), &name("d")).is_none(),
            "gone: the owner must read it"
        );
        assert!(r.take(&key(), &name("e")).is_none());
        assert_eq!(r.interests(), 2, "a and c still wait");
        // The next listing shows c created.
        let wake = r.listed(
            &key(),
            later,
            vec![node("a", node::State::Creating), node("c", node::State::Creating)],
        );
        assert_eq!(uids(&wake), ["c"]);
    }

    #[test]
    fn a_listing_sifted_page_by_page_keeps_only_changed_objects_of_waiters() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        r.watch(key(), name("a"), creating(), None, owner("a"), t0);
        r.watch(key(), name("b"), creating(), None, owner("b"), t0);
        r.watch(key(), name("c"), creating(), None, owner("c"), t0);
        let started = t0 + Duration::from_secs(1);
        let mut sifted = Sifted::default();
        r.sift(
            &key(),
            [node("a", node::State::Creating), node("x", node::State::Ready)],
            &mut sifted,
        );
        r.sift(&key(), [node("b", node::State::Ready)], &mut sifted);
        assert_eq!(sifted.changed.len(), 1, "only b's object is kept");
        assert_eq!(sifted.same.len(), 1, "a is remembered by name");
        // Registered while the listing ran: not judged by it.
        r.watch(
            key(),
            name("d"),
            creating(),
            None,
            owner("d"),
            started + Duration::from_millis(1),
        );
        let wake = r.finish(&key(), started, sifted);
        assert_eq!(uids(&wake), ["b", "c"], "b changed, c vanished");
        assert!(r.take(&key(), &name("b")).is_some());
        assert_eq!(r.interests(), 2, "a and d still wait");
    }

    #[test]
    fn a_listing_older_than_the_registration_wakes_nobody() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        r.watch(
            key(),
            name("a"),
            Some(format!("{:?}", node::State::Ready)),
            None,
            owner("a"),
            t0 + Duration::from_secs(2),
        );
        let wake = r.listed(&key(), t0, vec![node("a", node::State::Creating)]);
        assert!(wake.is_empty());
        assert_eq!(r.interests(), 1);
    }

    #[test]
    fn a_failing_listing_wakes_everyone_and_reports_unhealthy_until_it_lists_again() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let every = Duration::from_secs(2);
        let retry = Duration::from_secs(30);
        r.watch(key(), name("a"), creating(), None, owner("a"), t0);
        assert_eq!(r.due(t0, every, retry), [key()]);
        assert_eq!(uids(&r.failed(&key(), t0)), ["a"]);
        assert!(
            !r.watch(key(), name("a"), creating(), None, owner("a"), t0),
            "owners poll meanwhile"
        );
        assert!(
            r.due(t0 + every, every, retry).is_empty(),
            "failing: retried slowly"
        );
        assert_eq!(r.due(t0 + retry, every, retry), [key()]);
        r.listed(&key(), t0 + retry, vec![node("a", node::State::Creating)]);
        assert!(r.watch(key(), name("a"), creating(), None, owner("a"), t0 + retry));
    }

    #[test]
    fn nothing_to_list_without_interests_and_old_ones_expire() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(120);
        assert!(r.due(t0, Duration::ZERO, Duration::ZERO).is_empty());
        r.watch(key(), name("a"), creating(), None, owner("a"), t0);
        r.expire(t0 + ttl, ttl);
        assert_eq!(r.interests(), 0);
        assert!(r.due(t0 + ttl, Duration::ZERO, Duration::ZERO).is_empty());
        r.watch(key(), name("b"), creating(), None, owner("b"), t0);
        r.unwatch(&key(), &name("b"));
        assert_eq!(r.interests(), 0);
    }

    #[test]
    fn the_last_read_is_reused_only_while_unchanged_and_young() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let max_age = Duration::from_secs(30);
        let last = node("a", node::State::Creating);
        r.watch(key(), name("a"), creating(), Some(last), owner("a"), t0);
        let at = |s| t0 + Duration::from_secs(s);
        assert!(r.unchanged(&key(), &name("a"), at(29), max_age).is_some());
        assert!(
            r.unchanged(&key(), &name("a"), at(30), max_age).is_none(),
            "backstop: read again"
        );
        r.listed(&key(), at(1), vec![node("a", node::State::Ready)]);
        assert!(
            r.unchanged(&key(), &name("a"), at(2), max_age).is_none(),
            "it changed"
        );
    }

    /// An owner woken every second by something else re-registers from the kept copy between
    /// listings that each take longer than that: the listing still judges it, and the copy ages.
    #[test]
    fn re_registering_from_the_kept_copy_does_not_hide_a_change() {
        let mut r = Registry::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let max_age = Duration::from_secs(30);
        let last = || Some(node("a", node::State::Creating));
        r.watch(key(), name("a"), creating(), last(), owner("a"), t0);
        for s in 1..=5 {
            assert!(r.unchanged(&key(), &name("a"), at(s), max_age).is_some());
            r.watch(key(), name("a"), creating(), last(), owner("a"), at(s));
        }
        let wake = r.listed(&key(), at(2), vec![node("a", node::State::Ready)]);
        assert_eq!(uids(&wake), ["a"], "the listing started after the read it judges");
        // A fresh read re-dates the interest: a listing older than it is not judged.
        r.watch(key(), name("a"), creating(), last(), owner("a"), at(10));
        assert!(
            r.listed(&key(), at(9), vec![node("a", node::State::Ready)])
                .is_empty()
        );
        // Reuse keeps the read's age: the backstop still reads again after max_age.
        for s in 11..40 {
            if r.unchanged(&key(), &name("a"), at(s), max_age).is_some() {
                r.watch(key(), name("a"), creating(), last(), owner("a"), at(s));
            }
        }
        assert!(r.unchanged(&key(), &name("a"), at(40), max_age).is_none());
    }
}
