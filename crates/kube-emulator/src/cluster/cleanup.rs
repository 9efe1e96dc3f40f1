//! The controllers a control plane runs behind the API, emulated synchronously right after the
//! write that triggers them (so tests need no sleeps): the garbage collector (background,
//! foreground, dangling owners), the namespace controller and the CRD instance cleanup.

use super::delete::{Propagation, crd_storage_key};
use super::{State, Task};
use crate::crd;
use crate::meta;
use crate::store::ObjRef;
use serde_json::Value;
use std::sync::Arc;

impl State {
    pub(super) fn run_tasks(&mut self) {
        while let Some(task) = self.tasks.pop_front() {
            match task {
                Task::Removed(storage_key, obj) => self.after_removal(&storage_key, &obj),
                Task::Foreground(r) => self.foreground(&r),
                Task::ForegroundCheck(r) => self.foreground_check(&r),
                Task::Dangling(r) => self.dangling(&r),
                Task::NamespaceCleanup(ns) => self.namespace_cleanup(&ns),
                Task::NamespaceCheck(ns) => self.namespace_check(&ns),
                Task::CrdCleanup(name) => self.crd_cleanup(&name),
                Task::CrdCheck(name) => self.crd_check(&name),
            }
        }
    }

    fn after_removal(&mut self, storage_key: &str, obj: &Arc<Value>) {
        // Background collection of dependents whose owners are all gone.
        for dep in self.store.dependents(meta::uid(obj)) {
            self.tasks.push_back(Task::Dangling(dep));
        }
        // A foreground-deleting owner may now be unblocked.
        for (owner_uid, _) in meta::owner_uids(obj) {
            if let Some(owner) = self.store.by_uid(&owner_uid) {
                self.tasks.push_back(Task::ForegroundCheck(owner));
            }
        }
        let ns = meta::namespace(obj);
        if !ns.is_empty()
            && self
                .store
                .get("/namespaces", "", ns)
                .is_some_and(|n| meta::is_deleting(&n))
        {
            self.tasks.push_back(Task::NamespaceCheck(ns.to_string()));
        }
        if storage_key == "apiextensions.k8s.io/customresourcedefinitions" {
            let group = obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let plural = obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.registry.remove_resource(group, plural);
        } else if let Some(crd_name) = storage_key
            .split_once('/')
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, p)| format!("{p}.{g}"))
            && self
                .store
                .get("apiextensions.k8s.io/customresourcedefinitions", "", &crd_name)
                .is_some_and(|c| meta::is_deleting(&c))
        {
            self.tasks.push_back(Task::CrdCheck(crd_name));
        }
    }

    /// A dependent whose owners are all gone is deleted; one with some owners left loses the
    /// references to the missing ones.
    fn dangling(&mut self, r: &ObjRef) {
        let Some(obj) = self.store.get_ref(r) else { return };
        let owners = meta::owner_uids(&obj);
        if owners.is_empty() {
            return;
        }
        let missing: Vec<String> = owners
            .iter()
            .filter(|(uid, _)| self.store.by_uid(uid).is_none())
            .map(|(uid, _)| uid.clone())
            .collect();
        if missing.is_empty() {
            return;
        }
        if missing.len() == owners.len() {
            if !meta::is_deleting(&obj) {
                self.delete_ref(r, Some(Propagation::Background));
            }
        } else {
            for uid in missing {
                self.drop_owner_reference(r, &uid);
            }
        }
    }

    fn foreground(&mut self, owner: &ObjRef) {
        let Some(obj) = self.store.get_ref(owner) else {
            return;
        };
        for dep in self.store.dependents(meta::uid(&obj)) {
            let deleting = self.store.get_ref(&dep).is_some_and(|d| meta::is_deleting(&d));
            if !deleting {
                self.delete_ref(&dep, Some(Propagation::Foreground));
            }
        }
        self.tasks.push_back(Task::ForegroundCheck(owner.clone()));
    }

    /// Drops `foregroundDeletion` once no dependent that blocks owner deletion is left.
    fn foreground_check(&mut self, owner: &ObjRef) {
        let Some(obj) = self.store.get_ref(owner) else {
            return;
        };
        let mut finalizers = meta::finalizers(&obj);
        if !meta::is_deleting(&obj) || !finalizers.iter().any(|f| f == "foregroundDeletion") {
            return;
        }
        let uid = meta::uid(&obj).to_string();
        let blocked = self.store.dependents(&uid).iter().any(|dep| {
            self.store
                .get_ref(dep)
                .is_some_and(|d| meta::owner_uids(&d).iter().any(|(o, block)| *o == uid && *block))
        });
        if blocked {
            return;
        }
        finalizers.retain(|f| f != "foregroundDeletion");
        let mut next = (*obj).clone();
        meta::set_finalizers(&mut next, &finalizers);
        self.store_controller_update(owner, next);
    }

    /// The namespace controller: delete everything in a terminating namespace.
    fn namespace_cleanup(&mut self, ns: &str) {
        for storage_key in self.store.storage_keys() {
            for obj in self.store.list(&storage_key, Some(ns)) {
                if !meta::is_deleting(&obj) {
                    let r = ObjRef {
                        storage_key: storage_key.clone(),
                        key: (ns.to_string(), meta::name(&obj).to_string()),
                    };
                    self.delete_ref(&r, Some(Propagation::Background));
                }
            }
        }
        self.tasks.push_back(Task::NamespaceCheck(ns.to_string()));
    }

    /// An empty terminating namespace drops its `kubernetes` finalizer and goes away.
    fn namespace_check(&mut self, ns: &str) {
        if self.store.namespace_has_objects(ns) {
            return;
        }
        let r = ObjRef {
            storage_key: "/namespaces".into(),
            key: (String::new(), ns.to_string()),
        };
        let Some(obj) = self.store.get_ref(&r) else { return };
        if !meta::is_deleting(&obj) {
            return;
        }
        let mut next = (*obj).clone();
        if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("finalizers");
        }
        self.store_controller_update(&r, next);
    }

    fn crd_ref(name: &str) -> ObjRef {
        ObjRef {
            storage_key: "apiextensions.k8s.io/customresourcedefinitions".into(),
            key: (String::new(), name.to_string()),
        }
    }

    /// CRD deletion removes all instances first.
    fn crd_cleanup(&mut self, name: &str) {
        let Some(crd_obj) = self.store.get_ref(&Self::crd_ref(name)) else {
            return;
        };
        let storage_key = crd_storage_key(&crd_obj);
        for obj in self.store.list(&storage_key, None) {
            if !meta::is_deleting(&obj) {
                let r = ObjRef {
                    storage_key: storage_key.clone(),
                    key: (meta::namespace(&obj).to_string(), meta::name(&obj).to_string()),
                };
                self.delete_ref(&r, Some(Propagation::Background));
            }
        }
        self.tasks.push_back(Task::CrdCheck(name.to_string()));
    }

    fn crd_check(&mut self, name: &str) {
        let r = Self::crd_ref(name);
        let Some(crd_obj) = self.store.get_ref(&r) else {
            return;
        };
        if !meta::is_deleting(&crd_obj) || !self.store.list(&crd_storage_key(&crd_obj), None).is_empty() {
            return;
        }
        let mut next = (*crd_obj).clone();
        let mut finalizers = meta::finalizers(&next);
        finalizers.retain(|f| f != crd::CLEANUP_FINALIZER);
        meta::set_finalizers(&mut next, &finalizers);
        self.store_controller_update(&r, next);
    }
}

