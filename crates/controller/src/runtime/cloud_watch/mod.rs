//! A watch on the cloud side: one paged `list` per collection and location replaces a `get` per
//! object per poll while objects wait for a cloud state change.
//!
//! Polling each object every `poll_active` costs a read per object per interval whether or not
//! anything changed; with a thousand objects waiting that is hundreds of reads a second and, on a
//! 2-core operator, seconds of status lag. Instead a reconcile that waits on a cloud resource
//! registers what it last saw ([`CloudWatch::watch`]) and requeues only at `poll_watched` (a
//! backstop). A background task lists each collection that has waiters every `poll_active`, wakes
//! exactly the owners whose resource changed (`Controller::reconcile_on`, fed by
//! [`CloudWatch::triggers`]), and keeps the listed object, which the woken reconcile uses instead
//! of a `get` ([`CloudWatch::take`]).
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

mod registry;

use std::{
    any::TypeId,
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use futures::{StreamExt, channel::mpsc::unbounded, stream::BoxStream};
use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};
use tpu_operator_api::naming::{labels, sanitize_label_value};
use tpu_operator_gcp::{
    GcpError,
    aiplatform_v1::model::{CustomJob, JobState},
    dataproc_v1::model::{Batch, batch::State as BatchState},
    tpu_v2::model::{Node, node::State as NodeState},
};

pub use self::registry::Seen;
use self::registry::{Key, Registry, Sifted, Wake};
use tpu_operator_gcp::Gcp;

use crate::{
    Shutdown,
    runtime::{config::ControllerConfig, settled::Settled},
};

/// A kind of cloud resource the watch can list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collection {
    TpuNodes,
    DataprocBatches,
    VertexJobs,
}

/// One listed resource.
#[derive(Clone, Debug)]
pub enum Listed {
    Node(Box<Node>),
    Batch(Box<Batch>),
    Job(Box<CustomJob>),
}

impl Listed {
    pub fn name(&self) -> &str {
        match self {
            Listed::Node(n) => &n.name,
            Listed::Batch(b) => &b.name,
            Listed::Job(j) => &j.name,
        }
    }

    pub fn state(&self) -> String {
        match self {
            Listed::Node(n) => state_of(&n.state),
            Listed::Batch(b) => state_of(&b.state),
            Listed::Job(j) => state_of(&j.state),
        }
    }
}

/// A cloud resource type the watch lists: which collection holds it, and how it travels as
/// [`Listed`].
pub trait Listable: Sized {
    /// Its state as the API returns it.
    type State: std::fmt::Debug;
    const COLLECTION: Collection;
    fn into_listed(self: Box<Self>) -> Listed;
    fn from_listed(listed: Listed) -> Option<Box<Self>>;
    /// Whether a resource in `state` shows in the watch's listing, so that it can be waited on
    /// (one absent from the listing would wake its owner on every round).
    fn lists(state: &Self::State) -> bool;
}

impl Listable for Node {
    type State = NodeState;
    const COLLECTION: Collection = Collection::TpuNodes;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Node(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Node(n) => Some(n),
            _ => None,
        }
    }

    /// TPU nodes cannot be filtered: every node is listed.
    fn lists(_: &NodeState) -> bool {
        true
    }
}

impl Listable for Batch {
    type State = BatchState;
    const COLLECTION: Collection = Collection::DataprocBatches;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Batch(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Batch(b) => Some(b),
            _ => None,
        }
    }

    fn lists(state: &BatchState) -> bool {
        BATCH_STATES_LISTED.contains(state)
    }
}

impl Listable for CustomJob {
    type State = JobState;
    const COLLECTION: Collection = Collection::VertexJobs;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Job(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Job(j) => Some(j),
            _ => None,
        }
    }

    fn lists(state: &JobState) -> bool {
        JOB_STATES_LISTED.contains(state)
    }
}

/// Dataproc batch states the service leaves on its own: the watch lists only these, so only a
/// batch in one of them may be waited on (any other is absent from the listing, which would wake
/// its owner on every round).
const BATCH_STATES_LISTED: [BatchState; 3] =
    [BatchState::Pending, BatchState::Running, BatchState::Cancelling];

/// Vertex job states the service leaves on its own (the same rule as [`BATCH_STATES_LISTED`]).
const JOB_STATES_LISTED: [JobState; 6] = [
    JobState::Queued,
    JobState::Pending,
    JobState::Running,
    JobState::Cancelling,
    JobState::Updating,
    JobState::Paused,
];

