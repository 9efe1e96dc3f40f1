//! Replaces the values two correct API servers legitimately disagree on (uids, timestamps,
//! resourceVersions, generated names) by stable placeholders, so the rest can be compared exactly.
//!
//! Placeholders are numbered by first appearance within one transcript, so relations survive: the
//! same uid in an owner and in its child's `ownerReferences` gets the same `<uid:3>`, and a no-op
//! write that returns the previous resourceVersion keeps `<rv:5>` where a real change gets `<rv:6>`.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value;

/// Stateful normaliser for one server's transcript.
#[derive(Debug)]
pub struct Normalizer {
    uid: Regex,
    time: Regex,
    embedded_time: Regex,
    embedded_version: Regex,
    uids: HashMap<String, usize>,
    versions: HashMap<String, usize>,
    generated: HashMap<String, usize>,
    object_versions: HashMap<String, Vec<String>>,
    uid_names: HashMap<String, String>,
}

impl Default for Normalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Normalizer {
    pub fn new() -> Self {
        Normalizer {
            uid: Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
                .expect("uid pattern is valid"),
            time: Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
                .expect("time pattern is valid"),
            embedded_time: Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
                .expect("embedded time pattern is valid"),
            // `"resourceVersion":"358"` inside a message that quotes an object (escaped or not).
            embedded_version: Regex::new(r#"(resourceVersion\\*"\s*:\s*\\*")(\d+)"#)
                .expect("embedded resourceVersion pattern is valid"),
            uids: HashMap::new(),
            versions: HashMap::new(),
            generated: HashMap::new(),
            object_versions: HashMap::new(),
            uid_names: HashMap::new(),
        }
    }

    /// The placeholder a resourceVersion got (or gets now); used for versions taken from one
    /// response and sent in a later request.
    pub fn version(&mut self, rv: &str) -> String {
        let next = self.versions.len() + 1;
        format!("<rv:{}>", self.versions.entry(rv.to_owned()).or_insert(next))
    }

    /// Normalises a response body or watch event object in place.
    pub fn normalize(&mut self, value: &mut Value) {
        sort_managed_fields(value);
        self.learn_generated_names(value);
        self.number_object_versions(value);
        self.walk(value, None);
    }

    /// An object's resourceVersion becomes `<rv:KEY#N>`: the N-th distinct version seen of that
    /// object. Counting per object keeps a no-op write visible (same N) without letting one extra
    /// write elsewhere (the real CRD's asynchronous status update) renumber everything after it.
    fn number_object_versions(&mut self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(meta)) = map.get("metadata") {
                    self.name_uid(meta);
                }
                if let Some(Value::Object(meta)) = map.get_mut("metadata")
                    && let Some(Value::String(rv)) = meta.get("resourceVersion")
                    && !rv.starts_with('<')
                {
                    let key = match (meta.get("uid"), meta.get("name")) {
                        (Some(Value::String(uid)), _) => uid.clone(),
                        (_, Some(Value::String(name))) => name.clone(),
                        _ => String::new(),
                    };
                    if !key.is_empty() {
                        let token = self.object_version(&key, &rv.clone());
                        meta.insert("resourceVersion".into(), Value::String(token));
                    }
                }
                map.values_mut().for_each(|v| self.number_object_versions(v));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.number_object_versions(v)),
            _ => {}
        }
    }

    /// A uid is named after its object (`<uid:Widget/w1>`), not numbered by first appearance, so an
    /// object one server created and the other rejected does not shift every later uid.
    fn name_uid(&mut self, meta: &serde_json::Map<String, Value>) {
        if let (Some(Value::String(uid)), Some(Value::String(name))) = (meta.get("uid"), meta.get("name"))
            && !self.uid_names.contains_key(uid)
        {
            let name = match self.generated.get(name) {
                Some(g) => format!("<generated:{g}>"),
                None => name.clone(),
            };
            self.uid_names.insert(uid.clone(), name);
        }
    }

    fn object_version(&mut self, key: &str, rv: &str) -> String {
        let seen = self.object_versions.entry(key.to_owned()).or_default();
        let n = match seen.iter().position(|v| v == rv) {
            Some(i) => i + 1,
            None => {
                seen.push(rv.to_owned());
                seen.len()
            }
        };
        // A uid key is normalised by the walk that follows; a generated name is replaced here.
        match self.generated.get(key) {
            Some(g) => format!("<rv:<generated:{g}>#{n}>"),
            None => format!("<rv:{key}#{n}>"),
        }
    }

    /// Names made from `generateName` carry a random suffix; remember them so every later mention
    /// (a GET by that name, a list) maps to the same placeholder.
    fn learn_generated_names(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                if let Some(meta) = map.get("metadata") {
                    let prefix = meta.get("generateName").and_then(Value::as_str);
                    let name = meta.get("name").and_then(Value::as_str);
                    if let (Some(prefix), Some(name)) = (prefix, name)
                        && name.starts_with(prefix)
                        && name.len() > prefix.len()
                    {
                        let next = self.generated.len() + 1;
                        self.generated.entry(name.to_owned()).or_insert(next);
                    }
                }
                map.values().for_each(|v| self.learn_generated_names(v));
            }
            Value::Array(items) => items.iter().for_each(|v| self.learn_generated_names(v)),
            _ => {}
        }
    }

    fn walk(&mut self, value: &mut Value, key: Option<&str>) {
        match value {
            Value::Object(map) => {
                // Keys can hold uids too: managedFields list-map keys such as `k:{"uid":"..."}`.
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.walk(&mut v, Some(k.as_str()));
                    let k = if self.uid.is_match(&k) {
                        self.replace_uids(&k)
                    } else {
                        k
                    };
                    map.insert(k, v);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.walk(v, key)),
            Value::String(s) => {
                if let Some(replacement) = self.replace_string(s, key) {
                    *s = replacement;
                }
            }
            _ => {}
        }
    }

    fn replace_string(&mut self, s: &str, key: Option<&str>) -> Option<String> {
        if key == Some("resourceVersion") && !s.starts_with("<rv:") {
            return Some(self.version(s));
        }
        if self.time.is_match(s) {
            return Some("<time>".to_owned());
        }
        if let Some(n) = self.generated.get(s) {
            return Some(format!("<generated:{n}>"));
        }
        // Messages may embed uids ("UID in precondition: ...") or a whole object (an Invalid patch
        // result quotes the patched object with its resourceVersion and timestamps).
        let mut out = std::borrow::Cow::Borrowed(s);
        if self.uid.is_match(&out) {
            out = std::borrow::Cow::Owned(self.replace_uids(&out));
        }
        if self.embedded_time.is_match(&out) {
            out = std::borrow::Cow::Owned(self.embedded_time.replace_all(&out, "<time>").into_owned());
        }
        if self.embedded_version.is_match(&out) {
            out = std::borrow::Cow::Owned(self.embedded_version.replace_all(&out, "${1}<rv>").into_owned());
        }
        match out {
            std::borrow::Cow::Owned(out) => Some(out),
            std::borrow::Cow::Borrowed(_) => None,
        }
    }

    fn replace_uids(&mut self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut last = 0;
        for m in self.uid.find_iter(s) {
            out.push_str(&s[last..m.start()]);
            match self.uid_names.get(m.as_str()) {
                Some(name) => out.push_str(&format!("<uid:{name}>")),
                None => {
                    let next = self.uids.len() + 1;
                    let n = *self.uids.entry(m.as_str().to_owned()).or_insert(next);
                    out.push_str(&format!("<uid:{n}>"));
                }
            }
            last = m.end();
        }
        out.push_str(&s[last..]);
        out
    }
}

