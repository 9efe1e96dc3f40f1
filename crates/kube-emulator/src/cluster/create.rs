//! create (POST) and apply-creates: name generation, namespace checks, server-owned metadata,
//! kind-specific defaults (Secrets, Namespaces, CRDs), then the shared validation.

use super::write::{
    Ownership, WriteOptions, WriteOutcome, check_apply_identity, check_type_meta, fold_string_data, invalid,
};
use super::{State, Task, obj_ref, subject, to_served, to_stored};
use crate::crd;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceType;
use crate::ssa::{self, Scope};
use crate::store::ObjRef;
use crate::validation::FieldErrorType;
use serde_json::{Value, json};

impl State {
    /// POST: creates an object in namespace `ns` (ignored for cluster-scoped resources).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<WriteOutcome> {
        self.create_object(rt, ns, body, opts, Ownership::Update)
    }

    pub(super) fn create_object(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
        ownership: Ownership,
    ) -> ApiResult<WriteOutcome> {
        let ns = if rt.namespaced { ns } else { "" };
        let (name, r) = self.place_to_create(rt, ns, &obj, ownership)?;
        let uid = self.new_uid(rt, ns, &name);
        set_server_metadata(rt, ns, &name, uid, &mut obj, ownership);
        apply_kind_defaults(rt, &name, &mut obj);
        let mut warnings = Vec::new();
        let crd_types = if rt.is_crd() {
            Some(accept_crd(rt, &name, &mut obj)?)
        } else {
            None
        };
        obj = self.validate(rt, &name, obj, None, opts, &mut warnings, ownership)?;
        self.admit(&super::admission::Request {
            rt,
            namespace: ns,
            name: &name,
            object: &obj,
            old: None,
        })?;
        if ownership == Ownership::Update {
            let scope = if rt.status_subresource {
                Scope::Main
            } else {
                Scope::Whole
            };
            ssa::record_update(
                None,
                &mut obj,
                &opts.field_manager,
                scope,
                &rt.merge_schema,
                &rt.api_version(),
            );
        }
        if opts.dry_run {
            return Ok(WriteOutcome {
                object: obj,
                created: true,
                warnings,
            });
        }
        let object = self.store_created(rt, r, obj, crd_types);
        Ok(WriteOutcome {
            object,
            created: true,
            warnings,
        })
    }

    /// The name and place of a new object, once its body may create it: a JSON object of the
    /// URL's type and namespace, with a valid name no object has, in a namespace open for new
    /// objects, without a resourceVersion (unless applied).
    fn place_to_create(
        &self,
        rt: &ResourceType,
        ns: &str,
        obj: &Value,
        ownership: Ownership,
    ) -> ApiResult<(String, ObjRef)> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        check_type_meta(rt, obj)?;
        let body_ns = meta::namespace(obj).to_string();
        if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let name = self.name_to_create(rt, ns, obj)?;
        if let Some(message) = meta::validate_name(&name, rt.is_namespace()) {
            return Err(invalid(
                rt,
                &name,
                "metadata.name",
                FieldErrorType::Invalid,
                message,
            ));
        }
        if rt.namespaced {
            self.check_namespace_open(ns, rt, &name)?;
        }
        let r = obj_ref(rt, ns, &name);
        if self.store.get_ref(&r).is_some() {
            return Err(ApiError::already_exists(&subject(rt, &name)));
        }
        // The storage layer refuses this (as a 500), which catches clients re-creating a fetched object.
        if ownership == Ownership::Update && !meta::resource_version(obj).is_empty() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }

        Ok((name, r))
    }

    /// Stores a new object, registers a CRD's resource types and queues an owner check for an
    /// object with owners; returns it as served.
    fn store_created(
        &mut self,
        rt: &ResourceType,
        r: ObjRef,
        obj: Value,
        crd_types: Option<Vec<ResourceType>>,
    ) -> Value {
        let stored = self.store.put(&r, to_stored(rt, &obj));
        if let Some(types) = crd_types {
            self.register_crd_types(&stored, types);
        }
        if !meta::owner_uids(&stored).is_empty() {
            self.tasks.push_back(Task::Dangling(r));
        }
        to_served(rt, &stored)
    }

    /// The name given, or one generated from `generateName` that no object has yet.
    fn name_to_create(&self, rt: &ResourceType, ns: &str, obj: &Value) -> ApiResult<String> {
        let name = meta::name(obj);
        if !name.is_empty() {
            return Ok(name.to_string());
        }
        let prefix = meta::meta_str(obj, "generateName").unwrap_or_default();
        if prefix.is_empty() {
            return Err(invalid(
                rt,
                "",
                "metadata.name",
                FieldErrorType::Required,
                "Required value: name or generateName is required".into(),
            ));
        }
        loop {
            let name = format!("{prefix}{}", meta::generate_suffix());
            if self.store.get_ref(&obj_ref(rt, ns, &name)).is_none() {
                return Ok(name);
            }
        }
    }

    /// Installs the resource types of an accepted CRD (replacing the previous versions).
    pub(super) fn register_crd_types(&mut self, crd: &Value, types: Vec<crate::resources::ResourceType>) {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.registry.remove_resource(&group, &plural);
        for t in types {
            self.registry.insert(t);
        }
    }

    pub(super) fn check_namespace_open(&self, ns: &str, rt: &ResourceType, name: &str) -> ApiResult<()> {
        match self.store.get("/namespaces", "", ns) {
            None => Err(ApiError::not_found(&crate::errors::Subject {
                group: "",
                resource: "namespaces",
                name: ns,
            })),
            Some(n) if meta::is_deleting(&n) => Err(ApiError::forbidden(
                &subject(rt, name),
                &format!("unable to create new content in namespace {ns} because it is being terminated"),
            )),
            Some(_) => Ok(()),
        }
    }

    pub(super) fn apply_create(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<WriteOutcome> {
        check_type_meta(rt, &body)?;
        check_apply_identity(rt, name, &body)?;
        let scope = if rt.status_subresource {
            Scope::Main
        } else {
            Scope::Whole
        };
        let mut obj = ssa::apply(
            None,
            &body,
            &opts.field_manager,
            opts.force,
            scope,
            &rt.merge_schema,
            &rt.api_version(),
        )
        .map_err(|c| ApiError::apply_conflicts(&subject(rt, name), &c, &rt.api_version()))?;
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        meta::meta_mut(&mut obj).insert("name".into(), json!(name));
        self.create_object(rt, ns, obj, opts, Ownership::Applied)
    }
}

