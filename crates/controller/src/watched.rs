//! The Kubernetes side of each controller: a watch of its kind whose cache keeps objects without
//! `metadata.managedFields` and without kubectl's last-applied annotation.
//!
//! Server-side apply records, for every field manager (the creator, our status writes, the
//! finalizer patches, kubectl, Argo CD ...), a tree of the fields it owns. Deserialized, those
//! trees are a large share of each cached object and no reconcile reads them, so they are
//! dropped as objects arrive; with ten thousand objects that is most of the operator's heap.
//! Client-side `kubectl apply` (and Argo CD's default sync) keeps a second copy of the whole
//! manifest in the `kubectl.kubernetes.io/last-applied-configuration` annotation; reconciles
//! read only this project's own annotations, so that copy is dropped too.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A controller of `api`'s objects, cached without managed fields or the last-applied copy.
pub fn controller<K>(api: Api<K>) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let objects = watcher(api, watcher::Config::default())
        .modify(|obj: &mut K| {
            obj.managed_fields_mut().clear();
            obj.annotations_mut().remove(LAST_APPLIED);
        })
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(objects, reader)
}