impl State {
    /// `PUT namespaces/{name}/finalize`: sets `spec.finalizers`; a terminating namespace with no
    /// finalizers left goes away.
    pub fn finalize_namespace(
        &mut self,
        name: &str,
        body: &Value,
        _opts: &super::WriteOptions,
    ) -> crate::errors::ApiResult<super::WriteOutcome> {
        let rt = self
            .resolve("", "v1", "namespaces")
            .expect("namespaces are built in");
        let r = ObjRef {
            storage_key: rt.storage_key.clone(),
            key: (String::new(), name.to_string()),
        };
        let old = self
            .store
            .get_ref(&r)
            .ok_or_else(|| crate::errors::ApiError::not_found(&super::subject(&rt, name)))?;
        let mut next = (*old).clone();
        match body
            .pointer("/spec/finalizers")
            .filter(|f| f.as_array().is_some_and(|a| !a.is_empty()))
        {
            Some(f) => next["spec"] = serde_json::json!({"finalizers": f}),
            None => {
                if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("finalizers");
                }
            }
        }
        if next == *old {
            return Ok(super::WriteOutcome {
                object: (*old).clone(),
                created: false,
                warnings: vec![],
            });
        }
        let spec_empty = next.pointer("/spec/finalizers").is_none();
        if spec_empty && meta::is_deleting(&next) && !self.store.namespace_has_objects(name) {
            self.store_controller_update(&r, next.clone());
        } else {
            self.store.put(&r, next.clone());
        }
        Ok(super::WriteOutcome {
            object: next,
            created: false,
            warnings: vec![],
        })
    }
}
