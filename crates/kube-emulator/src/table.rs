//! `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`: the server-side printing kubectl uses,
//! with CRD printer columns or the built-in kinds' columns.

use crate::jsonpath;
use crate::meta;
use crate::resources::{BuiltinTable, PrinterColumn, ResourceType};
use serde_json::{Value, json};

/// What a Table row's `object` holds (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

fn column(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn builtin_columns(kind: BuiltinTable) -> Vec<Value> {
    let name = column("Name", "string", "name", NAME_DESCRIPTION, 0);
    let age = column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    );
    match kind {
        BuiltinTable::Namespace => vec![
            name,
            column("Status", "string", "", "The status of the namespace", 0),
            age,
        ],
        BuiltinTable::ConfigMap => vec![
            name,
            column("Data", "string", "", "Data contains the configuration data.", 0),
            age,
        ],
        BuiltinTable::Secret => vec![
            name,
            column(
                "Type",
                "string",
                "",
                "Used to facilitate programmatic handling of secret data.",
                0,
            ),
            column("Data", "string", "", "Data contains the secret data.", 0),
            age,
        ],
        BuiltinTable::Event => event_columns(),
        BuiltinTable::Lease => vec![
            name,
            column("Holder", "string", "", "The holder of the lease", 0),
            age,
        ],
        BuiltinTable::Crd => vec![name, column("Created At", "date", "", "", 0)],
        BuiltinTable::None => vec![name, age],
    }
}

/// An Event's columns: when last seen, type, reason, object and message; its name only at
/// priority 1 (wide output), and no age.
fn event_columns() -> Vec<Value> {
    vec![
        column("Last Seen", "string", "", "Time when this Event was last seen", 0),
        column(
            "Type",
            "string",
            "",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            0,
        ),
        column(
            "Reason",
            "string",
            "",
            "This should be a short, machine understandable string that gives the reason for this event being generated.",
            0,
        ),
        column("Object", "string", "", "The object this Event is about.", 0),
        column(
            "Message",
            "string",
            "",
            "A human-readable description of the status of this operation.",
            0,
        ),
        column("Name", "string", "name", NAME_DESCRIPTION, 1),
    ]
}

fn age(obj: &Value) -> String {
    meta::meta_str(obj, "creationTimestamp")
        .and_then(meta::age_seconds)
        .map(meta::human_duration)
        .unwrap_or_else(|| "<unknown>".into())
}

fn data_count(obj: &Value) -> usize {
    let count = |k: &str| obj.get(k).and_then(Value::as_object).map_or(0, |m| m.len());
    count("data") + count("binaryData")
}

fn builtin_cells(kind: BuiltinTable, obj: &Value) -> Vec<Value> {
    let name = json!(meta::name(obj));
    let s = |p: &str| json!(obj.pointer(p).and_then(Value::as_str).unwrap_or_default());
    match kind {
        BuiltinTable::Namespace => vec![name, s("/status/phase"), json!(age(obj))],
        BuiltinTable::ConfigMap => vec![name, json!(data_count(obj)), json!(age(obj))],
        BuiltinTable::Secret => vec![name, s("/type"), json!(data_count(obj)), json!(age(obj))],
        BuiltinTable::Event => {
            let last = ["/lastTimestamp", "/eventTime", "/metadata/creationTimestamp"]
                .iter()
                .find_map(|p| obj.pointer(p).and_then(Value::as_str))
                .and_then(meta::age_seconds)
                .map(meta::human_duration)
                .unwrap_or_else(|| "<unknown>".into());
            let object = format!(
                "{}/{}",
                obj.pointer("/involvedObject/kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_lowercase(),
                obj.pointer("/involvedObject/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            vec![
                json!(last),
                s("/type"),
                s("/reason"),
                json!(object),
                s("/message"),
                name,
            ]
        }
        BuiltinTable::Lease => vec![name, s("/spec/holderIdentity"), json!(age(obj))],
        BuiltinTable::Crd => vec![name, s("/metadata/creationTimestamp")],
        BuiltinTable::None => vec![name, json!(age(obj))],
    }
}

/// The cell of a CRD printer column, typed like the apiserver's table convertor does.
fn custom_cell(col: &PrinterColumn, obj: &Value) -> Value {
    let Some(value) = jsonpath::select(obj, &col.json_path).into_iter().next() else {
        return Value::Null;
    };
    match col.type_.as_str() {
        "integer" => value.as_i64().map(Value::from).unwrap_or(Value::Null),
        "number" => value.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => value.as_bool().map(Value::from).unwrap_or(Value::Null),
        "date" => value
            .as_str()
            .and_then(meta::age_seconds)
            .map(|s| json!(meta::human_duration(s)))
            .unwrap_or(Value::Null),
        _ => match value {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

fn columns(rt: &ResourceType) -> Vec<Value> {
    if rt.custom {
        let mut cols = vec![column("Name", "string", "name", NAME_DESCRIPTION, 0)];
        cols.extend(rt.printer_columns.iter().map(|c| {
            // Dates are rendered as ages, so their cells are strings.
            let type_ = if c.type_ == "date" {
                "date"
            } else {
                c.type_.as_str()
            };
            column(&c.name, type_, &c.format, &c.description, c.priority)
        }));
        cols
    } else {
        builtin_columns(rt.builtin_table)
    }
}

fn row(rt: &ResourceType, obj: &Value, include: IncludeObject) -> Value {
    let cells = if rt.custom {
        let mut cells = vec![json!(meta::name(obj))];
        cells.extend(rt.printer_columns.iter().map(|c| custom_cell(c, obj)));
        cells
    } else {
        builtin_cells(rt.builtin_table, obj)
    };
    let mut row = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial_metadata(obj),
        IncludeObject::Object => row["object"] = obj.clone(),
    }
    row
}

/// `meta.k8s.io/v1 PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta::meta(obj)})
}

/// A Table of `objects`; `headers` false leaves out the column definitions (watch events after
/// the first).
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    resource_version: &str,
    include: IncludeObject,
    headers: bool,
) -> Value {
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": if headers { Value::Array(columns(rt)) } else { json!([]) },
        "rows": objects.iter().map(|o| row(rt, o, include)).collect::<Vec<_>>(),
    });
    if !headers {
        t.as_object_mut().expect("object").remove("columnDefinitions");
    }
    t
}
