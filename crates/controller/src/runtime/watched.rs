//! The Kubernetes side of each controller: a watch of its kind whose cache keeps each object as
//! compact JSON, decoded only by the reconcile that needs it.
//!
//! kube-runtime's `Controller` looks objects up in a reflector `Store<K>` when a trigger fires
//! (a watch event, a cloud-watch wake-up, a requeue). A typed custom resource costs about 4 KiB
//! of heap there (heaptrack, docs/benchmarks.md): every `String`, `Option`, `BTreeMap` and `Vec`
//! is its own allocation with its own padding, for fields no reconcile reads between two passes.
//! [`Cached`] keeps instead the few metadata fields the runtime and the settled-object skip read
//! (name, namespace, uid, resourceVersion, generation, deletionTimestamp) and the rest as the
//! object's JSON, compressed against a dictionary of its kind ([`compressed`]: a converged object's
//! 2–3 KiB of JSON keep a few hundred bytes); [`Cached::decode`] rebuilds the typed object at the
//! start of a reconcile that does work. A reconcile the settled cache skips never decodes.
//!
//! Two things are dropped before the bytes are kept. Server-side apply records, for every field
//! manager (the creator, our status writes, the finalizer patches, kubectl, Argo CD ...), a tree
//! of the fields it owns: `metadata.managedFields`, often the largest part of an object, which no
//! reconcile reads. Client-side `kubectl apply` (and Argo CD's default sync) keeps a second copy
//! of the whole manifest in the `kubectl.kubernetes.io/last-applied-configuration` annotation;
//! reconciles read only this project's own annotations.
//!
//! Owned children (a pipeline's batches and slices) are watched as metadata only: the owner is
//! woken through their ownerReferences, which is all kube-runtime reads of them.

use std::{borrow::Cow, fmt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Resource, ResourceExt,
    core::{NamespaceResourceScope, PartialObjectMeta},
    runtime::{
        Controller, WatchStreamExt,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned, de::Error as _};

use crate::runtime::compressed::{PackError, Packed};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// One cached object of kind `K`: identity metadata plus the object as compressed JSON.
pub struct Cached<K> {
    meta: ObjectMeta,
    json: Packed<K>,
}

/// Why a watched object could not be cached or restored.
pub type CacheError = PackError;

impl<K> Cached<K>
where
    K: Resource + Serialize + DeserializeOwned + 'static,
{
    /// Strips what no reconcile reads and keeps the rest as compressed JSON.
    pub fn new(mut obj: K) -> Result<Self, CacheError> {
        obj.managed_fields_mut().clear();
        obj.annotations_mut().remove(LAST_APPLIED);
        let json = Packed::new(&obj)?;
        let m = obj.meta();
        let meta = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            deletion_timestamp: m.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        };
        Ok(Self { meta, json })
    }

    /// The typed object, as the watch delivered it (minus what [`Cached::new`] dropped).
    pub fn decode(&self) -> Result<K, CacheError> {
        self.json.decode()
    }
}

impl<K> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            json: self.json.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> fmt::Debug for Cached<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("kind", &K::kind(&()))
            .field("namespace", &self.meta.namespace)
            .field("name", &self.meta.name)
            .field("resourceVersion", &self.meta.resource_version)
            .field("json_bytes", &self.json.json_len())
            .field("stored_bytes", &self.json.stored_len())
            .finish()
    }
}

/// Same kind, group, version and plural as `K`, so object references, owner references and
/// requests made for a `Cached<K>` are those of `K`.
impl<K: Resource<DynamicType = ()>> Resource for Cached<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The watch decodes each event straight into its cache entry: the typed object (so a malformed
/// one fails here, as it would for `K`) lives only until it is re-encoded.
impl<'de, K> Deserialize<'de> for Cached<K>
where
    K: Resource + Serialize + DeserializeOwned + 'static,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let obj = K::deserialize(deserializer)?;
        Self::new(obj).map_err(D::Error::custom)
    }
}

/// The same object reference, typed for the cache (what the cloud watch sends is typed by kind).
pub fn cached_ref<K: Resource<DynamicType = ()>>(object: ObjectRef<K>) -> ObjectRef<Cached<K>> {
    let mut typed = ObjectRef::new(&object.name);
    typed.namespace = object.namespace;
    typed.extra = object.extra;
    typed
}

/// An `Api` over `namespace`, or over every namespace.
fn watched_api<K>(client: &kube::Client, namespace: Option<&str>) -> kube::Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    }
}

/// A controller of the `K`s in `namespace` (all: `None`), cached compactly.
pub fn controller<K>(client: &kube::Client, namespace: Option<&str>) -> Controller<Cached<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    K: Clone + Serialize + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let api = watched_api::<Cached<K>>(client, namespace);
    let (reader, writer) = reflector::store();
    let objects = watcher(api, watcher::Config::default())
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(objects, reader)
}

/// The metadata of the `K`s the operator watches, for a controller that only needs their owner
/// references.
pub fn metadata<K>(
    client: &kube::Client,
    namespace: Option<&str>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    K: Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    watcher(
        watched_api::<PartialObjectMeta<K>>(client, namespace),
        watcher::Config::default(),
    )
    .modify(|obj: &mut PartialObjectMeta<K>| {
        obj.managed_fields_mut().clear();
        obj.annotations_mut().remove(LAST_APPLIED);
    })
    .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn keeps_the_object_without_managed_fields_or_the_last_applied_copy() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.namespace = Some("team".into());
        cm.metadata.uid = Some("u1".into());
        cm.metadata.resource_version = Some("7".into());
        cm.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..ManagedFieldsEntry::default()
        }]);
        cm.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{...}".to_string()),
                ("tpu-operator.dev/done-uri".to_string(), "gs://b/done".to_string()),
            ]
            .into(),
        );
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        let cached: Cached<ConfigMap> = serde_json::from_value(serde_json::to_value(&cm).unwrap()).unwrap();

        assert_eq!(cached.name_any(), "a");
        assert_eq!(cached.namespace().as_deref(), Some("team"));
        assert_eq!(cached.resource_version().as_deref(), Some("7"));
        assert_eq!(ObjectRef::from_obj(&cached).to_string(), "ConfigMap.v1./a.team");
        let back = cached.decode().unwrap();
        assert!(
            back.metadata
                .managed_fields
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        );
        assert_eq!(
            back.annotations().keys().collect::<Vec<_>>(),
            ["tpu-operator.dev/done-uri"]
        );
        assert_eq!(back.data, cm.data);
    }

    #[test]
    fn a_reference_typed_by_kind_names_the_same_cached_object() {
        let r: ObjectRef<ConfigMap> = ObjectRef::new("a").within("team");
        let c = cached_ref(r);
        assert_eq!((c.name.as_str(), c.namespace.as_deref()), ("a", Some("team")));
    }
}
