//! What a write may change of the stored object: its scope (status or the rest), never the
//! server-owned metadata, no finalizers added while deleting; `generation` follows the spec.

use crate::errors::ApiResult;
use crate::meta;
use crate::resources::ResourceType;
use crate::validation::FieldErrorType;
use serde_json::{Value, json};

use super::{fold_string_data, invalid};
use crate::crd;
use crate::errors::ApiError;
use crate::ssa::Scope;

/// The status subresource writes only status; the main resource never writes status.
pub(super) fn restrict_to_scope(scope: Scope, old: &Value, mut new: Value) -> Value {
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
pub(super) fn keep_server_metadata(old: &Value, new: &mut Value) {
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
pub(super) fn check_no_new_finalizers(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    new: &Value,
) -> ApiResult<()> {
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
pub(super) fn bump_generation(old: &Value, new: &mut Value) {
    let generation = meta::meta(old)
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    meta::meta_mut(new).insert("generation".into(), json!(generation + 1));
}

pub(super) fn set_or_remove(obj: &mut Value, key: &str, value: Option<Value>) {
    let Some(m) = obj.as_object_mut() else { return };
    match value {
        Some(v) => m.insert(key.into(), v),
        None => m.remove(key),
    };
}

/// The written object as the server keeps it, before validation: limited to the write's scope,
/// with the URL's type, the stored server metadata, Secret `stringData` folded in, a CRD's
/// accepted status (and its resource types, to register once stored), a Namespace's spec kept.
pub(super) fn server_shaped(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    new: Value,
    scope: Scope,
) -> ApiResult<(Value, Option<Vec<ResourceType>>)> {
    let mut new = restrict_to_scope(scope, old, new);
    new["apiVersion"] = json!(rt.api_version());
    new["kind"] = json!(rt.kind);
    keep_server_metadata(old, &mut new);
    check_no_new_finalizers(rt, name, old, &new)?;
    if rt.is_secret() {
        fold_string_data(&mut new);
    }
    let mut crd_types = None;
    if rt.is_crd() {
        let types =
            crd::resource_types(&new).map_err(|e| ApiError::invalid(&rt.kind, &rt.group, name, &e))?;
        if scope != Scope::Status {
            new["status"] = crd::accepted_status(&new, Some(old));
        }
        crd_types = Some(types);
    }
    if rt.is_namespace() && scope != Scope::Status {
        set_or_remove(&mut new, "spec", old.get("spec").cloned());
    }
    Ok((new, crd_types))
}
