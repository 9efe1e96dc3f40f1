//! delete and deletecollection: preconditions, finalizers and `deletionTimestamp`, and the
//! propagation policies (the garbage collector's part runs in `cleanup`).

use super::{ListOptions, State, Task, obj_ref, subject, to_served};
use crate::crd;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;
use crate::store::ObjRef;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    pub fn parse(text: &str) -> ApiResult<Self> {
        match text {
            "Background" => Ok(Self::Background),
            "Foreground" => Ok(Self::Foreground),
            "Orphan" => Ok(Self::Orphan),
            other => Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            ))),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (kube-rs sends preconditions and propagation there).
    pub fn merge_body(&mut self, body: &Value) -> ApiResult<()> {
        if let Some(p) = body.get("propagationPolicy").and_then(Value::as_str) {
            self.propagation = Some(Propagation::parse(p)?);
        }
        if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) && self.propagation.is_none() {
            self.propagation = Some(Propagation::Orphan);
        }
        if let Some(uid) = body.pointer("/preconditions/uid").and_then(Value::as_str) {
            self.precondition_uid = Some(uid.to_string());
        }
        if let Some(rv) = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            self.precondition_rv = Some(rv.to_string());
        }
        if body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            self.dry_run = true;
        }
        Ok(())
    }
}

/// A deleted object, or one that stays until its finalizers are removed.
#[derive(Clone, Debug)]
pub enum DeleteOutcome {
    Deleted(Value),
    Pending(Value),
}

impl State {
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<DeleteOutcome> {
        let r = obj_ref(rt, ns, name);
        let obj = self
            .store
            .get_ref(&r)
            .ok_or_else(|| ApiError::not_found(&subject(rt, name)))?;
        if let Some(uid) = &opts.precondition_uid
            && uid != meta::uid(&obj)
        {
            return Err(ApiError::conflict(
                &subject(rt, name),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(&obj)
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && rv != meta::resource_version(&obj)
        {
            return Err(ApiError::conflict(
                &subject(rt, name),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta::resource_version(&obj)
                ),
            ));
        }
        if opts.dry_run {
            return Ok(DeleteOutcome::Pending(to_served(rt, &obj)));
        }
        Ok(match self.delete_ref(&r, opts.propagation) {
            Some(DeleteOutcome::Deleted(o)) => DeleteOutcome::Deleted(to_served(rt, &o)),
            Some(DeleteOutcome::Pending(o)) => DeleteOutcome::Pending(to_served(rt, &o)),
            None => DeleteOutcome::Pending(to_served(rt, &obj)),
        })
    }

    /// deletecollection: deletes every matching object; returns them as they were.
    pub fn delete_collection(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> ApiResult<Vec<Value>> {
        let matching = self.list(
            rt,
            ns,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..list.clone()
            },
        )?;
        let mut out = Vec::new();
        for obj in matching.items {
            if !opts.dry_run {
                self.delete_ref(
                    &obj_ref(rt, meta::namespace(&obj), meta::name(&obj)),
                    opts.propagation,
                );
            }
            out.push(obj);
        }
        Ok(out)
    }

    /// Deletes a stored object with the given propagation (None: the default, Background).
    /// Returns None when the object does not exist.
    pub(super) fn delete_ref(
        &mut self,
        r: &ObjRef,
        propagation: Option<Propagation>,
    ) -> Option<DeleteOutcome> {
        let obj = self.store.get_ref(r)?;
        let policy = propagation.unwrap_or(Propagation::Background);
        let mut next = (*obj).clone();
        let mut finalizers = meta::finalizers(&next);
        match policy {
            Propagation::Orphan => self.orphan_dependents(meta::uid(&obj)),
            Propagation::Foreground => {
                if !finalizers.iter().any(|f| f == "foregroundDeletion") {
                    finalizers.push("foregroundDeletion".into());
                }
            }
            Propagation::Background => {}
        }
        let is_namespace = r.storage_key == "/namespaces";
        let is_crd = r.storage_key == "apiextensions.k8s.io/customresourcedefinitions";
        if meta::is_deleting(&obj) {
            // Already terminating: only a switch to foreground changes anything.
            if finalizers != meta::finalizers(&obj) {
                meta::set_finalizers(&mut next, &finalizers);
                let stored = self.store.put(r, next);
                self.tasks.push_back(Task::Foreground(r.clone()));
                return Some(DeleteOutcome::Pending((*stored).clone()));
            }
            return Some(DeleteOutcome::Pending((*obj).clone()));
        }
        let blocked = !finalizers.is_empty() || is_namespace || (is_crd && self.crd_has_instances(&obj));
        if !blocked {
            let removed = self.store.remove(r)?;
            self.tasks
                .push_back(Task::Removed(r.storage_key.clone(), removed.clone()));
            return Some(DeleteOutcome::Deleted((*removed).clone()));
        }
        mark_deleting(&mut next, &finalizers, is_namespace);
        let stored = self.store.put(r, next);
        if policy == Propagation::Foreground {
            self.tasks.push_back(Task::Foreground(r.clone()));
        }
        if is_namespace {
            self.tasks.push_back(Task::NamespaceCleanup(r.key.1.clone()));
        }
        if is_crd {
            self.tasks.push_back(Task::CrdCleanup(r.key.1.clone()));
        }
        Some(DeleteOutcome::Pending((*stored).clone()))
    }

    fn crd_has_instances(&self, crd_obj: &Value) -> bool {
        let storage_key = crd_storage_key(crd_obj);
        !self.store.list(&storage_key, None).is_empty()
    }

    /// Orphan propagation: dependents lose their ownerReference to `owner_uid` and stay.
    fn orphan_dependents(&mut self, owner_uid: &str) {
        for dep in self.store.dependents(owner_uid) {
            self.drop_owner_reference(&dep, owner_uid);
        }
    }

    pub(super) fn drop_owner_reference(&mut self, dep: &ObjRef, owner_uid: &str) {
        let Some(obj) = self.store.get_ref(dep) else {
            return;
        };
        let mut next = (*obj).clone();
        if let Some(refs) = next
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|o| o.get("uid").and_then(Value::as_str) != Some(owner_uid));
            if refs.is_empty() {
                meta::meta_mut(&mut next).remove("ownerReferences");
            }
        }
        if next != *obj {
            self.store.put(dep, next);
        }
    }

