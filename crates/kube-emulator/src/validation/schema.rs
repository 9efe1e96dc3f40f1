//! Structural-schema validation with the `jsonschema` crate. The CRD's `openAPIV3Schema` is first
//! rewritten into plain JSON Schema (draft 4, which OpenAPI v3.0 follows), and every error is turned
//! into the `field.Error` the apiserver would report, with the same wording.

use super::path::{FieldPath, Segment, render_value, type_name};
use super::{FieldCause, FieldErrorType};
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use serde_json::{Map, Value};

/// Keywords that carry no validation meaning for JSON Schema, or whose meaning differs (the
/// Kubernetes extensions are handled by pruning, CEL and the structural checks in this module).
const STRIPPED: [&str; 6] = [
    "description",
    "example",
    "externalDocs",
    "default",
    "x-kubernetes-validations",
    "format",
];

/// Rewrites a structural schema node into draft-4 JSON Schema.
pub fn to_json_schema(schema: &Value, is_resource_root: bool) -> Value {
    let Some(obj) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in obj {
        if STRIPPED.contains(&key.as_str()) {
            continue;
        }
        let converted = match key.as_str() {
            "properties" => {
                let mut props = Map::new();
                for (name, prop) in value.as_object().into_iter().flatten() {
                    let child = if is_resource_root && name == "metadata" {
                        // ObjectMeta is validated by the server, not by the CRD schema.
                        serde_json::json!({"type": "object"})
                    } else {
                        to_json_schema(prop, is_true(prop, "x-kubernetes-embedded-resource"))
                    };
                    props.insert(name.clone(), child);
                }
                Value::Object(props)
            }
            "items" | "additionalProperties" | "not" if value.is_object() => {
                to_json_schema(value, is_true(value, "x-kubernetes-embedded-resource"))
            }
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| to_json_schema(s, false))
                    .collect(),
            ),
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    if is_true(schema, "x-kubernetes-int-or-string") && !out.contains_key("type") {
        out.insert("type".into(), serde_json::json!(["integer", "string"]));
    }
    if is_true(schema, "nullable") {
        match out.get_mut("type") {
            Some(Value::String(t)) => {
                let t = t.clone();
                out.insert("type".into(), serde_json::json!([t, "null"]));
            }
            Some(Value::Array(types)) => types.push(Value::String("null".into())),
            _ => {}
        }
        if let Some(Value::Array(options)) = out.get_mut("enum") {
            options.push(Value::Null);
        }
    }
    Value::Object(out)
}

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn to_field_path(location: &jsonschema::paths::Location) -> FieldPath {
    FieldPath(
        location
            .segments()
            .map(|segment| match segment {
                LocationSegment::Property(p) => Segment::Key(p.into_owned()),
                LocationSegment::Index(i) => Segment::Index(i),
            })
            .collect(),
    )
}

/// A bound as the apiserver prints it: Go formats the float64 it stores, so `10.0` reads `10`.
fn number_text(value: &Value) -> String {
    match value.as_f64() {
        Some(f) if value.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => value.to_string(),
    }
}

/// Converts one `jsonschema` error into the apiserver's field error. Returns the cause and
/// whether it is a type error (which makes the apiserver skip CEL rules).
pub fn to_cause(error: &jsonschema::ValidationError<'_>) -> (FieldCause, bool) {
    let path = to_field_path(error.instance_path());
    let instance: &Value = error.instance();
    let shown = render_value(instance);
    let invalid = |detail: String| {
        FieldCause::new(
            FieldErrorType::Invalid,
            &path,
            format!("Invalid value: {shown}: {path} in body {detail}"),
        )
    };
    let cause = match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            FieldCause::new(
                FieldErrorType::Required,
                &path.key(name),
                "Required value".to_string(),
            )
        }
        ValidationErrorKind::Type { kind } => return (type_invalid(&path, instance, kind), true),
        ValidationErrorKind::Enum { options } => unsupported_value(&path, &shown, options),
        ValidationErrorKind::MaxLength { limit } => FieldCause::new(
            FieldErrorType::TooLong,
            &path,
            format!("Too long: may not be more than {limit} bytes"),
        ),
        ValidationErrorKind::MaxItems { limit } => {
            too_many(&path, instance.as_array().map_or(0, Vec::len), *limit)
        }
        ValidationErrorKind::MaxProperties { limit } => {
            too_many(&path, instance.as_object().map_or(0, Map::len), *limit)
        }
        ValidationErrorKind::UniqueItems => FieldCause::new(
            FieldErrorType::Duplicate,
            &path,
            format!("Duplicate value: {shown}"),
        ),
        ValidationErrorKind::AdditionalProperties { unexpected } => FieldCause::new(
            FieldErrorType::Invalid,
            &path,
            format!(
                "Invalid value: {shown}: {path} in body has unexpected properties {}",
                unexpected.join(", ")
            ),
        ),
        other => invalid(invalid_detail(other)),
    };
    (cause, false)
}

