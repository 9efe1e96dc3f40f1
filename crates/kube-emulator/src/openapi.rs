//! OpenAPI v3 (`/openapi/v3` index and one document per group-version). kubectl reads it to learn
//! that the server validates fields itself (the `fieldValidation` parameter on PATCH), so it sends
//! `fieldValidation=Strict` instead of validating client-side, and `kubectl explain` renders the
//! CRD schemas from it.

use crate::discovery::KUBE_MINOR;
use crate::resources::{Registry, ResourceType};
use serde_json::{Map, Value, json};
use std::hash::{DefaultHasher, Hash, Hasher};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The schema component name, e.g. `dev.tpu-operator.v1alpha1.TpuSlice`, `io.k8s.api.core.v1.ConfigMap`.
fn schema_name(t: &ResourceType) -> String {
    if t.group.is_empty() {
        return format!("io.k8s.api.core.v1.{}", t.kind);
    }
    if !t.custom {
        let short = t.group.split('.').next().unwrap_or(&t.group);
        return format!("io.k8s.api.{short}.{}.{}", t.version, t.kind);
    }
    let reversed: Vec<&str> = t.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), t.version, t.kind)
}

fn gvk(t: &ResourceType) -> Value {
    json!({"group": t.group, "version": t.version, "kind": t.kind})
}

fn object_meta_schema() -> Value {
    let string = |d: &str| json!({"type": "string", "description": d});
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": string("Name must be unique within a namespace."),
            "generateName": string("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "namespace": string("Namespace defines the space within which each name must be unique."),
            "uid": string("UID is the unique in time and space value for this object."),
            "resourceVersion": string("An opaque value that represents the internal version of this object."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Map of string keys and values that can be used to organize and categorize objects."},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Annotations is an unstructured key value map stored with a resource."},
            "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "description": "Must be empty before the object is deleted from the registry."},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"], "description": "List of objects depended by this object."},
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow."}
        }
    })
}

/// The component schema of a resource: the CRD schema with `metadata` pointing at ObjectMeta.
fn resource_schema(t: &ResourceType) -> Value {
    let mut schema = t.schema.clone().unwrap_or_else(|| {
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}
        }})
    });
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema["properties"] = json!({});
    }
    let description = schema.pointer("/properties/metadata/description").cloned().unwrap_or_else(|| {
        json!("Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
    });
    schema["properties"]["metadata"] = json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": description});
    schema["x-kubernetes-group-version-kind"] = json!([gvk(t)]);
    schema
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(t: &ResourceType, action: &str, id: &str, body: bool, params: Vec<Value>) -> Value {
    let reference = json!({"$ref": format!("#/components/schemas/{}", schema_name(t))});
    let mut op = json!({
        "operationId": id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(t),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference.clone()}}}},
    });
    if body {
        op["requestBody"] = json!({"content": {"application/json": {"schema": reference}}, "required": true});
    }
    op
}

fn write_params() -> Vec<Value> {
    vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
        ),
    ]
}

fn paths_for(t: &ResourceType, paths: &mut Map<String, Value>) {
    let prefix = format!("/{}", gv_path(&t.group, &t.version));
    let collection = if t.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", t.plural)
    } else {
        format!("{prefix}/{}", t.plural)
    };
    let kind = &t.kind;
    let mut patch_params = write_params();
    patch_params.push(query_param(
        "force",
        "Force is going to \"force\" Apply requests.",
    ));
    paths.insert(
        collection.clone(),
        json!({
            "get": operation(t, "list", &format!("list{kind}"), false, vec![query_param("labelSelector", "A selector to restrict the list of returned objects by their labels.")]),
            "post": operation(t, "post", &format!("create{kind}"), true, write_params()),
            "delete": operation(t, "deletecollection", &format!("deletecollection{kind}"), false, vec![]),
        }),
    );
    let item = format!("{collection}/{{name}}");
    paths.insert(
        item.clone(),
        json!({
            "get": operation(t, "get", &format!("read{kind}"), false, vec![]),
            "put": operation(t, "put", &format!("replace{kind}"), true, write_params()),
            "patch": operation(t, "patch", &format!("patch{kind}"), true, patch_params.clone()),
            "delete": operation(t, "delete", &format!("delete{kind}"), false, vec![]),
        }),
    );
    if t.status_subresource {
        paths.insert(
            format!("{item}/status"),
            json!({
                "get": operation(t, "get", &format!("read{kind}Status"), false, vec![]),
                "put": operation(t, "put", &format!("replace{kind}Status"), true, write_params()),
                "patch": operation(t, "patch", &format!("patch{kind}Status"), true, patch_params),
            }),
        );
    }
}

/// The OpenAPI v3 document of one group-version.
pub fn document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta_schema());
    for t in &types {
        paths_for(t, &mut paths);
        schemas.insert(schema_name(t), resource_schema(t));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{KUBE_MINOR}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The `/openapi/v3` index: one entry per group-version with a content-hash URL.
pub fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let Some(doc) = document(registry, &group, &version) else {
                continue;
            };
            let mut hasher = DefaultHasher::new();
            doc.to_string().hash(&mut hasher);
            let path = gv_path(&group, &version);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", hasher.finish())}),
            );
        }
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_advertise_field_validation() {
        let r = Registry::with_builtins();
        let doc = document(&r, "", "v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(
            index(&r)["paths"]["apis/coordination.k8s.io/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .contains("hash=")
        );
    }
}
