//! The non-apply patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902, with the
//! apiserver's leniency that a `test` for `null` succeeds on an absent path, which kube-rs's
//! finalizer helper relies on) and strategic merge patch for the built-in kinds.

use crate::fieldset::{ListType, SchemaRef, item_key};
use json_patch::{Patch, PatchOperation};
use serde_json::{Map, Value};

pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// Applies an RFC 6902 patch. Errors name the failing operation.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, String> {
    let ops: Patch = serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    let mut doc = target.clone();
    for (i, op) in ops.0.iter().enumerate() {
        if let PatchOperation::Test(test) = op
            && test.value.is_null()
            && doc.pointer(test.path.as_str()).is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op))
            .map_err(|e| format!("the JSON patch operation {i} ({op}) failed: {e}"))?;
    }
    Ok(doc)
}

/// Strategic merge patch, as far as kubectl needs it for the built-in kinds: maps merge, lists
/// merge by their merge key (from the schema's list-map keys) or as sets, other lists are
/// replaced; `$patch`, `$retainKeys`, `$setElementOrder/` and `$deleteFromPrimitiveList/`
/// directives are honoured.
pub fn strategic_merge(target: &Value, patch: &Value, schema: SchemaRef<'_>) -> Value {
    let mut out = target.clone();
    merge_value(&mut out, patch, schema);
    out
}

fn merge_value(target: &mut Value, patch: &Value, schema: SchemaRef<'_>) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        Some("replace") => {
            let mut replacement = p.clone();
            replacement.remove("$patch");
            *target = Value::Object(replacement);
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("object");
    if let Some(retain) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in p {
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" || key == "$patch" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (t.get_mut(field), value.as_array()) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if value.is_null() {
            t.remove(key);
            continue;
        }
        merge_field(t, key, value, schema.child(key));
    }
}

/// Merges one field of a patch (not a directive, not null) into the target map: maps merge
/// (a map deleted by `$patch: delete` goes), lists merge per their schema, anything else
/// replaces the field, without directive items.
fn merge_field(t: &mut Map<String, Value>, key: &str, value: &Value, child: SchemaRef<'_>) {
    match (t.get_mut(key), value) {
        (Some(existing @ Value::Object(_)), Value::Object(_)) => {
            merge_value(existing, value, child);
            if existing.is_null() {
                t.remove(key);
            }
        }
        (Some(Value::Array(existing)), Value::Array(items)) => merge_list(existing, items, child),
        (_, Value::Object(_)) => {
            let mut fresh = Value::Object(Map::new());
            merge_value(&mut fresh, value, child);
            if !fresh.is_null() {
                t.insert(key.to_string(), fresh);
            }
        }
        _ => {
            let cleaned = match value {
                Value::Array(items) => {
                    Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect())
                }
                other => other.clone(),
            };
            t.insert(key.to_string(), cleaned);
        }
    }
}

fn is_directive(item: &Value) -> bool {
    item.get("$patch").is_some()
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], schema: SchemaRef<'_>) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *existing = items.iter().filter(|i| !is_directive(i)).cloned().collect();
        return;
    }
    match schema.list_type() {
        ListType::Map(keys) => {
            for item in items {
                let key = item_key(item, &keys);
                let position = existing.iter().position(|e| item_key(e, &keys) == key);
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(i) = position {
                        existing.remove(i);
                    }
                    continue;
                }
                match position {
                    Some(i) => merge_value(&mut existing[i], item, schema.items()),
                    None => existing.push(item.clone()),
                }
            }
        }
        ListType::Set => {
            for item in items {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
        }
        ListType::Atomic => *existing = items.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_test_for_null_on_absent_path_succeeds() {
        let doc = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap()["metadata"]["finalizers"],
            json!(["f"])
        );
        let stale = json!([{"op": "test", "path": "/metadata/name", "value": "b"}]);
        assert!(json_patch(&doc, &stale).unwrap_err().contains("operation 0"));
    }

    #[test]
    fn strategic_merge_directives() {
        let schema = json!({"properties": {"metadata": crate::resources::metadata_schema()}});
        let doc =
            json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}});
        let patch = json!({
            "metadata": {"finalizers": ["b"], "labels": {"y": null}, "$setElementOrder/finalizers": ["a", "b"]},
            "data": {"$retainKeys": ["n"], "n": "w"}
        });
        let out = strategic_merge(&doc, &patch, SchemaRef(Some(&schema)));
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}}, "data": {"n": "w"}})
        );
    }
}
