//! What a gated object waits for besides its own Workload, and the watches that wake it when that
//! changes: a WorkloadPriorityClass its label names appearing, and its LocalQueue appearing or
//! changing. Kueue writes a LocalQueue's status (its pending, reserving and admitted counts) within
//! a second of a change among its Workloads (kueue v0.17.0
//! `pkg/controller/core/localqueue_controller.go`, `UpdatesBatchPeriod`), so a waiter's position
//! is read again when the line moves, not at its next poll, which stays only as a backstop.
//!
//! Each pass of a gated object says afresh what it awaits ([`Waiters::set`]); the watches wake
//! exactly the objects awaiting what changed. Both are metadata-only watches: a change's name and
//! namespace are all they need.

use std::{
    collections::{HashMap, HashSet},
    marker::PhantomData,
    sync::{Arc, Mutex},
};

use futures::{Stream, StreamExt, stream};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    core::PartialObjectMeta,
    runtime::{Controller, WatchStreamExt, reflector::ObjectRef, watcher},
};

use super::{queued::Gated, workload::Workload};
use crate::{
    reconcile::kind::{Kind, Watches},
    runtime::watched::Cached,
};

/// What a gated object awaits outside its own Workload.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Awaited {
    /// The WorkloadPriorityClass of this name to exist.
    PriorityClass(String),
    /// LocalQueue `queue` of `namespace` to appear or change (its line moves: positions).
    Queue { namespace: String, queue: String },
}

/// The objects of kind `K` (by namespace and name) and what each awaits, shared by the kind's
/// passes (which set it) and its controller's watches (which read it).
pub struct Waiters<K> {
    inner: Mutex<Inner>,
    kind: PhantomData<fn() -> K>,
}

type Key = (String, String);

#[derive(Default)]
struct Inner {
    by_awaited: HashMap<Awaited, HashSet<Key>>,
    by_object: HashMap<Key, Vec<Awaited>>,
}

impl<K> Default for Waiters<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            kind: PhantomData,
        }
    }
}

impl<K> Waiters<K> {
    /// Replaces what the object `namespace`/`name` awaits (empty: nothing; so is a deleted one).
    pub fn set(&self, namespace: &str, name: &str, awaited: Vec<Awaited>) {
        let key = (namespace.to_string(), name.to_string());
        let mut inner = self.inner.lock().expect("waiters poisoned");
        for before in inner.by_object.remove(&key).unwrap_or_default() {
            if let Some(keys) = inner.by_awaited.get_mut(&before) {
                keys.remove(&key);
                if keys.is_empty() {
                    inner.by_awaited.remove(&before);
                }
            }
        }
        for what in &awaited {
            inner
                .by_awaited
                .entry(what.clone())
                .or_default()
                .insert(key.clone());
        }
        if !awaited.is_empty() {
            inner.by_object.insert(key, awaited);
        }
    }

    /// The objects (namespace, name) awaiting `what`.
    pub fn awaiting(&self, what: &Awaited) -> Vec<Key> {
        let inner = self.inner.lock().expect("waiters poisoned");
        inner
            .by_awaited
            .get(what)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The watches that wake a gated kind while Kueue's integration is on: its objects' Workloads (an
/// admission or an eviction leaves the object itself unchanged) and what they await besides.
pub fn watched<K: Gated + Kind>(
    controller: Controller<Cached<K>>,
    watch: &Watches<'_>,
) -> Controller<Cached<K>> {
    if !watch.kueue {
        return controller;
    }
    let waiters = watch.shared.get_or_default::<Waiters<K>>();
    controller
        .owns_stream(watch.metadata::<Workload>())
        .reconcile_on(wakes(watch.client, watch.namespace, waiters))
}

fn kueue_resource(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// The wake-ups of the `K`s awaiting a WorkloadPriorityClass or a LocalQueue (of `namespace`, or
/// of every namespace) that appeared or changed.
fn wakes<K: Gated>(
    client: &Client,
    namespace: Option<&str>,
    waiters: Arc<Waiters<K>>,
) -> impl Stream<Item = ObjectRef<Cached<K>>> + Send + 'static {
    let classes = kueue_resource("WorkloadPriorityClass", "workloadpriorityclasses");
    let classes: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &classes);
    let queues = kueue_resource("LocalQueue", "localqueues");
    let queues: Api<PartialObjectMeta<DynamicObject>> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &queues),
        None => Api::all_with(client.clone(), &queues),
    };
    let classes = changes(classes).map(|meta| Awaited::PriorityClass(meta.metadata.name.unwrap_or_default()));
    let queues = changes(queues).map(|meta| Awaited::Queue {
        namespace: meta.metadata.namespace.unwrap_or_default(),
        queue: meta.metadata.name.unwrap_or_default(),
    });
    stream::select(classes, queues).flat_map(move |what| {
        let woken = waiters.awaiting(&what).into_iter().map(|(namespace, name)| {
            let mut object = ObjectRef::new(&name);
            object.namespace = Some(namespace);
            object
        });
        stream::iter(woken.collect::<Vec<_>>())
    })
}

/// The objects `api` lists and watches, as each appears or changes. A failing watch (Kueue not
/// installed yet, a missing grant) is retried with backoff and logged as a warning (the waits it
/// would end fall back to their polls meanwhile).
fn changes(
    api: Api<PartialObjectMeta<DynamicObject>>,
) -> impl Stream<Item = PartialObjectMeta<DynamicObject>> + Send + 'static {
    watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(|changed| async move {
            changed
                .inspect_err(|err| tracing::warn!(error = %err, "a Kueue watch failed; retrying"))
                .ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str) -> Awaited {
        Awaited::PriorityClass(name.into())
    }

    #[test]
    fn each_pass_says_afresh_what_an_object_awaits() {
        let waiters = Waiters::<()>::default();
        let queue = Awaited::Queue {
            namespace: "team-a".into(),
            queue: "tpu".into(),
        };
        waiters.set("team-a", "s1", vec![class("high"), queue.clone()]);
        waiters.set("team-a", "s2", vec![queue.clone()]);
        assert_eq!(waiters.awaiting(&class("high")), [("team-a".into(), "s1".into())]);
        assert_eq!(waiters.awaiting(&queue).len(), 2);
        // The class exists now: s1 awaits only its queue's line.
        waiters.set("team-a", "s1", vec![queue.clone()]);
        assert!(waiters.awaiting(&class("high")).is_empty());
        assert_eq!(waiters.awaiting(&queue).len(), 2);
        // Admitted, or deleted: nothing.
        waiters.set("team-a", "s1", Vec::new());
        waiters.set("team-a", "s2", Vec::new());
        assert!(waiters.awaiting(&queue).is_empty());
        let inner = waiters.inner.lock().unwrap();
        assert!(inner.by_awaited.is_empty() && inner.by_object.is_empty());
    }
}
