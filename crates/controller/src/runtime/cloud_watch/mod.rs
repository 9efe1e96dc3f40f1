//! A watch on the cloud side: one paged `list` per collection and location replaces a `get` per
//! object per poll while objects wait for a cloud state change.
//!
//! Polling each object every `poll_active` costs a read per object per interval whether or not
//! anything changed; with a thousand objects waiting that is hundreds of reads a second and, on a
//! 2-core operator, seconds of status lag. Instead a reconcile that waits on a cloud resource
//! registers what it last saw ([`CloudWatch::watch`]) and requeues only at `poll_watched` (a
//! backstop). A background task lists each collection that has waiters every `poll_active`, wakes
//! exactly the owners whose resource changed (`Controller::reconcile_on`, fed by
//! [`CloudWatch::triggers`]), and keeps the listed object (compressed, `packed.rs`), which the
//! woken reconcile uses instead of a `get` ([`CloudWatch::take`]).
//!
//! Nothing here names the Kubernetes kinds: an [`Owner`] is any reconciled object, and each
//! controller asks for its own kind's wake-ups. The cloud resource types are [`Listable`].
//!
//! Safety rules:
//! - Absence is never taken from a listing: a resource a listing does not show wakes its owner
//!   without a listed object, so the owner reads it by name. Creates still follow only an
//!   authoritative `get` (the at-most-once rule of every controller).
//! - A listing that started before a registration cannot wake it (it may predate what the
//!   reconcile saw).
//! - Dataproc and Vertex listings keep only non-terminal states (finished objects stay listed in
//!   those APIs for days); a resource that finished drops out of the listing and its owner reads
//!   it. TPU nodes cannot be filtered and are listed whole.
//! - When a collection cannot be listed (no `list` permission, an outage) every owner waiting on
//!   it is woken and polls on its own at `poll_active` until listing works again.

mod list;
mod listed;
mod packed;
mod registry;

use std::{
    any::TypeId,
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use futures::{StreamExt, channel::mpsc::unbounded, stream::BoxStream};
use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};

pub use self::listed::{Collection, Listable, Listed, node_seen, state_of};
pub use self::registry::Seen;
use self::registry::{Key, Registry, Sifted, Wake};
use tpu_operator_gcp::{ErrorKind, Gcp, GcpError};

use crate::runtime::{config::ControllerConfig, settled::Settled, shutdown::Shutdown};

/// The object that waits on a cloud resource: any reconciled kind, woken through the stream its
/// controller took from [`CloudWatch::triggers`].
#[derive(Clone, Debug)]
pub struct Owner {
    uid: String,
    kind: TypeId,
    namespace: Option<String>,
    name: String,
}

impl Owner {
    /// `None` for an object without a UID (not yet stored): it cannot be told from a successor.
    pub fn of<K: Resource + 'static>(obj: &K) -> Option<Self> {
        Some(Self {
            uid: obj.uid()?,
            kind: TypeId::of::<K>(),
            namespace: obj.namespace(),
            name: obj.name_any(),
        })
    }

    /// An object of kind `K` known by `meta`'s metadata (the watch cache's copy of a `K`, whose
    /// own type is not `K`); `None` without a UID.
    pub fn of_kind<K: 'static>(meta: &impl Resource) -> Option<Self> {
        Some(Self {
            uid: meta.uid()?,
            kind: TypeId::of::<K>(),
            namespace: meta.namespace(),
            name: meta.name_any(),
        })
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The same object (UID and kind).
    pub fn same(&self, other: &Owner) -> bool {
        self.uid == other.uid && self.kind == other.kind
    }
}

/// Sends an owner's wake-up into its kind's controller stream.
type Trigger = Box<dyn Fn(&Owner) + Send + Sync>;

/// What the watch keeps of the [`ControllerConfig`]: copied when a run starts.
#[derive(Clone, Debug)]
struct Settings {
    /// A listing round, and the poll of an owner whose collection cannot be listed.
    active: Duration,
    /// The backstop poll of an owner whose resource a listing covers.
    watched: Duration,
    /// The round of a collection whose owners wait for capacity.
    capacity: Duration,
    /// This cluster's label value: only its own resources are listed.
    cluster_id: String,
}

impl Settings {
    fn of(config: &ControllerConfig) -> Self {
        Self {
            active: config.poll_active,
            watched: config.poll_watched,
            capacity: config.poll_capacity,
            cluster_id: config.cluster_id.clone(),
        }
    }
}

