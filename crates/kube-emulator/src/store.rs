//! The in-memory object store: objects per resource, one global resourceVersion counter, a
//! bounded history of watch events, and the uid and owner indexes garbage collection uses.

use crate::meta;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// `(namespace, name)`; namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Where an object lives: its resource's storage key and its key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    pub storage_key: String,
    pub key: ObjKey,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it. `previous` lets a selector-filtered watch turn a MODIFIED
/// into ADDED or DELETED when the object enters or leaves the selection.
#[derive(Debug)]
pub struct StoredEvent {
    pub rv: u64,
    pub storage_key: String,
    pub namespace: String,
    pub event: EventType,
    pub object: Arc<Value>,
    pub previous: Option<Arc<Value>>,
}

#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    uids: HashMap<String, ObjRef>,
    /// owner uid -> dependents naming it in ownerReferences.
    owners: HashMap<String, BTreeSet<ObjRef>>,
    history: VecDeque<Arc<StoredEvent>>,
    history_limit: usize,
    /// A watch may resume from any resourceVersion >= this: every later event is in `history`.
    oldest_watchable: u64,
}

impl Store {
    pub fn new(history_limit: usize) -> Self {
        Self {
            rv: 0,
            objects: HashMap::new(),
            uids: HashMap::new(),
            owners: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            oldest_watchable: 0,
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn oldest_watchable(&self) -> u64 {
        self.oldest_watchable
    }

    pub fn get(&self, storage_key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(storage_key)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn get_ref(&self, r: &ObjRef) -> Option<Arc<Value>> {
        self.objects.get(&r.storage_key)?.get(&r.key).cloned()
    }

    pub fn by_uid(&self, uid: &str) -> Option<ObjRef> {
        self.uids.get(uid).cloned()
    }

    /// Objects of a resource, optionally in one namespace, ordered by (namespace, name).
    pub fn list(&self, storage_key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(objects) = self.objects.get(storage_key) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => objects.values().cloned().collect(),
        }
    }

    pub fn count(&self) -> usize {
        self.objects.values().map(BTreeMap::len).sum()
    }

    pub fn storage_keys(&self) -> Vec<String> {
        self.objects.keys().cloned().collect()
    }

    pub fn dependents(&self, owner_uid: &str) -> Vec<ObjRef> {
        self.owners
            .get(owner_uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any object lives in namespace `ns`.
    pub fn namespace_has_objects(&self, ns: &str) -> bool {
        self.objects.values().any(|objects| {
            objects
                .range((ns.to_string(), String::new())..)
                .next()
                .is_some_and(|((n, _), _)| n == ns)
        })
    }

    fn index(&mut self, r: &ObjRef, obj: &Value) {
        self.uids.insert(meta::uid(obj).to_string(), r.clone());
        for (owner, _) in meta::owner_uids(obj) {
            self.owners.entry(owner).or_default().insert(r.clone());
        }
    }

    fn unindex(&mut self, r: &ObjRef, obj: &Value) {
        self.uids.remove(meta::uid(obj));
        for (owner, _) in meta::owner_uids(obj) {
            if let Some(set) = self.owners.get_mut(&owner) {
                set.remove(r);
                if set.is_empty() {
                    self.owners.remove(&owner);
                }
            }
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, event: StoredEvent) {
        self.history.push_back(Arc::new(event));
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.oldest_watchable = dropped.rv;
            }
        }
    }

    /// Stores `obj` under a new resourceVersion and records the event. Returns the stored object.
    pub fn put(&mut self, r: &ObjRef, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Arc::new(obj);
        let previous = self
            .objects
            .entry(r.storage_key.clone())
            .or_default()
            .insert(r.key.clone(), obj.clone());
        if let Some(prev) = &previous {
            self.unindex(r, prev);
        }
        self.index(r, &obj);
        let event = if previous.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(StoredEvent {
            rv,
            storage_key: r.storage_key.clone(),
            namespace: r.key.0.clone(),
            event,
            object: obj.clone(),
            previous,
        });
        obj
    }

    /// Removes an object; the DELETED event carries its last state under a new resourceVersion.
    pub fn remove(&mut self, r: &ObjRef) -> Option<Arc<Value>> {
        self.remove_with(r, None)
    }

    /// Removes an object whose final state is `last` (e.g. the update that dropped the last
    /// finalizer); watchers see only the DELETED event, as with the apiserver.
    pub fn remove_with(&mut self, r: &ObjRef, last: Option<Value>) -> Option<Arc<Value>> {
        let removed = self.objects.get_mut(&r.storage_key)?.remove(&r.key)?;
        self.unindex(r, &removed);
        let rv = self.next_rv();
        let mut last = last.unwrap_or_else(|| (*removed).clone());
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let last = Arc::new(last);
        self.record(StoredEvent {
            rv,
            storage_key: r.storage_key.clone(),
            namespace: r.key.0.clone(),
            event: EventType::Deleted,
            object: last.clone(),
            previous: Some(removed),
        });
        Some(last)
    }

    /// Events after `rv`, or None when some of them are no longer kept.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<StoredEvent>>> {
        if rv < self.oldest_watchable {
            return None;
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Some(self.history.range(start..).cloned().collect())
    }

    /// Forgets the watch history (as a restarted apiserver's watch cache does): watches from
    /// older resourceVersions get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest_watchable = self.rv;
    }

    /// All objects, for snapshots.
    pub fn dump(&self) -> Vec<(String, Arc<Value>)> {
        let mut out = Vec::new();
        for (key, objects) in &self.objects {
            for obj in objects.values() {
                out.push((key.clone(), obj.clone()));
            }
        }
        out
    }

    /// Restores objects from a snapshot without recording events.
    pub fn restore(&mut self, rv: u64, objects: Vec<(String, Value)>) {
        for (storage_key, obj) in objects {
            let r = ObjRef {
                storage_key: storage_key.clone(),
                key: (meta::namespace(&obj).to_string(), meta::name(&obj).to_string()),
            };
            self.index(&r, &obj);
            self.objects
                .entry(storage_key)
                .or_default()
                .insert(r.key.clone(), Arc::new(obj));
        }
        self.rv = self.rv.max(rv);
        self.compact();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_history_expires_old_resource_versions() {
        let mut s = Store::new(2);
        let r = |n: &str| ObjRef {
            storage_key: "/configmaps".into(),
            key: ("d".into(), n.into()),
        };
        for n in ["a", "b", "c"] {
            s.put(
                &r(n),
                json!({"metadata": {"name": n, "namespace": "d", "uid": n}}),
            );
        }
        assert_eq!(s.resource_version(), 3);
        assert!(s.events_since(0).is_none());
        assert_eq!(s.events_since(1).unwrap().len(), 2);
        assert_eq!(s.list("/configmaps", Some("d")).len(), 3);
        let last = s.remove(&r("a")).unwrap();
        assert_eq!(meta::resource_version(&last), "4");
        assert!(s.by_uid("a").is_none());
    }
}
