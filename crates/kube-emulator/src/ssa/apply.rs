//! Server-side apply: the applied configuration merged onto the live object, conflicts with
//! other managers' fields (or their takeover when forced), fields the manager stopped applying
//! removed, and the manager's Apply entry recorded.

use super::{Entry, Scope, entries, scoped, store_entries};
use crate::fieldset::{
    FieldSet, ListType, Path, PathElement, SchemaRef, get_at, item_key, path_string, remove_at,
};
use crate::meta;
use serde_json::{Value, json};

/// A field another manager owns that an apply would change: `(manager, path)`.
pub type Conflict = (String, String);

/// Server-side apply of `applied` by `manager` onto `live` (None: the apply creates the object).
/// Returns the merged object with updated managedFields, or the conflicts.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
    schema: &Value,
    api_version: &str,
) -> Result<Value, Vec<Conflict>> {
    let schema_ref = SchemaRef(Some(schema));
    let base = live.cloned().unwrap_or_else(|| json!({}));
    let applied_scoped = strip_nulls(&scoped(applied, scope));
    let new_set = FieldSet::from_value(&applied_scoped, schema_ref);
    let base_scoped = scoped(&base, scope);
    let subresource = scope.subresource();

    let mut list = entries(&base);
    let mine = list.iter().position(|e| e.is(manager, "Apply", subresource));
    let applying = Applying {
        mine,
        subresource,
        new_set: &new_set,
    };
    let conflicts = applying.conflicts(&list, &base_scoped, &applied_scoped);
    if !conflicts.is_empty() && !force {
        return Err(conflicts
            .into_iter()
            .map(|(m, p, _)| (m, path_string(&p)))
            .collect());
    }
    take_over(&mut list, &conflicts);
    let mut object = base;
    applying.drop_unapplied(&mut object, &list);
    merge_into(&mut object, &applied_scoped, schema_ref);
    if live.is_none() {
        copy_applied_identity(&mut object, applied);
    }
    record_apply(&mut list, mine, manager, subresource, api_version, new_set);
    store_entries(&mut object, list);
    Ok(object)
}

/// A field another manager owns whose value an apply changes: manager, path, and the
/// manager's entry in the list.
type Owned = (String, Path, usize);

/// What an apply by one manager compares the other managers' fields with.
struct Applying<'a> {
    /// The applying manager's entry, when it applied before.
    mine: Option<usize>,
    subresource: Option<&'a str>,
    /// The fields the applied configuration sets.
    new_set: &'a FieldSet,
}

impl Applying<'_> {
    /// Conflicts: fields another manager owns (in the same subresource) whose value this apply
    /// changes.
    fn conflicts(&self, list: &[Entry], base_scoped: &Value, applied_scoped: &Value) -> Vec<Owned> {
        let mut conflicts = Vec::new();
        for (i, e) in list.iter().enumerate() {
            if Some(i) == self.mine || e.subresource.as_deref() != self.subresource {
                continue;
            }
            for path in e.fields.intersect(self.new_set).paths() {
                if matches!(path.last(), Some(PathElement::Key(_))) {
                    continue; // list-map items are shared; their fields are compared one by one
                }
                if get_at(base_scoped, &path) != get_at(applied_scoped, &path) {
                    conflicts.push((e.manager.clone(), path, i));
                }
            }
        }
        conflicts
    }

    /// Fields this manager applied before and no longer does: removed unless someone else owns
    /// them.
    fn drop_unapplied(&self, object: &mut Value, list: &[Entry]) {
        let Some(i) = self.mine else { return };
        let dropped = list[i].fields.subtract(self.new_set);
        let mut paths = dropped.paths();
        // Parents first: removing a list item by key must happen before its key fields go.
        paths.sort_by_key(Vec::len);
        for path in paths {
            let owned_elsewhere = list
                .iter()
                .enumerate()
                .any(|(j, e)| j != i && e.fields.touches(&path));
            if !owned_elsewhere && !self.new_set.touches(&path) {
                remove_at(object, &path);
            }
        }
    }
}

/// A forced apply takes the conflicting fields over: their managers no longer own them.
fn take_over(list: &mut [Entry], conflicts: &[Owned]) {
    for (_, path, i) in conflicts {
        let mut taken = FieldSet::default();
        let mut node = &mut taken;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.owned = true;
        list[*i].fields = list[*i].fields.subtract(&taken);
    }
}

/// apiVersion/kind/name/namespace of a created object come from the applied configuration.
fn copy_applied_identity(object: &mut Value, applied: &Value) {
    for k in ["apiVersion", "kind"] {
        if let Some(v) = applied.get(k) {
            object[k] = v.clone();
        }
    }
    let m = meta::meta_mut(object);
    for k in ["name", "namespace", "generateName"] {
        if let Some(v) = applied.get("metadata").and_then(|am| am.get(k)) {
            m.insert(k.into(), v.clone());
        }
    }
}

/// The manager's Apply entry now owns exactly the applied fields; its time and apiVersion
/// change only when its fields (or apiVersion) do.
fn record_apply(
    list: &mut Vec<Entry>,
    mine: Option<usize>,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    new_set: FieldSet,
) {
    let entry = match mine {
        Some(i) => &mut list[i],
        None => {
            list.push(Entry {
                manager: manager.to_string(),
                operation: "Apply".into(),
                api_version: api_version.to_string(),
                time: String::new(),
                subresource: subresource.map(String::from),
                fields: FieldSet::default(),
            });
            list.last_mut().expect("pushed")
        }
    };
    if entry.fields != new_set || entry.time.is_empty() || entry.api_version != api_version {
        entry.fields = new_set;
        entry.time = meta::now();
        entry.api_version = api_version.to_string();
    }
}

/// Applied configurations use `null` to mean "unset"; such fields are neither set nor owned.
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Merges an applied configuration into an object, following the schema's list and map types.
pub fn merge_into(target: &mut Value, applied: &Value, schema: SchemaRef<'_>) {
    match (target.as_object_mut(), applied) {
        (Some(t), Value::Object(a)) if !schema.atomic_map() => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) => merge_into(existing, v, schema.child(k)),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
            return;
        }
        _ => {}
    }
    if let (Some(t), Value::Array(a)) = (target.as_array_mut(), applied) {
        match schema.list_type() {
            ListType::Map(keys) => {
                for item in a {
                    let key = item_key(item, &keys);
                    match t.iter_mut().find(|i| item_key(i, &keys) == key) {
                        Some(existing) => merge_into(existing, item, schema.items()),
                        None => t.push(item.clone()),
                    }
                }
                return;
            }
            ListType::Set => {
                for item in a {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
                return;
            }
            ListType::Atomic => {}
        }
    }
    *target = applied.clone();
}
