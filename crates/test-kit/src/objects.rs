//! Creating the objects of a test: typed, in the namespace the harness chose (each test on the
//! real control plane has one of its own), from the YAML the examples are written in.

use std::fmt::Debug;

use kube::{Api, Resource, api::PostParams, core::NamespaceResourceScope};
use serde::{Serialize, de::DeserializeOwned};

/// A namespaced kind a harness creates, reads, waits on and prints when a wait fails: the three
/// CRDs, Events, ConfigMaps and so on.
pub trait NamespacedObject:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned
{
}

impl<K> NamespacedObject for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Creates `obj` in `ns` (whatever namespace its metadata names) and returns what the server
/// stored; panics with the object's name and the server's answer on failure.
pub async fn create_in<K: NamespacedObject>(client: &kube::Client, ns: &str, obj: &K) -> K {
    let mut obj = obj.clone();
    obj.meta_mut().namespace = Some(ns.to_owned());
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", obj.meta().name))
}

/// Parses one YAML document into a typed object.
pub fn from_yaml<K: DeserializeOwned>(yaml: &str) -> K {
    serde_yaml::from_str(yaml).expect("fixture YAML")
}
