//! CustomResourceDefinitions: checking a CRD, turning its served versions into resource types
//! (with validators and printer columns), and the status the apiserver's controllers publish.

use crate::meta;
use crate::resources::{BuiltinTable, PrinterColumn, ResourceType, merge_schema};
use crate::validation::path::FieldPath;
use crate::validation::{CrdValidator, FieldCause, FieldErrorType, Invalid};
use serde_json::{Value, json};
use std::sync::Arc;

/// The finalizer the apiserver puts on every CRD so instances are removed before the CRD is.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn invalid(path: &str, message: String) -> FieldCause {
    FieldCause::new(FieldErrorType::Invalid, &FieldPath::parse(path), message)
}

fn required(path: &str, detail: &str) -> FieldCause {
    let message = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    FieldCause::new(FieldErrorType::Required, &FieldPath::parse(path), message)
}

fn str_at<'a>(crd: &'a Value, pointer: &str) -> &'a str {
    crd.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// Checks a CRD and builds the resource types of its served versions.
pub fn resource_types(crd: &Value) -> Result<Vec<ResourceType>, Invalid> {
    let mut causes = identity_causes(crd);
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    causes.extend(storage_version_causes(&versions));

    let mut types = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let schema_path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        let Some(schema) = version.pointer("/schema/openAPIV3Schema") else {
            causes.push(required(&schema_path, "schemas are required"));
            continue;
        };
        let structural = crate::validation::structural::violations(schema, &schema_path);
        if !structural.is_empty() {
            causes.extend(
                structural
                    .into_iter()
                    .map(|(field, message)| FieldCause { field, message }),
            );
            continue;
        }
        let validator = match CrdValidator::from_schema(schema.clone()) {
            Ok(v) => v,
            Err(e) => {
                causes.push(invalid(&schema_path, format!("Invalid value: \"object\": {e}")));
                continue;
            }
        };
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        types.push(served_type(crd, version, schema, validator));
    }
    if causes.is_empty() {
        Ok(types)
    } else {
        Err(Invalid { causes })
    }
}

/// Exactly one version is the storage version.
fn storage_version_causes(versions: &[Value]) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if versions.is_empty() {
        out.push(required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        out.push(invalid(
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                json!(versions.iter().map(|v| v.get("name")).collect::<Vec<_>>())
            ),
        ));
    }
    out
}

/// The checks of the CRD's names and scope.
fn identity_causes(crd: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");
    let scope = str_at(crd, "/spec/scope");
    if group.is_empty() {
        causes.push(required("spec.group", ""));
    }
    if plural.is_empty() {
        causes.push(required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        causes.push(required("spec.names.kind", ""));
    }
    let name = meta::name(crd);
    if name != format!("{plural}.{group}") {
        causes.push(invalid(
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(FieldCause::new(
            FieldErrorType::NotSupported,
            &FieldPath::parse("spec.scope"),
            format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""),
        ));
    }
    causes
}

/// The resource type of one served version, whose schema has been checked.
fn served_type(crd: &Value, version: &Value, schema: &Value, validator: CrdValidator) -> ResourceType {
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");
    let vname = version.get("name").and_then(Value::as_str).unwrap_or_default();
    ResourceType {
        group: group.to_string(),
        version: vname.to_string(),
        kind: kind.to_string(),
        list_kind: crd
            .pointer("/spec/names/listKind")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| format!("{kind}List")),
        plural: plural.to_string(),
        singular: crd
            .pointer("/spec/names/singular")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: strings(crd.pointer("/spec/names/shortNames")),
        categories: strings(crd.pointer("/spec/names/categories")),
        namespaced: str_at(crd, "/spec/scope") == "Namespaced",
        status_subresource: version.pointer("/subresources/status").is_some(),
        has_generation: true,
        custom: true,
        storage_key: format!("{group}/{plural}"),
        storage_api_version: storage_api_version(crd),
        validator: Some(Arc::new(validator)),
        merge_schema: merge_schema(Some(schema)),
        schema: Some(schema.clone()),
        printer_columns: printer_columns(version),
        builtin_table: BuiltinTable::None,
        extra_subresources: Vec::new(),
        deprecation_warning: deprecation_warning(&api_version(group, vname), kind, version),
    }
}

/// The warning of a version marked `deprecated`: its `deprecationWarning`, else the API server's
/// default, `<group>/<version> <Kind> is deprecated`.
fn deprecation_warning(api_version: &str, kind: &str, version: &Value) -> Option<String> {
    if version.get("deprecated").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    Some(match version.get("deprecationWarning").and_then(Value::as_str) {
        Some(warning) => warning.to_string(),
        None => format!("{api_version} {kind} is deprecated"),
    })
}

/// `<group>/<version>`, as a CRD's objects name their version.
fn api_version(group: &str, version: &str) -> String {
    format!("{group}/{version}")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// The version's printer columns; without any, the apiserver shows a single AGE column.
fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let columns: Vec<PrinterColumn> = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    type_: c
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("string")
                        .to_string(),
                    format: c
                        .get("format")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    description: c
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    json_path: c
                        .get("jsonPath")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    if columns.is_empty() {
        vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }]
    } else {
        columns
    }
}

/// The storage version's apiVersion (`group/version`).
pub fn storage_api_version(crd: &Value) -> String {
    let group = str_at(crd, "/spec/group");
    let version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    api_version(group, version)
}

/// The status the apiserver's naming and establishing controllers publish for an accepted CRD.
pub fn accepted_status(crd: &Value, previous: Option<&Value>) -> Value {
    let transition = |kind: &str| {
        previous
            .and_then(|p| p.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(meta::now()))
    };
    let kind = str_at(crd, "/spec/names/kind");
    let mut names = crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
    if names.get("singular").is_none() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names.get("listKind").is_none() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let mut stored: Vec<String> = previous
        .and_then(|p| p.pointer("/status/storedVersions"))
        .map(|v| strings(Some(v)))
        .unwrap_or_default();
    let storage = storage_api_version(crd)
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    if !stored.contains(&storage) {
        stored.push(storage);
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found",
             "lastTransitionTime": transition("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": transition("Established")}
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_mismatched_name_and_builds_served_versions() {
        let crd = json!({
            "metadata": {"name": "wrong"},
            "spec": {"group": "g.dev", "scope": "Namespaced", "names": {"plural": "ws", "kind": "W"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        });
        let err = resource_types(&crd).unwrap_err();
        assert_eq!(err.causes[0].field, "metadata.name");
        let mut ok = crd.clone();
        ok["metadata"]["name"] = json!("ws.g.dev");
        let types = resource_types(&ok).unwrap();
        assert_eq!(types[0].storage_key, "g.dev/ws");
        assert_eq!(types[0].printer_columns[0].name, "Age");
        assert_eq!(accepted_status(&ok, None)["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn non_structural_schemas_are_refused_with_the_schema_path() {
        let crd = json!({
            "metadata": {"name": "ws.g.dev"},
            "spec": {"group": "g.dev", "scope": "Namespaced", "names": {"plural": "ws", "kind": "W"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {}}}}}}]}
        });
        let err = resource_types(&crd).unwrap_err();
        assert_eq!(
            err.causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type"
        );
        assert_eq!(
            err.causes[0].message,
            "Required value: must not be empty for specified object fields"
        );
    }
}