/// `state = A OR state = B ...` for `states`, each name written by `quote`.
fn state_filter<S>(states: &[S], name: fn(&S) -> Option<&str>, quote: fn(&str) -> String) -> String {
    states
        .iter()
        .filter_map(name)
        .map(|n| format!("state = {}", quote(n)))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// How a state is compared between a reconcile's read and a listing.
pub fn state_of(state: &impl std::fmt::Debug) -> String {
    format!("{state:?}")
}

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

    pub(super) fn uid(&self) -> &str {
        &self.uid
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
    /// `poll_watched` while its collection lists, `poll_active` when it cannot be listed (or the
    /// watch is off, or the name is not a full resource name).
    pub fn watch(
        &self,
        collection: Collection,
        name: &str,
        seen: Seen,
        last: Option<Listed>,
        owner: Option<Owner>,
    ) -> Duration {
        self.register(collection, name, seen, last, owner)
    }

    /// `name` of `collection` no longer needs watching.
    pub fn unwatch(&self, collection: Collection, name: &str) {
        if let Some(parent) = parent_of(name) {
            self.registry().unwatch(&(collection, parent), name);
        }
    }

    fn register(
        &self,
        collection: Collection,
        name: &str,
        seen: Seen,
        last: Option<Listed>,
        owner: Option<Owner>,
    ) -> Duration {
        let (Some(parent), Some(owner), true) = (parent_of(name), owner, self.listing()) else {
            return self.settings().active;
        };
        let key = (collection, parent);
        let listing = self
            .registry()
            .watch(key, name.to_owned(), seen, last, owner, Instant::now());
        let settings = self.settings();
        if listing {
            settings.watched.max(settings.active)
        } else {
            settings.active
        }
    }

    /// Whether a lister runs (reconciles called without [`CloudWatch::start`], or with the
    /// watch turned off, poll on their own).
    fn listing(&self) -> bool {
        let lister = self.lister.lock().expect("cloud watch lister poisoned");
        lister.as_ref().is_some_and(|(task, _)| !task.is_finished())
    }

    /// The resource as its owner last read it, while no listing has shown it change (see
    /// [`CloudWatch::watch_read`]).
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
            let started = Instant::now();
            let mut sifted = Sifted::default();
            let result = self
                .list(&key, &mut |page| self.registry().sift(&key, page, &mut sifted))
                .await;
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

/// Every resource of `key` this cluster may be waiting on, a page at a time to `sift`. Dataproc
/// and Vertex are filtered to this cluster's label and to the states that can still change.
impl CloudWatch {
    async fn list(
        &self,
        (collection, parent): &Key,
        sift: &mut (dyn FnMut(&mut dyn Iterator<Item = Listed>) + Send),
    ) -> Result<(), GcpError> {
        let cluster = format!(
            "labels.{} = \"{}\"",
            labels::CLUSTER,
            sanitize_label_value(&self.settings().cluster_id)
        );
        match collection {
            Collection::TpuNodes => {
                let mut page = pages_to(sift, Listed::Node);
                self.gcp.tpu.list_nodes_by_page(parent, &mut page).await
            }
            Collection::DataprocBatches => {
                // Dataproc's filter takes enum names bare, Vertex's quoted.
                let states = state_filter(&BATCH_STATES_LISTED, BatchState::name, str::to_owned);
                let filter = format!("{cluster} AND ({states})");
                let mut page = pages_to(sift, Listed::Batch);
                self.gcp
                    .dataproc
                    .list_batches_by_page(parent, &filter, &mut page)
                    .await
            }
            Collection::VertexJobs => {
                let states = state_filter(&JOB_STATES_LISTED, JobState::name, |n| format!("\"{n}\""));
                let filter = format!("{cluster} AND ({states})");
                let mut page = pages_to(sift, Listed::Job);
                self.gcp
                    .vertex
                    .list_custom_jobs_by_page(parent, &filter, &mut page)
                    .await
            }
        }
    }
}

/// A page handler for `*_by_page` that hands each item, wrapped by `wrap`, to `sift`.
fn pages_to<'a, T: Send + 'a>(
    sift: &'a mut (dyn FnMut(&mut dyn Iterator<Item = Listed>) + Send),
    wrap: fn(Box<T>) -> Listed,
) -> impl FnMut(Vec<T>) + Send + 'a {
    move |page: Vec<T>| sift(&mut page.into_iter().map(|item| wrap(Box::new(item))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_filters_name_the_states_owners_wait_in() {
        assert_eq!(
            state_filter(&BATCH_STATES_LISTED, BatchState::name, str::to_owned),
            "state = PENDING OR state = RUNNING OR state = CANCELLING"
        );
        assert_eq!(
            state_filter(&JOB_STATES_LISTED, JobState::name, |n| format!("\"{n}\"")),
            ["QUEUED", "PENDING", "RUNNING", "CANCELLING", "UPDATING", "PAUSED"]
                .map(|s| format!("state = \"JOB_STATE_{s}\""))
                .join(" OR ")
        );
        assert!(Batch::lists(&BatchState::Running) && !Batch::lists(&BatchState::Succeeded));
        assert!(CustomJob::lists(&JobState::Queued) && !CustomJob::lists(&JobState::Succeeded));
    }

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
