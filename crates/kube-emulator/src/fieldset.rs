//! Field sets in the `FieldsV1` shape of `metadata.managedFields`, and schema-aware walking of
//! objects: which fields an object sets, with list-maps (`x-kubernetes-list-type: map`) addressed
//! by key, sets by value, and atomic lists and maps as single leaves.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// One step of a field path, as in structured-merge-diff.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// `f:name`
    Field(String),
    /// `k:{"type":"Ready"}`: a list-map item by its key fields (canonical JSON, keys sorted).
    Key(String),
    /// `v:"x"`: a set item by value.
    Value(String),
}

pub type Path = Vec<PathElement>;

/// A set of field paths. `owned` means the path of this node itself is in the set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub owned: bool,
    pub children: BTreeMap<PathElement, FieldSet>,
}

/// How a list merges, from its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// Schema navigation that tolerates missing schema (then maps are granular, lists atomic).
#[derive(Clone, Copy, Debug)]
pub struct SchemaRef<'a>(pub Option<&'a Value>);

impl<'a> SchemaRef<'a> {
    pub fn child(self, key: &str) -> SchemaRef<'a> {
        let Some(s) = self.0 else { return SchemaRef(None) };
        if let Some(p) = s.get("properties").and_then(|p| p.get(key)) {
            return SchemaRef(Some(p));
        }
        SchemaRef(s.get("additionalProperties").filter(|a| a.is_object()))
    }

    pub fn items(self) -> SchemaRef<'a> {
        SchemaRef(self.0.and_then(|s| s.get("items")))
    }

    pub fn list_type(self) -> ListType {
        let Some(s) = self.0 else { return ListType::Atomic };
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => ListType::Map(
                s.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).map(String::from).collect())
                    .unwrap_or_default(),
            ),
            Some("set") => ListType::Set,
            _ => ListType::Atomic,
        }
    }

    pub fn atomic_map(self) -> bool {
        self.0
            .and_then(|s| s.get("x-kubernetes-map-type"))
            .and_then(Value::as_str)
            == Some("atomic")
    }
}

/// The canonical key of a list-map item: a JSON object of its key fields, sorted.
pub fn item_key(item: &Value, keys: &[String]) -> String {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let parts: Vec<String> = sorted
        .iter()
        .map(|k| {
            format!(
                "{}:{}",
                Value::String((*k).clone()),
                item.get(k.as_str()).cloned().unwrap_or(Value::Null)
            )
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

impl FieldSet {
    pub fn leaf() -> Self {
        Self {
            owned: true,
            children: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.owned && self.children.values().all(FieldSet::is_empty)
    }

    /// The set of fields `value` specifies.
    pub fn from_value(value: &Value, schema: SchemaRef<'_>) -> Self {
        match value {
            Value::Object(map) if !map.is_empty() && !schema.atomic_map() => {
                let children = map
                    .iter()
                    .map(|(k, v)| {
                        (
                            PathElement::Field(k.clone()),
                            Self::from_value(v, schema.child(k)),
                        )
                    })
                    .collect();
                Self {
                    owned: false,
                    children,
                }
            }
            Value::Array(items) if !items.is_empty() => match schema.list_type() {
                ListType::Map(keys) => {
                    let item_schema = schema.items();
                    let children = items
                        .iter()
                        .map(|item| {
                            let mut node = Self::from_value(item, item_schema);
                            node.owned = true;
                            (PathElement::Key(item_key(item, &keys)), node)
                        })
                        .collect();
                    Self {
                        owned: false,
                        children,
                    }
                }
                ListType::Set => Self {
                    owned: false,
                    children: items
                        .iter()
                        .map(|i| (PathElement::Value(i.to_string()), Self::leaf()))
                        .collect(),
                },
                ListType::Atomic => Self::leaf(),
            },
            _ => Self::leaf(),
        }
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.owned |= other.owned;
        for (k, v) in &other.children {
            self.children.entry(k.clone()).or_default().union(v);
        }
    }

    /// `self - other`.
    pub fn subtract(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            owned: self.owned && !other.owned,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let rest = match other.children.get(k) {
                Some(o) => v.subtract(o),
                None => v.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(k.clone(), rest);
            }
        }
        out
    }

    pub fn intersect(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            owned: self.owned && other.owned,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let both = v.intersect(o);
                if !both.is_empty() {
                    out.children.insert(k.clone(), both);
                }
            }
        }
        out
    }

    /// Every path in the set.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.owned {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Whether `path` or anything below it is in the set.
    pub fn touches(&self, path: &[PathElement]) -> bool {
        match path.split_first() {
            None => !self.is_empty(),
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.touches(rest)),
        }
    }

    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.owned && !self.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, v) in &self.children {
            let key = match k {
                PathElement::Field(f) => format!("f:{f}"),
                PathElement::Key(k) => format!("k:{k}"),
                PathElement::Value(v) => format!("v:{v}"),
            };
            map.insert(key, v.to_fields_v1());
        }
        Value::Object(map)
    }

    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let Some(map) = value.as_object() else {
            return FieldSet::default();
        };
        if map.is_empty() {
            return FieldSet::leaf();
        }
        let mut out = FieldSet::default();
        for (k, v) in map {
            if k == "." {
                out.owned = true;
                continue;
            }
            let element = if let Some(f) = k.strip_prefix("f:") {
                PathElement::Field(f.to_string())
            } else if let Some(key) = k.strip_prefix("k:") {
                // Re-canonicalise: clients may have written the key fields in any order.
                match serde_json::from_str::<Value>(key) {
                    Ok(Value::Object(fields)) => {
                        let names: Vec<String> = fields.keys().cloned().collect();
                        PathElement::Key(item_key(&Value::Object(fields), &names))
                    }
                    _ => PathElement::Key(key.to_string()),
                }
            } else if let Some(val) = k.strip_prefix("v:") {
                PathElement::Value(val.to_string())
            } else {
                continue;
            };
            out.children.insert(element, FieldSet::from_fields_v1(v));
        }
        out
    }
}

