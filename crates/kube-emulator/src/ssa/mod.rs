//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Every write records which manager set which fields. An apply:
//! - conflicts (409) when it would change a field another manager owns, unless `force=true`, which
//!   takes the field over;
//! - removes fields the same manager applied before and omits now, unless another manager owns them;
//! - merges maps per key, list-maps per item key and sets per value; other lists are replaced.
//!
//! Non-apply writes (create, update, patch) move ownership of the fields they change to their
//! manager. Field sets are scoped like the apiserver's: the main resource of a kind with a status
//! subresource does not own `status`, the status subresource owns only `status`.

use crate::fieldset::{FieldSet, SchemaRef, get_at};
use crate::meta;
use serde_json::{Map, Value, json};

mod apply;

pub use apply::{Conflict, apply, merge_into};

/// Metadata the server owns; never part of a field set.
const SERVER_METADATA: [&str; 11] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Which part of an object a write may touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything (kinds without a status subresource).
    Whole,
    /// Everything but `status`.
    Main,
    /// Only `status`.
    Status,
}

impl Scope {
    pub fn subresource(self) -> Option<&'static str> {
        (self == Scope::Status).then_some("status")
    }
}

/// The part of `obj` a field set of `scope` covers.
pub fn scoped(obj: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    for (k, v) in obj.as_object().into_iter().flatten() {
        let keep = match scope {
            Scope::Status => k == "status",
            Scope::Main => k != "status" && k != "apiVersion" && k != "kind",
            Scope::Whole => k != "apiVersion" && k != "kind",
        };
        if !keep {
            continue;
        }
        if k == "metadata" {
            let mut m = v.as_object().cloned().unwrap_or_default();
            m.retain(|key, _| !SERVER_METADATA.contains(&key.as_str()));
            if !m.is_empty() {
                out.insert(k.clone(), Value::Object(m));
            }
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn parse(v: &Value) -> Option<Entry> {
        Some(Entry {
            manager: v.get("manager")?.as_str()?.to_string(),
            operation: v
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or("Update")
                .to_string(),
            api_version: v
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: v
                .get("time")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            subresource: v
                .get("subresource")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from),
            fields: FieldSet::from_fields_v1(v.get("fieldsV1").unwrap_or(&Value::Null)),
        })
    }

    fn render(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        });
        if let Some(s) = &self.subresource {
            v["subresource"] = json!(s);
        }
        v
    }

    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == subresource
    }
}

fn entries(obj: &Value) -> Vec<Entry> {
    meta::meta(obj)
        .get("managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::parse).collect())
        .unwrap_or_default()
}

fn store_entries(obj: &mut Value, entries: Vec<Entry>) {
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::render)
        .collect();
    let m = meta::meta_mut(obj);
    if rendered.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(rendered));
    }
}

/// The leaf paths of `new` whose value differs from `old`.
fn changed_fields(old: &Value, new: &Value, schema: SchemaRef<'_>) -> FieldSet {
    let new_set = FieldSet::from_value(new, schema);
    let mut changed = FieldSet::default();
    for path in new_set.paths() {
        if get_at(old, &path) != get_at(new, &path) {
            let mut node = &mut changed;
            for element in &path {
                node = node.children.entry(element.clone()).or_default();
            }
            node.owned = true;
        }
    }
    changed
}