/// The order of `managedFields` entries carries no meaning (clients look entries up by manager,
/// operation and subresource), and the two servers order them differently; compare them sorted.
fn sort_managed_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(entries)) = map.get_mut("managedFields") {
                let key = |e: &Value| {
                    ["manager", "operation", "subresource"]
                        .map(|k| e[k].as_str().unwrap_or_default().to_owned())
                };
                entries.sort_by_key(key);
            }
            map.values_mut().for_each(sort_managed_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(sort_managed_fields),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_relations_between_uids_and_versions() {
        let mut n = Normalizer::new();
        let mut owner = json!({"metadata": {"uid": "0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11",
            "resourceVersion": "812", "creationTimestamp": "2026-11-22T05:01:02Z"}});
        let mut child = json!({"metadata": {"name": "child", "resourceVersion": "812",
            "ownerReferences": [{"uid": "0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11"}],
            "managedFields": [{"time": "2026-11-22T05:01:02.123456Z"}]}});
        n.normalize(&mut owner);
        n.normalize(&mut child);
        assert_eq!(
            owner,
            json!({"metadata": {"uid": "<uid:1>", "resourceVersion": "<rv:<uid:1>#1>", "creationTimestamp": "<time>"}})
        );
        assert_eq!(child["metadata"]["ownerReferences"][0]["uid"], "<uid:1>");
        assert_eq!(child["metadata"]["resourceVersion"], "<rv:child#1>");
        assert_eq!(child["metadata"]["managedFields"][0]["time"], "<time>");
        let mut owner_again =
            json!({"metadata": {"uid": "0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11", "resourceVersion": "815"}});
        n.normalize(&mut owner_again);
        assert_eq!(owner_again["metadata"]["resourceVersion"], "<rv:<uid:1>#2>");
        assert_eq!(n.version("900"), "<rv:1>");
    }

    #[test]
    fn generated_names_and_embedded_uids_become_placeholders() {
        let mut n = Normalizer::new();
        let mut created = json!({"metadata": {"generateName": "cm-", "name": "cm-x7k2p"}});
        n.normalize(&mut created);
        assert_eq!(created["metadata"]["name"], "<generated:1>");
        let mut msg = json!({"message": "UID in precondition: 0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11, x",
            "details": {"name": "cm-x7k2p"}});
        n.normalize(&mut msg);
        assert_eq!(msg["message"], "UID in precondition: <uid:1>, x");
        assert_eq!(msg["details"]["name"], "<generated:1>");
    }

    #[test]
    fn uids_in_keys_and_objects_quoted_in_messages_are_normalised() {
        let mut n = Normalizer::new();
        let mut v = json!({
            "fieldsV1": {"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11\"}": {}}}},
            "message": "Invalid value: \"{\\\"resourceVersion\\\":\\\"358\\\",\\\"creationTimestamp\\\":\\\"2026-11-22T06:20:17Z\\\"}\""
        });
        n.normalize(&mut v);
        let keys: Vec<&String> = v["fieldsV1"]["f:metadata"]["f:ownerReferences"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["k:{\"uid\":\"<uid:1>\"}"]);
        let message = v["message"].as_str().unwrap();
        assert!(message.contains("resourceVersion\\\":\\\"<rv>"), "{message}");
        assert!(
            message.contains("<time>") && !message.contains("2026"),
            "{message}"
        );
    }

    #[test]
    fn uids_are_named_after_their_object() {
        let mut n = Normalizer::new();
        let mut owner = json!({"metadata": {"name": "owner", "uid": "0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11"}});
        let mut child =
            json!({"metadata": {"ownerReferences": [{"uid": "0b0e8f4c-1d1e-4c3a-9d55-0c8b1f0b2a11"}]}});
        n.normalize(&mut owner);
        n.normalize(&mut child);
        assert_eq!(owner["metadata"]["uid"], "<uid:owner>");
        assert_eq!(child["metadata"]["ownerReferences"][0]["uid"], "<uid:owner>");
    }

    #[test]
    fn managed_fields_are_compared_sorted_by_manager() {
        let mut n = Normalizer::new();
        let mut v = json!({"metadata": {"managedFields": [
            {"manager": "bob", "operation": "Apply"},
            {"manager": "alice", "operation": "Update"},
            {"manager": "alice", "operation": "Apply", "subresource": "status"}]}});
        n.normalize(&mut v);
        let order: Vec<(&str, &str)> = v["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap()))
            .collect();
        assert_eq!(order, [("alice", "Apply"), ("alice", "Update"), ("bob", "Apply")]);
    }

    #[test]
    fn ordinary_strings_are_left_alone() {
        let mut n = Normalizer::new();
        let mut v = json!({"data": {"when": "tomorrow", "n": "12"}, "kind": "ConfigMap"});
        let before = v.clone();
        n.normalize(&mut v);
        assert_eq!(v, before);
    }
}
