//! ObjectMeta helpers: field access on JSON objects, timestamps, names.

use rand::Rng;
use regex::Regex;
use serde_json::{Map, Value, json};
use std::sync::LazyLock;

/// What "now" is for every emulator in this process, when not the wall clock.
type ClockFn = Box<dyn Fn() -> chrono::DateTime<chrono::Utc> + Send + Sync>;
static CLOCK: std::sync::OnceLock<ClockFn> = std::sync::OnceLock::new();

/// Makes `clock` the time of every kube-emulator in this process: the timestamps it writes
/// (`creationTimestamp`, `deletionTimestamp`, managed fields) and the ages its tables show. For a
/// process that emulates a cloud on a clock of its own (`tpu-operator local`), so that the
/// times the controllers write into status (from that clock) and the server's own are on one
/// timeline, and a `date` printer column is an age on it. Once per process; a second call is
/// refused (`false`).
pub fn set_process_clock(clock: impl Fn() -> chrono::DateTime<chrono::Utc> + Send + Sync + 'static) -> bool {
    CLOCK.set(Box::new(clock)).is_ok()
}

/// The emulator's current time: [`set_process_clock`]'s clock, or the wall clock.
pub fn current_time() -> chrono::DateTime<chrono::Utc> {
    CLOCK.get().map_or_else(chrono::Utc::now, |clock| clock())
}

pub fn now() -> String {
    current_time().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn meta(obj: &Value) -> &Value {
    static EMPTY: LazyLock<Value> = LazyLock::new(|| json!({}));
    obj.get("metadata").unwrap_or(&EMPTY)
}

/// `metadata` as a mutable map, created when missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("object");
    let m = map.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut().expect("metadata object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or_default()
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or_default()
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or_default()
}

pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj).get("deletionTimestamp").is_some_and(|v| !v.is_null())
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let m = meta_mut(obj);
    if finalizers.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(finalizers));
    }
}

pub fn labels(obj: &Value) -> Map<String, Value> {
    meta(obj)
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `(uid, blockOwnerDeletion)` of each ownerReference.
pub fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_string();
                    let block = r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true);
                    Some((uid, block))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The 5 random characters the apiserver appends to `generateName` (no vowels, no look-alikes).
pub fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").expect("regex")
});
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("regex"));

/// Checks a name like `ValidateObjectMeta` does; returns the field error message.
pub fn validate_name(name: &str, dns_label: bool) -> Option<String> {
    if dns_label {
        if name.len() > 63 {
            return Some(format!(
                "Invalid value: {name:?}: must be no more than 63 characters"
            ));
        }
        if !DNS_LABEL.is_match(name) {
            return Some(format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ));
        }
    } else {
        if name.len() > 253 {
            return Some(format!(
                "Invalid value: {name:?}: must be no more than 253 characters"
            ));
        }
        if !DNS_SUBDOMAIN.is_match(name) {
            return Some(format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ));
        }
    }
    None
}

/// Go's `duration.HumanDuration`, used for AGE cells.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    if s < 60 * 2 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        let rem = s % 60;
        return if rem == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rem}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let rem = minutes % 60;
        return if rem == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rem}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rem = hours % 24;
        return if rem == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{rem}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", hours / 24 / 365)
}

/// Seconds since an RFC 3339 timestamp.
pub fn age_seconds(timestamp: &str) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(timestamp).ok()?;
    Some((current_time() - t.with_timezone(&chrono::Utc)).num_seconds())
}

static QUALIFIED_NAME_PART: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("regex"));
static LABEL_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").expect("regex"));

/// `IsQualifiedName`: `[prefix/]name` as label keys, annotation keys and finalizers use.
fn qualified_name_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if p.len() > 253 || !DNS_SUBDOMAIN.is_match(p) {
            return Some("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !QUALIFIED_NAME_PART.is_match(name) {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    None
}

/// ObjectMeta checks of `ValidateObjectMeta` beyond the name: label keys and values, annotation
/// keys and total size, finalizer names. Returns `(field, message)` pairs.
pub fn validate_object_meta(obj: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (key, value) in labels(obj) {
        if let Some(e) = qualified_name_error(&key) {
            out.push(("metadata.labels".into(), format!("Invalid value: {key:?}: {e}")));
        }
        let v = value.as_str().unwrap_or_default();
        if v.len() > 63 {
            out.push((
                "metadata.labels".into(),
                format!("Invalid value: {v:?}: must be no more than 63 characters"),
            ));
        } else if !LABEL_VALUE.is_match(v) {
            out.push(("metadata.labels".into(), format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")));
        }
    }
    if let Some(annotations) = meta(obj).get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (key, value) in annotations {
            total += key.len() + value.as_str().map_or(0, str::len);
            if let Some(e) = qualified_name_error(&key.to_lowercase()) {
                out.push((
                    "metadata.annotations".into(),
                    format!("Invalid value: {key:?}: {e}"),
                ));
            }
        }
        if total > 256 * 1024 {
            out.push((
                "metadata.annotations".into(),
                format!("Too long: may not be more than {} bytes", 256 * 1024),
            ));
        }
    }
    for (i, f) in finalizers(obj).iter().enumerate() {
        if let Some(e) = qualified_name_error(f) {
            out.push((
                format!("metadata.finalizers[{i}]"),
                format!("Invalid value: {f:?}: {e}"),
            ));
        }
    }
    out
}

/// Standard base64 with padding (Secret `data`, protobuf `bytes` fields).
pub fn base64_encode(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_meta_checks_label_annotation_and_finalizer_names() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "empty": ""},
                                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                                     "finalizers": ["example.dev/cleanup", "kubernetes"]}});
        assert!(validate_object_meta(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"bad key": "v", "k": "not ok!", "long": "x".repeat(64)},
                                      "finalizers": ["Not/Valid Name"]}});
        let errors = validate_object_meta(&bad);
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors.iter().any(
            |(f, m)| f == "metadata.finalizers[0]" && m.starts_with("Invalid value: \"Not/Valid Name\"")
        ));
        assert_eq!(human_duration(59), "59s");
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b"abc"), "YWJj");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
    }
}
