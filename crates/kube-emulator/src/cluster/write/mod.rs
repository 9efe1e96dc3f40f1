//! update (PUT) and patch (JSON, merge, strategic, server-side apply), ending in the
//! same pipeline the apiserver runs before it persists an object.

use super::{State, Task, obj_ref, subject, to_served, to_stored};
use crate::errors::{ApiError, ApiResult};
use crate::fieldset::SchemaRef;
use crate::meta;
use crate::patch;
use crate::resources::ResourceType;
use crate::ssa::{self, Scope};
use crate::validation::path::FieldPath;
use crate::validation::{FieldCause, FieldErrorType, Invalid};
use serde_json::{Value, json};
use std::sync::Arc;

mod checks;
mod metadata;
mod validate;

pub(super) use checks::{check_apply_identity, check_type_meta};
use metadata::{bump_generation, server_shaped};

/// `fieldValidation`: what to do about unknown fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `fieldManager`, or the manager derived from the User-Agent.
    pub field_manager: String,
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// `force` for server-side apply.
    pub force: bool,
}

impl WriteOptions {
    /// The options of writes the emulator itself makes (built-in namespaces, CRDs from files).
    pub fn internal() -> Self {
        Self {
            field_manager: "kube-emulator".into(),
            ..Self::default()
        }
    }
}

#[derive(Clone, Debug)]
pub struct WriteOutcome {
    /// The object as the request's version serves it.
    pub object: Value,
    pub created: bool,
    /// `Warning` headers (unknown fields under `fieldValidation=Warn`).
    pub warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let base = content_type.split(';').next().unwrap_or_default().trim();
        match base {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// How managed fields were maintained for a write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ownership {
    /// Record the changed fields for the manager (create, update, non-apply patches).
    Update,
    /// Server-side apply already computed them.
    Applied,
}

pub(super) fn invalid(
    rt: &ResourceType,
    name: &str,
    field: &str,
    kind: FieldErrorType,
    message: String,
) -> ApiError {
    let cause = FieldCause::new(kind, &FieldPath::parse(field), message);
    ApiError::invalid(&rt.kind, &rt.group, name, &Invalid { causes: vec![cause] })
}

/// Everything but metadata (and status, when status is a subresource): what `generation` tracks.
fn spec_part(rt: &ResourceType, obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if rt.status_subresource {
            m.remove("status");
        }
    }
    out
}

/// Secrets: `stringData` is write-only convenience merged into base64 `data`.
pub(super) fn fold_string_data(obj: &mut Value) {
    let Some(string_data) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        return;
    };
    let data = obj
        .as_object_mut()
        .expect("object")
        .entry("data")
        .or_insert_with(|| json!({}));
    for (k, v) in entries {
        data[k] = json!(meta::base64_encode(v.as_str().unwrap_or_default().as_bytes()));
    }
}

