//! update (PUT) and patch (JSON, merge, strategic, server-side apply), ending in the
//! same pipeline the apiserver runs before it persists an object.

use super::{State, Task, obj_ref, subject, to_served, to_stored};
use crate::crd;
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
    /// Schema validation (CRs), pruning, defaulting and unknown-field handling.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn validate(
        &self,
        rt: &ResourceType,
        name: &str,
        obj: Value,
        old: Option<&Value>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        ownership: Ownership,
    ) -> ApiResult<Value> {
        let Some(validator) = &rt.validator else {
            return Ok(obj);
        };
        let validated = validator
            .validate_detailed(&obj, old)
            .map_err(|e| ApiError::invalid(&rt.kind, &rt.group, name, &e))?;
        if !validated.unknown_fields.is_empty() {
            if ownership == Ownership::Applied {
                // Server-side apply always rejects fields the schema does not declare.
                let fields: Vec<String> = validated
                    .unknown_fields
                    .iter()
                    .map(|f| format!(".{f}: field not declared in schema"))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "failed to create typed patch object ({}, Kind={}): {}",
                    rt.api_version(),
                    rt.kind,
                    fields.join(", ")
                )));
            }
            match opts.field_validation {
                FieldValidation::Strict => {
                    let fields: Vec<String> = validated
                        .unknown_fields
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        rt.kind,
                        rt.version,
                        rt.kind,
                        fields.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(
                        validated
                            .unknown_fields
                            .iter()
                            .map(|f| format!("unknown field \"{f}\"")),
                    );
                }
                FieldValidation::Ignore => {}
            }
        }
        Ok(validated.object)
    }

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
        let (patched, ownership) = match patch_type {
            PatchType::Merge => (patch::merge_patch(&current, &body), Ownership::Update),
            PatchType::Json => {
                let out = patch::json_patch(&current, &body).map_err(|e| {
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
                    patch::strategic_merge(&current, &body, SchemaRef(Some(&rt.merge_schema))),
                    Ownership::Update,
                )
            }
            PatchType::Apply => {
                check_type_meta(rt, &body)?;
                check_apply_identity(rt, name, &body)?;
                let applied = ssa::apply(
                    Some(&current),
                    &body,
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
        };
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
        mut new: Value,
        scope: Scope,
        opts: &WriteOptions,
        ownership: Ownership,
    ) -> ApiResult<WriteOutcome> {
        let old = to_served(rt, &old_stored);
        let name = r.key.1.clone();

        new = restrict_to_scope(scope, &old, new);
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        keep_server_metadata(&old, &mut new);
        check_no_new_finalizers(rt, &name, &old, &new)?;
        if rt.is_secret() {
            fold_string_data(&mut new);
        }
        let mut crd_types = None;
        if rt.is_crd() {
            let types =
                crd::resource_types(&new).map_err(|e| ApiError::invalid(&rt.kind, &rt.group, &name, &e))?;
            if scope != Scope::Status {
                new["status"] = crd::accepted_status(&new, Some(&old));
            }
            crd_types = Some(types);
        }
        if rt.is_namespace() && scope != Scope::Status {
            set_or_remove(&mut new, "spec", old.get("spec").cloned());
        }
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
        if new == old {
            return Ok(WriteOutcome {
                object: old,
                created: false,
                warnings,
            });
        }
        if opts.dry_run {
            return Ok(WriteOutcome {
                object: new,
                created: false,
                warnings,
            });
        }
        if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() && !rt.is_namespace() {
            // The last finalizer is gone: the object goes away with this write.
            let removed = self
                .store
                .remove_with(r, Some(to_stored(rt, &new)))
                .expect("object exists under the lock");
            self.tasks
                .push_back(Task::Removed(r.storage_key.clone(), removed.clone()));
            return Ok(WriteOutcome {
                object: to_served(rt, &removed),
                created: false,
                warnings,
            });
        }
        let owners_changed = meta::owner_uids(&new) != meta::owner_uids(&old);
        let stored = self.store.put(r, to_stored(rt, &new));
        if let Some(types) = crd_types {
            self.register_crd_types(&stored, types);
        }
        if owners_changed {
            self.tasks.push_back(Task::Dangling(r.clone()));
        }
        Ok(WriteOutcome {
            object: to_served(rt, &stored),
            created: false,
            warnings,
        })
    }
}

/// The status subresource writes only status; the main resource never writes status.
fn restrict_to_scope(scope: Scope, old: &Value, mut new: Value) -> Value {
    match scope {
        Scope::Status => {
            let status = new.get("status").cloned();
            let managed = meta::meta(&new).get("managedFields").cloned();
            new = old.clone();
            set_or_remove(&mut new, "status", status);
            let m = meta::meta_mut(&mut new);
            match managed {
                Some(mf) => m.insert("managedFields".into(), mf),
                None => m.remove("managedFields"),
            };
        }
        Scope::Main => set_or_remove(&mut new, "status", old.get("status").cloned()),
        Scope::Whole => {}
    }
    new
}

/// Writes cannot change identity, timestamps, generation or resourceVersion: they keep the
/// stored object's.
fn keep_server_metadata(old: &Value, new: &mut Value) {
    let old_meta = meta::meta(old).clone();
    let m = meta::meta_mut(new);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.get(field) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
    m.remove("selfLink");
}

/// An object being deleted may lose finalizers but not gain any.
fn check_no_new_finalizers(rt: &ResourceType, name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    if !meta::is_deleting(old) {
        return Ok(());
    }
    let before = meta::finalizers(old);
    let added: Vec<String> = meta::finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(invalid(
        rt,
        name,
        "metadata.finalizers",
        FieldErrorType::Forbidden,
        format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}",
            json!(added)
        ),
    ))
}

/// A change of the spec part increments `generation`.
fn bump_generation(old: &Value, new: &mut Value) {
    let generation = meta::meta(old)
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    meta::meta_mut(new).insert("generation".into(), json!(generation + 1));
}

fn set_or_remove(obj: &mut Value, key: &str, value: Option<Value>) {
    let Some(m) = obj.as_object_mut() else { return };
    match value {
        Some(v) => m.insert(key.into(), v),
        None => m.remove(key),
    };
}

/// The body's apiVersion and kind, when given, must be the URL's.
pub(super) fn check_type_meta(rt: &ResourceType, body: &Value) -> ApiResult<()> {
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or_default();
    let accepted = [rt.api_version(), rt.storage_api_version.clone()];
    if !api_version.is_empty() && !accepted.iter().any(|a| a == api_version) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if !kind.is_empty() && kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

/// An applied configuration names its object (kube-rs and kubectl always send name, apiVersion, kind).
pub(super) fn check_apply_identity(rt: &ResourceType, name: &str, body: &Value) -> ApiResult<()> {
    // Applying an object read back from the server (with its managedFields) is a classic client
    // bug; the apiserver refuses it.
    if meta::meta(body)
        .get("managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let body_name = meta::name(body);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if body.get("apiVersion").is_none() || body.get("kind").is_none() {
        return Err(ApiError::bad_request(format!(
            "invalid object type: apply patches must set apiVersion and kind ({}, Kind={})",
            rt.api_version(),
            rt.kind
        )));
    }
    Ok(())
}