pub struct CloudWatch {
    registry: Mutex<Registry>,
    /// By the owner kind's `TypeId`: the stream of the controller of that kind that asked last.
    triggers: Mutex<HashMap<TypeId, Trigger>>,
    /// The running lister and the shutdown it stops with.
    lister: Mutex<Option<(tokio::task::JoinHandle<()>, Shutdown)>>,
    /// What lists (the same clients the reconciles read with).
    gcp: Gcp,
    settings: Mutex<Settings>,
    /// A woken owner's settled entry is dropped, so its pass reads instead of skipping.
    settled: Arc<Settled>,
}

/// `projects/<p>/locations/<l>` of a full resource name.
fn parent_of(name: &str) -> Option<String> {
    let mut parts = name.splitn(5, '/');
    let parent: Vec<&str> = parts.by_ref().take(4).collect();
    (parent.len() == 4 && parent[0] == "projects" && parent[2] == "locations" && parts.next().is_some())
        .then(|| parent.join("/"))
}

impl CloudWatch {
    /// A watch listing with `gcp` at `config`'s intervals (as [`CloudWatch::start`] finds
    /// them); it wakes owners through `settled`.
    pub fn new(gcp: Gcp, config: &ControllerConfig, settled: Arc<Settled>) -> Self {
        Self {
            registry: Mutex::default(),
            triggers: Mutex::default(),
            lister: Mutex::new(None),
            gcp,
            settings: Mutex::new(Settings::of(config)),
            settled,
        }
    }

    fn settings(&self) -> Settings {
        self.settings
            .lock()
            .expect("cloud watch settings poisoned")
            .clone()
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().expect("cloud watch registry poisoned")
    }

    /// `owner` waits for the resource `name` of `collection` to leave the state `seen` (`last`:
    /// the resource as read, reused by [`CloudWatch::unchanged`] until a listing shows it change,
    /// for owners woken by other things than their own changes). Returns when to poll it anyway:
    /// `Some(poll_watched)` while its collection lists; `None` when it cannot be listed (or the
    /// watch is off, or the name is not a full resource name): the owner polls on its own.
    pub fn watch(
        &self,
        collection: Collection,
        name: &str,
        seen: Seen,
        last: Option<Listed>,
        owner: Option<Owner>,
    ) -> Option<Duration> {
        let (Some(parent), Some(owner), true) = (parent_of(name), owner, self.listing()) else {
            return None;
        };
        let key = (collection, parent);
        let listing = self
            .registry()
            .watch(key, name.to_owned(), seen, last, owner, Instant::now());
        let settings = self.settings();
        listing.then(|| settings.watched.max(settings.active))
    }

    /// How often an owner whose resource cannot be listed polls it while it changes.
    pub fn unlisted_poll(&self) -> Duration {
        self.settings().active
    }

    /// `name` of `collection` no longer needs watching.
    pub fn unwatch(&self, collection: Collection, name: &str) {
        if let Some(parent) = parent_of(name) {
            self.registry().unwatch(&(collection, parent), name);
        }
    }

    /// Whether a lister runs (reconciles called without [`CloudWatch::start`], or with the
    /// watch turned off, poll on their own).
    fn listing(&self) -> bool {
        let lister = self.lister.lock().expect("cloud watch lister poisoned");
        lister.as_ref().is_some_and(|(task, _)| !task.is_finished())
    }

    /// The resource as its owner last read it, while no listing has shown it change (see
    /// [`CloudWatch::watch`], its `last`).
    pub fn unchanged<T: Listable>(&self, name: &str) -> Option<T> {
        let key = (T::COLLECTION, parent_of(name)?);
        let max_age = self.settings().watched / 2;
        let listed = self.registry().unchanged(&key, name, Instant::now(), max_age)?;
        T::from_listed(listed).map(|r| *r)
    }

    /// The resource as the listing that woke its owner showed it.
    pub fn take<T: Listable>(&self, name: &str) -> Option<T> {
        let listed = self.registry().take(&(T::COLLECTION, parent_of(name)?), name)?;
        T::from_listed(listed).map(|r| *r)
    }