    /// Stores an object the emulated controllers changed (finalizer removal), or removes it when
    /// that was its last finalizer.
    pub(super) fn store_controller_update(&mut self, r: &ObjRef, next: Value) {
        if meta::is_deleting(&next) && meta::finalizers(&next).is_empty() {
            if let Some(removed) = self.store.remove_with(r, Some(next)) {
                self.tasks
                    .push_back(Task::Removed(r.storage_key.clone(), removed));
            }
        } else {
            self.store.put(r, next);
        }
    }

    /// Restores a CRD's serving types after a snapshot load.
    pub fn reregister_crd(&mut self, crd_obj: &Value) {
        if let Ok(types) = crd::resource_types(crd_obj) {
            self.register_crd_types(crd_obj, types);
        }
    }
}

pub(super) fn crd_storage_key(crd_obj: &Value) -> String {
    let group = crd_obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plural = crd_obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{group}/{plural}")
}

/// An object whose deletion waits (on finalizers, or on its contents): its finalizers, a
/// deletion timestamp with no grace period, its generation bumped (for objects that track
/// one), and a namespace's phase Terminating.
fn mark_deleting(next: &mut Value, finalizers: &[String], is_namespace: bool) {
    meta::set_finalizers(next, finalizers);
    {
        let m = meta::meta_mut(next);
        m.insert("deletionTimestamp".into(), json!(meta::now()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        // Graceful deletion bumps the generation of objects that track one.
        if let Some(g) = m.get("generation").and_then(Value::as_i64) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    if is_namespace {
        next["status"] = json!({"phase": "Terminating"});
    }
}
