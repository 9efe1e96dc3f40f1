//! The API semantics, independent of HTTP: a [`Cluster`] holds the registry of served resources
//! and the store behind one lock; every write runs the apiserver's pipeline (status split,
//! server-owned metadata, validation, generation, managed fields, no-op detection) and then the
//! controllers a real control plane runs (garbage collector, namespace and CRD cleanup).

mod admission;
mod cleanup;
mod create;
mod delete;
mod read;
mod write;

pub use delete::{DeleteOptions, DeleteOutcome, Propagation};
pub use read::{ListOptions, ListResult};
pub use write::{FieldValidation, PatchType, WriteOptions, WriteOutcome};

use crate::errors::{ApiError, ApiResult, Subject};
use crate::events;
use crate::resources::{Registry, ResourceType};
use crate::ssa::Scope;
use crate::store::{ObjRef, Store};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// Tunables of the emulated control plane.
#[derive(Clone, Debug)]
pub struct Config {
    /// Watch events kept for resuming watches; older resourceVersions get 410 Gone.
    pub history_limit: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Watch duration when the request sets no `timeoutSeconds` (the apiserver picks 30-60 min).
    pub default_watch_timeout: Duration,
    /// Give each new object a uid derived from its resource, namespace and name (and how many
    /// objects of that name were created before it), instead of a random one: the same writes
    /// then give the same uids on every run (`tpu-operator local`, whose output prints names
    /// and links made from uids, must be the same on every run).
    pub stable_uids: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            history_limit: 50_000,
            bookmark_interval: Duration::from_secs(10),
            default_watch_timeout: Duration::from_secs(1800),
            stable_uids: false,
        }
    }
}

/// Follow-up work of the emulated controllers, run right after the write that caused it.
#[derive(Clone, Debug)]
enum Task {
    /// An object was removed: collect dependents, unblock foreground owners, finish namespaces/CRDs.
    Removed(String, Arc<Value>),
    /// Delete the dependents of a foreground-deleting owner, then check it.
    Foreground(ObjRef),
    /// Drop the `foregroundDeletion` finalizer when no blocking dependent remains.
    ForegroundCheck(ObjRef),
    /// A new or changed object names owners that may not exist.
    Dangling(ObjRef),
    NamespaceCleanup(String),
    NamespaceCheck(String),
    CrdCleanup(String),
    CrdCheck(String),
}

/// Everything behind the lock.
pub struct State {
    pub store: Store,
    pub registry: Registry,
    tasks: VecDeque<Task>,
    /// With [`Config::stable_uids`]: objects created so far per resource, namespace and name.
    stable_uids: Option<std::collections::HashMap<String, u32>>,
}

impl State {
    fn new(config: &Config) -> Self {
        Self {
            store: Store::new(config.history_limit),
            registry: Registry::with_builtins(),
            tasks: VecDeque::new(),
            stable_uids: config.stable_uids.then(Default::default),
        }
    }

    /// The uid of a new object: random, or stable ([`Config::stable_uids`]).
    fn new_uid(&mut self, rt: &ResourceType, ns: &str, name: &str) -> String {
        let Some(created) = &mut self.stable_uids else {
            return uuid::Uuid::new_v4().to_string();
        };
        let key = format!("{}/{}/{ns}/{name}", rt.group, rt.plural);
        let n = created.entry(key.clone()).or_default();
        *n += 1;
        let seed = format!("{key}#{n}");
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, seed.as_bytes()).to_string()
    }

    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.registry.get(group, version, plural)
    }
}

/// The emulated API server's state and semantics.
pub struct Cluster {
    state: Mutex<State>,
    notify: watch::Sender<u64>,
    /// Bumped to end every open watch (an emulated apiserver restart).
    epoch: watch::Sender<u64>,
    pub config: Config,
}

impl Cluster {
    pub fn new(config: Config) -> Self {
        let mut state = State::new(&config);
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let rt = state
                .resolve("", "v1", "namespaces")
                .expect("namespaces are built in");
            let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            state
                .create(&rt, "", body, &WriteOptions::internal())
                .expect("built-in namespace");
        }
        let (notify, _) = watch::channel(state.store.resource_version());
        let (epoch, _) = watch::channel(0);
        Self {
            state: Mutex::new(state),
            notify,
            epoch,
            config,
        }
    }

    /// The state, for reads and for writes through [`Cluster::write`].
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a write under the lock, then the follow-up controller work, then wakes the watches.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> ApiResult<T>) -> ApiResult<T> {
        let (result, rv) = {
            let mut state = self.lock();
            let result = f(&mut state);
            state.run_tasks();
            (result, state.store.resource_version())
        };
        self.notify.send_replace(rv);
        result
    }

    /// A receiver that changes whenever the resourceVersion moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock().resolve(group, version, plural)
    }

    /// Changes when [`Cluster::end_watches`] is called.
    pub fn watch_epoch(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Ends every open watch stream, as an apiserver restart does; clients re-watch.
    pub fn end_watches(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }
}

/// Which part of the object a request addresses.
pub fn scope_for(rt: &ResourceType, subresource: Option<&str>) -> ApiResult<Scope> {
    match (subresource, rt.status_subresource) {
        (None, true) => Ok(Scope::Main),
        (None, false) => Ok(Scope::Whole),
        (Some("status"), true) => Ok(Scope::Status),
        (Some(other), _) => Err(ApiError::not_found_path(&format!("{}/{other}", rt.plural))),
    }
}

/// The object as the request's version serves it.
pub fn to_served(rt: &ResourceType, stored: &Value) -> Value {
    if rt.group == "events.k8s.io" {
        return events::to_events_v1(stored);
    }
    let mut out = stored.clone();
    if let Some(map) = out.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        map.insert("kind".into(), Value::String(rt.kind.clone()));
    }
    out
}

/// The object as stored (storage version; core shape for Events).
pub fn to_stored(rt: &ResourceType, served: &Value) -> Value {
    let mut out = if rt.group == "events.k8s.io" {
        events::to_core(served)
    } else {
        served.clone()
    };
    if let Some(map) = out.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(rt.storage_api_version.clone()));
        map.insert("kind".into(), Value::String(rt.kind.clone()));
    }
    out
}

pub fn subject<'a>(rt: &'a ResourceType, name: &'a str) -> Subject<'a> {
    Subject {
        group: &rt.group,
        resource: &rt.plural,
        name,
    }
}

pub fn obj_ref(rt: &ResourceType, ns: &str, name: &str) -> ObjRef {
    ObjRef {
        storage_key: rt.storage_key.clone(),
        key: (if rt.namespaced { ns } else { "" }.to_string(), name.to_string()),
    }
}

#[cfg(test)]
mod tests;
