//! The apiserver's "structural schema" rules for CRD schemas (a CRD whose schema breaks them is
//! refused at creation): every field has a `type` (unless `x-kubernetes-int-or-string` or
//! `x-kubernetes-preserve-unknown-fields`), value validations under `allOf`/`anyOf`/`oneOf`/`not`
//! carry no `type`/`default`/`nullable`/`description`/`additionalProperties` (except the
//! int-or-string `anyOf` idiom), arrays have `items`, `properties` and `additionalProperties` are
//! exclusive, `metadata` at the root only constrains `name`/`generateName`, and list-map keys are
//! required or defaulted.

use serde_json::Value;

fn is_true(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool) == Some(true)
}

/// `(field path, message)` for every violation, paths in the apiserver's
/// `openAPIV3Schema.properties[spec].type` form relative to `base`.
pub fn violations(schema: &Value, base: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push((
            format!("{base}.type"),
            "Unsupported value: must be object at the root".into(),
        ));
    }
    if let Some(meta) = schema.pointer("/properties/metadata") {
        let allowed = ["name", "generateName"];
        for key in meta
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if !allowed.contains(&key.as_str()) {
                out.push((
                    format!("{base}.properties[metadata].properties[{key}]"),
                    "Forbidden: must not be specified".into(),
                ));
            }
        }
    }
    node(schema, base, true, &mut out);
    out
}

fn node(s: &Value, path: &str, root: bool, out: &mut Vec<(String, String)>) {
    let Some(map) = s.as_object() else { return };
    own_violations(s, map, path, root, out);
    let int_or_string = is_true(s, "x-kubernetes-int-or-string");
    for (name, child) in map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        node(child, &format!("{path}.properties[{name}]"), false, out);
    }
    if let Some(items) = map.get("items").filter(|i| i.is_object()) {
        node(items, &format!("{path}.items"), false, out);
    }
    if let Some(additional) = map.get("additionalProperties").filter(|a| a.is_object()) {
        node(additional, &format!("{path}.additionalProperties"), false, out);
    }
    for keyword in ["allOf", "anyOf", "oneOf"] {
        for (i, branch) in map
            .get(keyword)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            value_validation(
                branch,
                &format!("{path}.{keyword}[{i}]"),
                int_or_string && keyword == "anyOf",
                out,
            );
        }
    }
    if let Some(not) = map.get("not") {
        value_validation(not, &format!("{path}.not"), false, out);
    }
}

/// The rules one schema node answers for itself: a `type` (unless int-or-string or
/// preserve-unknown-fields, and none with int-or-string), embedded resources as objects,
/// `properties` without `additionalProperties`, arrays with `items`, list-map keys.
fn own_violations(
    s: &Value,
    map: &serde_json::Map<String, Value>,
    path: &str,
    root: bool,
    out: &mut Vec<(String, String)>,
) {
    let int_or_string = is_true(s, "x-kubernetes-int-or-string");
    let preserve = is_true(s, "x-kubernetes-preserve-unknown-fields");
    let type_ = map.get("type").and_then(Value::as_str).unwrap_or_default();
    if type_.is_empty() && !int_or_string && !preserve {
        let what = if root {
            "at the root"
        } else {
            "for specified object fields"
        };
        out.push((
            format!("{path}.type"),
            format!("Required value: must not be empty {what}"),
        ));
    }
    if int_or_string && !type_.is_empty() {
        out.push((
            format!("{path}.type"),
            "Invalid value: must be empty if x-kubernetes-int-or-string is true".into(),
        ));
    }
    if is_true(s, "x-kubernetes-embedded-resource") && type_ != "object" {
        out.push((
            format!("{path}.type"),
            "Invalid value: must be object if x-kubernetes-embedded-resource is true".into(),
        ));
    }
    if map.contains_key("properties")
        && map
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == true)
    {
        out.push((
            format!("{path}.additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive".into(),
        ));
    }
    if type_ == "array" && !map.contains_key("items") {
        out.push((
            format!("{path}.items"),
            "Required value: must be specified".into(),
        ));
    }
    if s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        list_map_key_violations(s, path, out);
    }
}

/// A list-map's keys must be required or defaulted in its items' schema.
fn list_map_key_violations(s: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let items = s.get("items");
    let required: Vec<&str> = items
        .and_then(|i| i.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for key in s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let defaulted = items
            .and_then(|i| i.pointer(&format!("/properties/{key}/default")))
            .is_some();
        if !required.contains(&key) && !defaulted {
            out.push((
                format!("{path}.items.properties[{key}]"),
                "Required value: all map keys must be required or have a default value".into(),
            ));
        }
    }
}

/// Inside value validations only constraints may appear, not structure.
fn value_validation(s: &Value, path: &str, int_or_string_anyof: bool, out: &mut Vec<(String, String)>) {
    let Some(map) = s.as_object() else { return };
    for forbidden in [
        "type",
        "default",
        "nullable",
        "description",
        "additionalProperties",
        "title",
    ] {
        if !map.contains_key(forbidden) {
            continue;
        }
        // The int-or-string idiom `anyOf: [{type: integer}, {type: string}]` is the one exception.
        if forbidden == "type" && int_or_string_anyof {
            continue;
        }
        out.push((
            format!("{path}.{forbidden}"),
            "Forbidden: must be empty to be structural".into(),
        ));
    }
    for key in map.keys().filter(|k| k.starts_with("x-kubernetes-")) {
        out.push((
            format!("{path}.{key}"),
            "Forbidden: must be false to be structural".into(),
        ));
    }
    for (name, child) in map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        value_validation(child, &format!("{path}.properties[{name}]"), false, out);
    }
    if let Some(items) = map.get("items").filter(|i| i.is_object()) {
        value_validation(items, &format!("{path}.items"), false, out);
    }
    for keyword in ["allOf", "anyOf", "oneOf"] {
        for (i, branch) in map
            .get(keyword)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            value_validation(branch, &format!("{path}.{keyword}[{i}]"), false, out);
        }
    }
    if let Some(not) = map.get("not") {
        value_validation(not, &format!("{path}.not"), false, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_missing_types_and_typed_value_validations() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "untyped": {"description": "no type"},
                "size": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "free": {"x-kubernetes-preserve-unknown-fields": true},
                "choice": {"type": "object", "oneOf": [{"type": "object", "required": ["a"]}]},
                "list": {"type": "array"}
            }}
        }});
        let v = violations(&schema, "openAPIV3Schema");
        let paths: Vec<&str> = v.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "openAPIV3Schema.properties[spec].properties[choice].oneOf[0].type",
                "openAPIV3Schema.properties[spec].properties[list].items",
                "openAPIV3Schema.properties[spec].properties[untyped].type",
            ]
        );
    }
}
