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
//! What one object may cost the cache is bounded ([`KEPT_BUDGET`]): a larger one is kept lean
//! ([`crate::runtime::lean`]) or, if even that is too large, as its identity alone, and the pass
//! that needs it reads it whole from the API server. A tenant's objects cost the operator at most
//! that budget each, however large the CRDs let them be.
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

use crate::runtime::{
    compressed::{PackError, Packed},
    lean, listing,
};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The most compressed bytes the cache keeps of one object. A converged object keeps a few hundred
/// (docs/benchmarks.md); one with a long startup script a few KiB. Only objects far beyond what a
/// workload needs in the cache are kept lean or as identity.
pub const KEPT_BUDGET: usize = 16 * 1024;

/// An object whose JSON is over this many bytes counts as large, even kept whole (a large object
/// may compress well): its pass holds it decoded, and only a few such passes run at once
/// ([`crate::runtime::fair_share::LARGE_AT_ONCE`]). Ordinary objects are 2–10 KiB.
pub const LARGE_JSON: usize = 128 * 1024;

/// One cached object of kind `K`: identity metadata plus as much of the object as [`KEPT_BUDGET`]
/// allows, as compressed JSON.
pub struct Cached<K> {
    meta: ObjectMeta,
    body: Body<K>,
}

/// How much of an object the cache kept.
enum Body<K> {
    /// All of it (minus what [`Cached::new`] drops for every object).
    Whole(Packed<K>),
    /// All but its long strings ([`lean::elide`]).
    Lean(Packed<K>),
    /// Nothing but the identity in [`Cached`]'s metadata.
    Identity,
}

/// Why a watched object could not be cached or restored.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error(
        "the cache keeps only this object's identity (its JSON is over {KEPT_BUDGET} bytes compressed): read it from the API server"
    )]
    IdentityOnly,
}

impl<K> Cached<K>
where
    K: Resource + Serialize + DeserializeOwned + 'static,
{
    /// Strips what no reconcile reads and keeps the rest as compressed JSON.
    pub fn new(mut obj: K) -> Result<Self, CacheError> {
        obj.managed_fields_mut().clear();
        obj.annotations_mut().remove(LAST_APPLIED);
        let body = Body::within_budget(&obj)?;
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
        Ok(Self { meta, body })
    }

    /// The typed object as the watch delivered it, minus what [`Cached::new`] dropped: for an
    /// object not kept whole ([`Cached::is_whole`]), without its long strings, or not at all.
    pub fn decode(&self) -> Result<K, CacheError> {
        match &self.body {
            Body::Whole(packed) | Body::Lean(packed) => Ok(packed.decode()?),
            Body::Identity => Err(CacheError::IdentityOnly),
        }
    }

    /// Whether [`Cached::decode`] returns the whole object; if not, a pass reads it from the API
    /// server.
    pub fn is_whole(&self) -> bool {
        matches!(self.body, Body::Whole(_))
    }

    /// Whether a pass over this object holds a large one ([`LARGE_JSON`]): not kept whole, or
    /// kept whole but over that size once decoded.
    pub fn is_large(&self) -> bool {
        match &self.body {
            Body::Whole(packed) => packed.json_len() > LARGE_JSON,
            Body::Lean(_) | Body::Identity => true,
        }
    }
}

impl<K> Body<K>
where
    K: Serialize + DeserializeOwned + 'static,
{
    /// The most of `obj` that fits [`KEPT_BUDGET`].
    fn within_budget(obj: &K) -> Result<Self, PackError> {
        let whole = Packed::new(obj)?;
        if whole.stored_len() <= KEPT_BUDGET {
            return Ok(Self::Whole(whole));
        }
        let mut value = serde_json::to_value(obj)?;
        lean::elide(&mut value);
        // A lean copy that no longer parses as `K` (a long string where a value was required to
        // match something) is not kept: the pass reads the object whole anyway.
        let Ok(lean) = serde_json::from_value::<K>(value) else {
            return Ok(Self::Identity);
        };
        let packed = Packed::new(&lean)?;
        Ok(if packed.stored_len() <= KEPT_BUDGET {
            Self::Lean(packed)
        } else {
            Self::Identity
        })
    }
}

impl<K> Body<K> {
    fn stored_len(&self) -> usize {
        match self {
            Self::Whole(p) | Self::Lean(p) => p.stored_len(),
            Self::Identity => 0,
        }
    }
}

impl<K> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            body: match &self.body {
                Body::Whole(p) => Body::Whole(p.clone()),
                Body::Lean(p) => Body::Lean(p.clone()),
                Body::Identity => Body::Identity,
            },
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
            .field("whole", &matches!(self.body, Body::Whole(_)))
            .field("stored_bytes", &self.body.stored_len())
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
    let objects = watcher(api, watcher::Config::default().page_size(listing::PAGE))
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

    /// `n` letters that barely compress (a tenant's worst case), a different run for each seed.
    fn noise(seed: u64, n: usize) -> String {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| char::from(rng.random_range(b'a'..=b'z')))
            .collect()
    }

    fn config_map(data: Vec<(String, String)>) -> Cached<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("big".into());
        cm.metadata.namespace = Some("team".into());
        cm.data = Some(data.into_iter().collect());
        Cached::new(cm).unwrap()
    }

    #[test]
    fn an_object_over_the_budget_keeps_its_short_strings_and_drops_its_long_ones() {
        let cached = config_map(vec![
            ("script".into(), noise(1, 256 * 1024)),
            ("bucket".into(), "gs://team-a/model".into()),
        ]);
        assert!(!cached.is_whole());
        assert!(cached.body.stored_len() <= KEPT_BUDGET);
        let lean = cached.decode().unwrap();
        let data = lean.data.unwrap();
        assert_eq!(data["bucket"], "gs://team-a/model");
        assert_eq!(data["script"], "");
    }

    #[test]
    fn an_object_whose_lean_copy_is_still_over_the_budget_keeps_only_its_identity() {
        let many = (0..64)
            .map(|i| (format!("k{i}"), noise(1000 + i, 1000)))
            .collect();
        let cached = config_map(many);
        assert!(!cached.is_whole());
        assert_eq!(cached.body.stored_len(), 0);
        assert_eq!(cached.name_any(), "big");
        assert!(matches!(cached.decode(), Err(CacheError::IdentityOnly)));
    }

    #[test]
    fn an_ordinary_object_is_kept_whole() {
        let script = "#!/bin/sh\necho hi\n".repeat(400);
        let cached = config_map(vec![("script".into(), script.clone())]);
        assert!(cached.is_whole());
        assert_eq!(cached.decode().unwrap().data.unwrap()["script"], script);
    }

    #[test]
    fn a_reference_typed_by_kind_names_the_same_cached_object() {
        let r: ObjectRef<ConfigMap> = ObjectRef::new("a").within("team");
        let c = cached_ref(r);
        assert_eq!((c.name.as_str(), c.namespace.as_deref()), ("a", Some("team")));
    }
}