fn key_matches(item: &Value, key: &str) -> bool {
    match serde_json::from_str::<Value>(key) {
        Ok(Value::Object(fields)) => fields
            .iter()
            .all(|(k, v)| item.get(k).unwrap_or(&Value::Null) == v),
        _ => false,
    }
}

/// The value at `path`.
pub fn get_at<'a>(value: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let mut current = value;
    for element in path {
        current = match element {
            PathElement::Field(f) => current.get(f)?,
            PathElement::Key(k) => current.as_array()?.iter().find(|i| key_matches(i, k))?,
            PathElement::Value(v) => {
                let wanted: Value = serde_json::from_str(v).ok()?;
                current.as_array()?.iter().find(|i| **i == wanted)?
            }
        };
    }
    Some(current)
}

/// Removes the field, list-map item or set item at `path`, if present.
pub fn remove_at(value: &mut Value, path: &[PathElement]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut current = value;
    for element in parent_path {
        let next = match element {
            PathElement::Field(f) => current.get_mut(f),
            PathElement::Key(k) => current
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| key_matches(i, k))),
            PathElement::Value(v) => {
                let wanted: Value = serde_json::from_str(v).unwrap_or(Value::Null);
                current
                    .as_array_mut()
                    .and_then(|a| a.iter_mut().find(|i| **i == wanted))
            }
        };
        match next {
            Some(n) => current = n,
            None => return,
        }
    }
    match last {
        PathElement::Field(f) => {
            if let Some(m) = current.as_object_mut() {
                m.remove(f);
            }
        }
        PathElement::Key(k) => {
            if let Some(a) = current.as_array_mut() {
                a.retain(|i| !key_matches(i, k));
            }
        }
        PathElement::Value(v) => {
            let wanted: Value = serde_json::from_str(v).unwrap_or(Value::Null);
            if let Some(a) = current.as_array_mut() {
                a.retain(|i| *i != wanted);
            }
        }
    }
}

/// Renders a path like structured-merge-diff does in conflict messages:
/// `.spec.replicas`, `.status.conditions[type="Ready"].status`.
pub fn path_string(path: &[PathElement]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            PathElement::Key(k) => {
                let fields: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_default();
                out.push_str(&format!("[{}]", fields.join(",")));
            }
            PathElement::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"properties": {"status": {"properties": {"conditions": {
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}
        }}}, "metadata": {"properties": {"finalizers": {"x-kubernetes-list-type": "set"}}}}})
    }

    #[test]
    fn fields_v1_round_trip_with_list_map_keys() {
        let s = schema();
        let obj = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"x": 1, "list": [1, 2], "empty": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        let set = FieldSet::from_value(&obj, SchemaRef(Some(&s)));
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({
                "f:metadata": {"f:finalizers": {"v:\"a\"": {}}},
                "f:spec": {"f:empty": {}, "f:list": {}, "f:x": {}},
                "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
        let ready = &set.paths()[4];
        assert_eq!(path_string(ready), ".status.conditions[type=\"Ready\"]");
        assert_eq!(
            get_at(&obj, ready),
            Some(&json!({"type": "Ready", "status": "True"}))
        );
    }

    #[test]
    fn subtract_and_remove() {
        let s = schema();
        let a = FieldSet::from_value(&json!({"spec": {"x": 1, "y": 2}}), SchemaRef(Some(&s)));
        let b = FieldSet::from_value(&json!({"spec": {"x": 1}}), SchemaRef(Some(&s)));
        let rest = a.subtract(&b);
        assert_eq!(
            rest.paths(),
            vec![vec![
                PathElement::Field("spec".into()),
                PathElement::Field("y".into())
            ]]
        );
        let mut obj = json!({"spec": {"x": 1, "y": 2}});
        remove_at(&mut obj, &rest.paths()[0]);
        assert_eq!(obj, json!({"spec": {"x": 1}}));
    }
}