    /// The wake-ups of owners of kind `K` from now on, for the controller of `K` that asks last
    /// (a leader that lost its lease and won it again runs new controllers on the same context).
    pub fn triggers<K>(&self) -> BoxStream<'static, ObjectRef<K>>
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        let (tx, rx) = unbounded::<ObjectRef<K>>();
        let trigger: Trigger = Box::new(move |owner: &Owner| {
            let object = ObjectRef::new(&owner.name);
            let object = match &owner.namespace {
                Some(ns) => object.within(ns),
                None => object,
            };
            // Fails only when no controller of this kind runs; nothing to wake then.
            let _ = tx.unbounded_send(object);
        });
        self.triggers
            .lock()
            .expect("cloud watch triggers poisoned")
            .insert(TypeId::of::<K>(), trigger);
        rx.boxed()
    }

    /// Resources being watched now (for tests and metrics).
    pub fn watched(&self) -> usize {
        self.registry().interests()
    }

    /// Starts the lister for the controllers stopping with `shutdown`, at `config`'s intervals
    /// (every controller calls this; the first one of a run starts it). It stops with `shutdown`
    /// or when the watch is dropped. A new run (a leader that won its lease again) gets a new
    /// lister and forgets what the old run waited on.
    pub fn start(watch: &Arc<Self>, config: &ControllerConfig, shutdown: Shutdown) {
        *watch.settings.lock().expect("cloud watch settings poisoned") = Settings::of(config);
        if !config.watch_lists {
            return;
        }
        let mut lister = watch.lister.lock().expect("cloud watch lister poisoned");
        if let Some((task, running_for)) = lister.as_ref() {
            if running_for.ptr_eq(&shutdown) && !task.is_finished() {
                return;
            }
            task.abort();
        }
        *watch.registry() = Registry::default();
        let task = tokio::spawn(run_lister(Arc::downgrade(watch), shutdown.clone()));
        *lister = Some((task, shutdown));
    }

    /// Wakes `owner` through its controller's stream, as a listing that saw its resource change
    /// would: for an object whose wait ended outside the cloud (a pipeline waiting for another
    /// to finish with a directory both write).
    pub fn wake_owner(&self, owner: &Owner) {
        self.settled.forget_uid(owner.uid());
        let triggers = self.triggers.lock().expect("cloud watch triggers poisoned");
        if let Some(trigger) = triggers.get(&owner.kind) {
            trigger(owner);
        }
    }

    fn wake(&self, wake: Wake) {
        let triggers = self.triggers.lock().expect("cloud watch triggers poisoned");
        for owner in wake {
            // The woken reconcile must read: its object did not change in Kubernetes.
            self.settled.forget_uid(owner.uid());
            if let Some(trigger) = triggers.get(&owner.kind) {
                trigger(&owner);
            }
        }
    }

    /// Lists `key` once, sifting each page against its waiters: when the listing started, what
    /// it found, and whether it got through.
    async fn list_sifted(&self, key: &Key) -> (Instant, Sifted, Result<(), GcpError>) {
        let (started, mut sifted) = (Instant::now(), Sifted::default());
        let result = self
            .list(key, &mut |page| self.registry().sift(key, page, &mut sifted))
            .await;
        (started, sifted, result)
    }

    /// One round: lists every collection that is due and wakes the owners of what changed.
    async fn tick(&self) {
        let settings = self.settings();
        let every = settings.active;
        let now = Instant::now();
        let due = {
            let mut registry = self.registry();
            registry.expire(now, 2 * settings.watched.max(every));
            registry.due(now, every.mul_f32(0.75), settings.capacity)
        };
        for key in due {
            // A paged listing can fail half-way when the collection changes under its page
            // tokens (a filtered list that shrinks as resources finish). One fresh listing
            // first: giving up at once makes every waiter read its resource by name, one call
            // each, until a later round lists again.
            let (mut started, mut sifted, mut result) = self.list_sifted(&key).await;
            if result.as_ref().is_err_and(worth_listing_again) {
                (started, sifted, result) = self.list_sifted(&key).await;
            }
            let wake = match result {
                Ok(()) => self.registry().finish(&key, started, sifted),
                Err(err) => {
                    tracing::warn!(
                        parent = %key.1, collection = ?key.0, error = %err,
                        "cannot list; objects waiting there poll one by one until listing works"
                    );
                    self.registry().failed(&key, Instant::now())
                }
            };
            self.wake(wake);
        }
    }
}

/// A failed listing worth one more try within the round: a blip, or a page token the service
/// no longer accepts (`INVALID_ARGUMENT` after the first page). A refused permission is not: it
/// will be refused again.
fn worth_listing_again(err: &GcpError) -> bool {
    err.is_retryable() || err.kind == ErrorKind::InvalidArgument
}

async fn run_lister(watch: Weak<CloudWatch>, shutdown: Shutdown) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let Some(every) = watch.upgrade().map(|w| w.settings().active) else {
            return;
        };
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some(watch) = watch.upgrade() else {
            return;
        };
        watch.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_is_project_and_location() {
        assert_eq!(
            parent_of("projects/p/locations/us-central1-a/nodes/n1").as_deref(),
            Some("projects/p/locations/us-central1-a")
        );
        assert_eq!(parent_of("projects/p/locations/z"), None);
        assert_eq!(parent_of("nodes/n1"), None);
    }
}