impl State {
    /// PUT on the object or its status.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut body: Value,
        scope: Scope,
        opts: &WriteOptions,
    ) -> ApiResult<WriteOutcome> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        check_type_meta(rt, &body)?;
        let body_name = meta::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let r = obj_ref(rt, ns, name);
        let old = self
            .store
            .get_ref(&r)
            .ok_or_else(|| ApiError::not_found(&subject(rt, name)))?;
        let uid = meta::uid(&body);
        if !uid.is_empty() && uid != meta::uid(&old) {
            return Err(ApiError::conflict(
                &subject(rt, name),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(&old)
                ),
            ));
        }
        let rv = meta::resource_version(&body).to_string();
        if rv.is_empty() {
            if rt.custom || rt.is_crd() {
                return Err(invalid(
                    rt,
                    name,
                    "metadata.resourceVersion",
                    FieldErrorType::Invalid,
                    "Invalid value: 0: must be specified for an update".into(),
                ));
            }
        } else if rv != meta::resource_version(&old) {
            return Err(ApiError::stale(&subject(rt, name)));
        }
        if meta::meta(&body).get("managedFields").is_none() {
            let live = meta::meta(&old).get("managedFields").cloned();
            if let Some(mf) = live {
                meta::meta_mut(&mut body).insert("managedFields".into(), mf);
            }
        }
        self.finish_write(rt, &r, old, body, scope, opts, Ownership::Update)
    }

    /// PATCH on the object or its status. An apply patch creates a missing object.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        body: Value,
        scope: Scope,
        opts: &WriteOptions,
    ) -> ApiResult<WriteOutcome> {
        let r = obj_ref(rt, ns, name);
        let Some(old) = self.store.get_ref(&r) else {
            if patch_type == PatchType::Apply && scope != Scope::Status {
                return self.apply_create(rt, ns, name, body, opts);
            }
            return Err(ApiError::not_found(&subject(rt, name)));
        };
        let current = to_served(rt, &old);
        let (patched, ownership) = patched(rt, name, patch_type, &current, &body, scope, opts)?;
        if !patched.is_object() {
            return Err(ApiError::bad_request("the patched object is not a JSON object"));
        }
        // A resourceVersion in the patch is a precondition.
        let rv = meta::resource_version(&patched);
        let precondition = if patch_type == PatchType::Apply {
            meta::resource_version(&body)
        } else {
            rv
        };
        if !precondition.is_empty() && precondition != meta::resource_version(&old) {
            return Err(ApiError::stale(&subject(rt, name)));
        }
        self.finish_write(rt, &r, old, patched, scope, opts, ownership)
    }

    /// The shared tail of update and patch.
    #[allow(clippy::too_many_arguments)]
    fn finish_write(
        &mut self,
        rt: &ResourceType,
        r: &crate::store::ObjRef,
        old_stored: Arc<Value>,
        new: Value,
        scope: Scope,
        opts: &WriteOptions,
        ownership: Ownership,
    ) -> ApiResult<WriteOutcome> {
        let old = to_served(rt, &old_stored);
        let name = r.key.1.clone();
        let (mut new, crd_types) = server_shaped(rt, &name, &old, new, scope)?;
        let mut warnings = Vec::new();
        new = self.validate(rt, &name, new, Some(&old), opts, &mut warnings, ownership)?;
        // Admission sees writes to the object, not to its status subresource (as resource rules
        // name `tpuslices`, not `tpuslices/status`).
        if scope != Scope::Status {
            self.admit(&super::admission::Request {
                rt,
                namespace: &r.key.0,
                name: &name,
                object: &new,
                old: Some(&old),
            })?;
        }
        if rt.has_generation && spec_part(rt, &new) != spec_part(rt, &old) {
            bump_generation(&old, &mut new);
        }
        if ownership == Ownership::Update {
            ssa::record_update(
                Some(&old),
                &mut new,
                &opts.field_manager,
                scope,
                &rt.merge_schema,
                &rt.api_version(),
            );
        }

        // A write that changes nothing is not persisted: no new resourceVersion, no watch event.
        // Unless the object is stored in a version that is no longer the storage version: its
        // encoding changes, so the API server writes it (what storage migration relies on).
        let reencoded =
            old_stored.get("apiVersion").and_then(Value::as_str) != Some(rt.storage_api_version.as_str());
        let object = if new == old && !reencoded {
            old
        } else if opts.dry_run {
            new
        } else {
            self.persist(rt, r, &old, new, crd_types)
        };
        Ok(WriteOutcome {
            object,
            created: false,
            warnings,
        })
    }

    /// Stores a changed object and queues what follows from it; returns it as served. An object
    /// being deleted whose last finalizer this write removed goes away instead.
    fn persist(
        &mut self,
        rt: &ResourceType,
        r: &crate::store::ObjRef,
        old: &Value,
        new: Value,
        crd_types: Option<Vec<ResourceType>>,
    ) -> Value {
        if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() && !rt.is_namespace() {
            // The last finalizer is gone: the object goes away with this write.
            let removed = self
                .store
                .remove_with(r, Some(to_stored(rt, &new)))
                .expect("object exists under the lock");
            self.tasks
                .push_back(Task::Removed(r.storage_key.clone(), removed.clone()));
            return to_served(rt, &removed);
        }
        let owners_changed = meta::owner_uids(&new) != meta::owner_uids(old);
        let stored = self.store.put(r, to_stored(rt, &new));
        if let Some(types) = crd_types {
            self.register_crd_types(&stored, types);
        }
        if owners_changed {
            self.tasks.push_back(Task::Dangling(r.clone()));
        }
        to_served(rt, &stored)
    }
}

/// The object after the patch, and how its managed fields are maintained: merge, JSON and
/// strategic patches record an update; an apply patch applies the body as the field manager's
/// configuration.
fn patched(
    rt: &ResourceType,
    name: &str,
    patch_type: PatchType,
    current: &Value,
    body: &Value,
    scope: Scope,
    opts: &WriteOptions,
) -> ApiResult<(Value, Ownership)> {
    Ok(match patch_type {
        PatchType::Merge => (patch::merge_patch(current, body), Ownership::Update),
        PatchType::Json => {
            let out = patch::json_patch(current, body).map_err(|e| {
                let mut err = ApiError::bad_request(e);
                err.code = 422;
                err.reason = "Invalid";
                err
            })?;
            (out, Ownership::Update)
        }
        PatchType::Strategic => {
            if rt.custom {
                return Err(ApiError::unsupported_media_type(
                    "application/strategic-merge-patch+json",
                ));
            }
            (
                patch::strategic_merge(current, body, SchemaRef(Some(&rt.merge_schema))),
                Ownership::Update,
            )
        }
        PatchType::Apply => {
            check_type_meta(rt, body)?;
            check_apply_identity(rt, name, body)?;
            let applied = ssa::apply(
                Some(current),
                body,
                &opts.field_manager,
                opts.force,
                scope,
                &rt.merge_schema,
                &rt.api_version(),
            )
            .map_err(|conflicts| {
                ApiError::apply_conflicts(&subject(rt, name), &conflicts, &rt.api_version())
            })?;
            (applied, Ownership::Applied)
        }
    })
}
