//! Optional persistence: the whole store as one JSON file, so a local session survives a restart.
//! Watch history is not saved: after a restart, watches from older resourceVersions get 410 Gone
//! and clients relist, as after a real apiserver restart.

use crate::cluster::Cluster;
use serde_json::{Value, json};
use std::path::Path;

pub fn save(cluster: &Cluster, path: &Path) -> std::io::Result<()> {
    let (rv, objects) = {
        let state = cluster.lock();
        (state.store.resource_version(), state.store.dump())
    };
    let objects: Vec<Value> = objects
        .iter()
        .map(|(key, obj)| json!({"storageKey": key, "object": **obj}))
        .collect();
    let doc = json!({"resourceVersion": rv, "objects": objects});
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&doc)?)?;
    std::fs::rename(tmp, path)
}

pub fn load(cluster: &Cluster, path: &Path) -> std::io::Result<()> {
    let doc: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let rv = doc.get("resourceVersion").and_then(Value::as_u64).unwrap_or(0);
    let objects: Vec<(String, Value)> = doc
        .get("objects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.get("storageKey")?.as_str()?.to_string(),
                o.get("object")?.clone(),
            ))
        })
        .collect();
    let crds: Vec<Value> = objects
        .iter()
        .filter(|(k, _)| k == "apiextensions.k8s.io/customresourcedefinitions")
        .map(|(_, o)| o.clone())
        .collect();
    let mut state = cluster.lock();
    // The snapshot replaces the built-in namespaces created at start.
    state.store = crate::store::Store::new(cluster.config.history_limit);
    state.store.restore(rv, objects);
    for crd in &crds {
        state.reregister_crd(crd);
    }
    Ok(())
}
