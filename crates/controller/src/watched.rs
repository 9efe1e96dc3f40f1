//! The Kubernetes side of each controller: a watch of its kind whose cache keeps objects without
//! `metadata.managedFields`.
//!
//! Server-side apply records, for every field manager (the creator, our status writes, the
//! finalizer patches, kubectl, Argo CD ...), a tree of the fields it owns. Deserialized, those
//! trees are a large share of each cached object and no reconcile reads them, so they are
//! dropped as objects arrive; with ten thousand objects that is most of the operator's heap.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;

/// A controller of `api`'s objects, cached without managed fields.
pub fn controller<K>(api: Api<K>) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let objects = watcher(api, watcher::Config::default())
        .modify(|obj: &mut K| obj.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(objects, reader)
}