/// Sets the metadata the server owns on a new object (name, namespace, uid, timestamps,
/// generation) and drops what a client may not set.
fn set_server_metadata(
    rt: &ResourceType,
    ns: &str,
    name: &str,
    uid: String,
    obj: &mut Value,
    ownership: Ownership,
) {
    let m = meta::meta_mut(obj);
    m.insert("name".into(), json!(name));
    if rt.namespaced {
        m.insert("namespace".into(), json!(ns));
    } else {
        m.remove("namespace");
    }
    m.insert("uid".into(), json!(uid));
    m.insert("creationTimestamp".into(), json!(meta::now()));
    for server_owned in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(server_owned);
    }
    if ownership == Ownership::Update {
        m.remove("managedFields");
    }
    if rt.has_generation {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
}

/// Kind-specific defaults of a new object: no status through the main resource of a custom
/// resource or CRD, the Secret's `type`, the Namespace's finalizer, phase and name label.
fn apply_kind_defaults(rt: &ResourceType, name: &str, obj: &mut Value) {
    if rt.status_subresource && (rt.custom || rt.is_crd()) {
        obj.as_object_mut().expect("object").remove("status");
    }
    if rt.is_secret() {
        fold_string_data(obj);
        if obj.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
            obj["type"] = json!("Opaque");
        }
    }
    if rt.is_namespace() {
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
        // "The Kubernetes control plane sets an immutable label kubernetes.io/metadata.name on
        // all namespaces" (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/).
        let labels = meta::meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
}

/// Checks a new CRD, publishes its accepted status and adds the cleanup finalizer; returns the
/// resource types to install once it is stored.
fn accept_crd(rt: &ResourceType, name: &str, obj: &mut Value) -> ApiResult<Vec<ResourceType>> {
    let types = crd::resource_types(obj).map_err(|e| ApiError::invalid(&rt.kind, &rt.group, name, &e))?;
    obj["status"] = crd::accepted_status(obj, None);
    let mut finalizers = meta::finalizers(obj);
    if !finalizers.iter().any(|f| f == crd::CLEANUP_FINALIZER) {
        finalizers.push(crd::CLEANUP_FINALIZER.into());
    }
    meta::set_finalizers(obj, &finalizers);
    Ok(types)
}
