//! Structural pruning and defaulting, as the apiserver applies them while decoding a custom
//! resource: unknown fields are dropped (unless `x-kubernetes-preserve-unknown-fields`), `null`s in
//! non-nullable fields are replaced by the field's default or dropped, and absent fields with a
//! `default` are filled in (the default itself is then pruned and defaulted too).

use super::path::FieldPath;
use serde_json::{Map, Value};

/// Fields the apiserver always keeps on the root object and on embedded resources: the schema
/// describes neither `apiVersion`/`kind` nor the contents of `metadata` (ObjectMeta is validated by
/// the server itself, not by the CRD schema).
const TYPE_META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// Prunes and defaults `value` in place against `schema`. Returns the paths of the unknown fields
/// that were removed, so the server can reject them under `fieldValidation=Strict` (kubectl's
/// default) or report them as warnings.
pub fn prune_and_default(schema: &Value, value: &mut Value, is_root: bool) -> Vec<FieldPath> {
    let mut unknown = Vec::new();
    walk(schema, value, &FieldPath::root(), is_root, &mut unknown);
    unknown
}

fn walk(
    schema: &Value,
    value: &mut Value,
    path: &FieldPath,
    keep_type_meta: bool,
    unknown: &mut Vec<FieldPath>,
) {
    match value {
        Value::Object(map) => walk_object(schema, map, path, keep_type_meta, unknown),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    let embedded = is_true(item_schema, "x-kubernetes-embedded-resource");
                    walk(item_schema, item, &path.index(i), embedded, unknown);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &FieldPath,
    keep_type_meta: bool,
    unknown: &mut Vec<FieldPath>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let preserve = is_true(schema, "x-kubernetes-preserve-unknown-fields");
    let additional = schema.get("additionalProperties").filter(|s| s.is_object());

    // 1. Drop unknown fields.
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in &keys {
        let declared = properties.is_some_and(|p| p.contains_key(key));
        let type_meta = keep_type_meta && TYPE_META_FIELDS.contains(&key.as_str());
        if declared || type_meta || preserve || additional.is_some() {
            continue;
        }
        if schema.get("additionalProperties") == Some(&Value::Bool(true)) {
            continue;
        }
        map.remove(key);
        unknown.push(path.key(key));
    }

    // 2. Nulls and defaults for declared properties.
    if let Some(properties) = properties {
        apply_defaults(properties, map, keep_type_meta);
    }

    // 3. Recurse into the remaining fields.
    for (key, child) in map.iter_mut() {
        if keep_type_meta && TYPE_META_FIELDS.contains(&key.as_str()) {
            continue;
        }
        let child_schema = properties.and_then(|p| p.get(key)).or(additional);
        if let Some(child_schema) = child_schema {
            let embedded = is_true(child_schema, "x-kubernetes-embedded-resource");
            walk(child_schema, child, &path.key(key), embedded, unknown);
        }
    }
}

/// A declared property missing from the object gets its default; a null one (unless nullable)
/// gets its default or goes. An embedded resource's metadata is left alone.
fn apply_defaults(properties: &Map<String, Value>, map: &mut Map<String, Value>, keep_type_meta: bool) {
    for (key, prop_schema) in properties {
        if keep_type_meta && key == "metadata" {
            continue;
        }
        let nullable = is_true(prop_schema, "nullable");
        match map.get(key) {
            Some(Value::Null) if !nullable => match prop_schema.get("default") {
                Some(default) => {
                    map.insert(key.clone(), default.clone());
                }
                None => {
                    map.remove(key);
                }
            },
            None => {
                if let Some(default) = prop_schema.get("default") {
                    map.insert(key.clone(), default.clone());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prunes_unknown_fields_and_applies_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "string", "default": "x"},
                        "b": {"type": "object", "default": {}, "properties": {"c": {"type": "integer", "default": 3}}},
                        "n": {"type": "string"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"k": {"type": "string"}}}}
                    }
                }
            }
        });
        let mut obj = json!({
            "apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n", "anything": 1},
            "spec": {"zzz": 1, "n": null, "free": {"q": 1}, "m": {"one": {"k": "v", "drop": 1}}},
            "extra": true
        });
        let unknown = prune_and_default(&schema, &mut obj, true);
        let mut unknown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        unknown.sort();
        assert_eq!(unknown, ["extra", "spec.m.one.drop", "spec.zzz"]);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n", "anything": 1},
                "spec": {"a": "x", "b": {"c": 3}, "free": {"q": 1}, "m": {"one": {"k": "v"}}}
            })
        );
    }
}