/// Records a non-apply write by `manager`: it takes over the fields it changed; removed fields
/// are dropped from every manager. `new` carries the managedFields to start from (the live ones,
/// or the ones the client sent, which the apiserver honours too).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: Scope,
    schema: &Value,
    api_version: &str,
) {
    let schema = SchemaRef(Some(schema));
    let empty = json!({});
    let old_scoped = old.map(|o| scoped(o, scope)).unwrap_or_else(|| empty.clone());
    let new_scoped = scoped(new, scope);
    let changed = changed_fields(&old_scoped, &new_scoped, schema);
    let removed =
        FieldSet::from_value(&old_scoped, schema).subtract(&FieldSet::from_value(&new_scoped, schema));
    let mut list = entries(new);
    let subresource = scope.subresource();
    for e in list.iter_mut() {
        e.fields = e.fields.subtract(&changed).subtract(&removed);
    }
    if !changed.is_empty() {
        let position = list.iter().position(|e| e.is(manager, "Update", subresource));
        let entry = match position {
            Some(i) => &mut list[i],
            None => {
                list.push(Entry {
                    manager: manager.to_string(),
                    operation: "Update".into(),
                    api_version: api_version.to_string(),
                    time: String::new(),
                    subresource: subresource.map(String::from),
                    fields: FieldSet::default(),
                });
                list.last_mut().expect("pushed")
            }
        };
        let before = entry.fields.clone();
        entry.fields.union(&changed);
        if entry.fields != before || entry.time.is_empty() {
            entry.time = meta::now();
            entry.api_version = api_version.to_string();
        }
    }
    store_entries(new, list);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"properties": {
            "metadata": crate::resources::metadata_schema(),
            "status": {"properties": {"conditions": {
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}
            }}}
        }})
    }

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a", "namespace": "d"}, "spec": spec})
    }

    #[test]
    fn reapplying_without_a_field_removes_it() {
        let s = schema();
        let first = apply(
            None,
            &obj(json!({"a": 1, "b": 2})),
            "m",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap();
        let second = apply(
            Some(&first),
            &obj(json!({"a": 1})),
            "m",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(second["spec"], json!({"a": 1}));
    }

    #[test]
    fn conflicts_between_managers_and_force() {
        let s = schema();
        let first = apply(None, &obj(json!({"a": 1})), "one", false, Scope::Main, &s, "g/v1").unwrap();
        let err = apply(
            Some(&first),
            &obj(json!({"a": 2})),
            "two",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap_err();
        assert_eq!(err, vec![("one".to_string(), ".spec.a".to_string())]);
        // Same value: shared ownership, no conflict.
        let shared = apply(
            Some(&first),
            &obj(json!({"a": 1})),
            "two",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(shared["metadata"]["managedFields"].as_array().unwrap().len(), 2);
        let forced = apply(
            Some(&first),
            &obj(json!({"a": 2})),
            "two",
            true,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(forced["spec"]["a"], 2);
        assert_eq!(forced["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn list_map_items_merge_by_key() {
        let s = schema();
        let base = obj(json!({}));
        let status = |c: Value| json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a"}, "status": {"conditions": c}});
        let a = apply(
            Some(&base),
            &status(json!([{"type": "Ready", "status": "False"}])),
            "x",
            false,
            Scope::Status,
            &s,
            "g/v1",
        )
        .unwrap();
        let b = apply(
            Some(&a),
            &status(json!([{"type": "Stalled", "status": "True"}])),
            "y",
            false,
            Scope::Status,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(
            b["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "Stalled", "status": "True"}])
        );
        let c = apply(
            Some(&b),
            &status(json!([{"type": "Ready", "status": "True"}])),
            "x",
            false,
            Scope::Status,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(c["status"]["conditions"][0]["status"], "True");
        // x stops applying Ready: its item goes away, y's stays.
        let d = apply(
            Some(&c),
            &status(json!([])),
            "x",
            false,
            Scope::Status,
            &s,
            "g/v1",
        )
        .unwrap();
        assert_eq!(
            d["status"]["conditions"],
            json!([{"type": "Stalled", "status": "True"}])
        );
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let s = schema();
        let applied = apply(
            None,
            &obj(json!({"a": 1})),
            "applier",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap();
        let mut edited = applied.clone();
        edited["spec"]["a"] = json!(5);
        record_update(Some(&applied), &mut edited, "editor", Scope::Main, &s, "g/v1");
        let managers: Vec<&str> = edited["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["editor"]);
        let err = apply(
            Some(&edited),
            &obj(json!({"a": 1})),
            "applier",
            false,
            Scope::Main,
            &s,
            "g/v1",
        )
        .unwrap_err();
        assert_eq!(err[0].0, "editor");
    }
}