/// What an "Invalid value" error says the value should be, for the keywords reported as one.
fn invalid_detail(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::Pattern { pattern } => format!("should match '{pattern}'"),
        ValidationErrorKind::MinLength { limit } => format!("should be at least {limit} chars long"),
        ValidationErrorKind::Maximum { limit } => {
            format!("should be less than or equal to {}", number_text(limit))
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("should be greater than or equal to {}", number_text(limit))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("should be less than {}", number_text(limit))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("should be greater than {}", number_text(limit))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => format!("should be a multiple of {multiple_of}"),
        ValidationErrorKind::MinItems { limit } => format!("should have at least {limit} items"),
        ValidationErrorKind::MinProperties { limit } => format!("should have at least {limit} properties"),
        ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::OneOfMultipleValid { .. } => {
            "must validate one and only one schema (oneOf)".to_string()
        }
        ValidationErrorKind::AnyOf { .. } => "must validate at least one schema (anyOf)".to_string(),
        ValidationErrorKind::Not { .. } => "must not validate the schema (not)".to_string(),
        other => format!("failed {} validation", other.keyword()),
    }
}

/// A type error: `instance` is not of the schema's type(s).
fn type_invalid(path: &FieldPath, instance: &Value, kind: &TypeKind) -> FieldCause {
    let expected = match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","),
    };
    let actual = type_name(instance);
    let message =
        format!("Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\"");
    FieldCause::new(FieldErrorType::TypeInvalid, path, message)
}

/// A value outside the schema's `enum` (`null`, added for `nullable`, is not listed as supported).
fn unsupported_value(path: &FieldPath, shown: &str, options: &Value) -> FieldCause {
    let supported = options
        .as_array()
        .map(|o| {
            o.iter()
                .filter(|v| !v.is_null())
                .map(render_value)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    FieldCause::new(
        FieldErrorType::NotSupported,
        path,
        format!("Unsupported value: {shown}: supported values: {supported}"),
    )
}

/// `maxItems` and `maxProperties` share the apiserver's `field.TooMany` wording ("items").
fn too_many(path: &FieldPath, count: usize, limit: u64) -> FieldCause {
    FieldCause::new(
        FieldErrorType::TooMany,
        path,
        format!("Too many: {count}: must have at most {limit} items"),
    )
}

/// Checks the `x-kubernetes-list-type` invariants (`map` keys and `set` items are unique) and that
/// embedded resources name their `apiVersion` and `kind`, which JSON Schema cannot express.
pub fn structural_checks(schema: &Value, value: &Value, path: &FieldPath, causes: &mut Vec<FieldCause>) {
    match value {
        Value::Object(map) => {
            if is_true(schema, "x-kubernetes-embedded-resource") {
                embedded_type_meta(map, path, causes);
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|s| s.is_object());
            for (key, child) in map {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    structural_checks(child_schema, child, &path.key(key), causes);
                }
            }
        }
        Value::Array(items) => {
            let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
            match list_type {
                Some("map") => duplicate_map_keys(schema, items, path, causes),
                Some("set") => duplicate_set_items(items, path, causes),
                _ => {}
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    structural_checks(item_schema, item, &path.index(i), causes);
                }
            }
        }
        _ => {}
    }
}

/// An embedded resource names its `apiVersion` and `kind`.
fn embedded_type_meta(map: &Map<String, Value>, path: &FieldPath, causes: &mut Vec<FieldCause>) {
    for required in ["apiVersion", "kind"] {
        let named = map
            .get(required)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !named {
            causes.push(FieldCause::new(
                FieldErrorType::Required,
                &path.key(required),
                "Required value".into(),
            ));
        }
    }
}

/// A list-map's items are unique by their `x-kubernetes-list-map-keys`: each repeat is a
/// Duplicate value showing the repeated key.
fn duplicate_map_keys(schema: &Value, items: &[Value], path: &FieldPath, causes: &mut Vec<FieldCause>) {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key: Vec<Value> = keys
            .iter()
            .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
            .collect();
        if seen.contains(&key) {
            let shown: Map<String, Value> = keys
                .iter()
                .zip(key.iter())
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            causes.push(FieldCause::new(
                FieldErrorType::Duplicate,
                &path.index(i),
                format!("Duplicate value: {}", Value::Object(shown)),
            ));
        } else {
            seen.push(key);
        }
    }
}

/// A list-set's items are unique: each repeat is a Duplicate value.
fn duplicate_set_items(items: &[Value], path: &FieldPath, causes: &mut Vec<FieldCause>) {
    for (i, item) in items.iter().enumerate() {
        if items[..i].contains(item) {
            causes.push(FieldCause::new(
                FieldErrorType::Duplicate,
                &path.index(i),
                format!("Duplicate value: {}", render_value(item)),
            ));
        }
    }
}
