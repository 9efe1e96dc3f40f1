//! The lean copy the watch cache keeps of an object too large to keep whole.
//!
//! A tenant decides how large its objects are. The CRDs bound every field, but the bounds add up:
//! a TpuSlice may carry 512 KiB of node metadata and a workload of 64 arguments, 64 command words
//! and 64 environment values of 4 KiB each, about 1.3 MiB of JSON, and only etcd's request limit
//! (1.5 MiB) caps the whole. Kept whole, a few hundred such objects in one namespace would push the
//! operator past its memory limit, and an operator that is OOM-killed stops every namespace.
//!
//! So an object whose compressed JSON is over a budget is kept lean: every string (value or map
//! key) longer than [`LONGEST_KEPT`] bytes is dropped. What the cache's readers compare between
//! passes (names, identifiers, bucket paths, the pipeline claims of `variants`) is never that long;
//! the long strings are scripts, arguments and environment values, which only a pass reads, and a
//! pass reads the whole object from the API server ([`crate::reconcile::driver`]).

use serde_json::Value;

/// The longest string the lean copy keeps: the CRDs' longest identifier-like field (a Cloud Storage
/// URI) is 1,024 bytes. Free-form values (arguments, environment values: 4 KiB; metadata values
/// and startup scripts: 256 KiB) may be longer.
pub const LONGEST_KEPT: usize = 1024;

/// Drops from `value`, at any depth, every string longer than [`LONGEST_KEPT`]: a string value
/// becomes empty, a map entry whose key is that long goes. Returns whether anything was dropped.
pub fn elide(value: &mut Value) -> bool {
    match value {
        Value::String(s) if s.len() > LONGEST_KEPT => {
            s.clear();
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |dropped, item| elide(item) | dropped),
        Value::Object(map) => {
            let before = map.len();
            map.retain(|key, _| key.len() <= LONGEST_KEPT);
            let keys_dropped = map.len() < before;
            map.values_mut()
                .fold(keys_dropped, |dropped, v| elide(v) | dropped)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drops_long_strings_and_long_keys_at_any_depth_and_keeps_the_rest() {
        let long = "x".repeat(LONGEST_KEPT + 1);
        let uri = format!("gs://b/{}", "d".repeat(LONGEST_KEPT - 7));
        let mut v = json!({
            "spec": {
                "metadata": {"short": "v", "big": long, (long.clone()): "k"},
                "workload": {"args": ["--a", long]},
                "artifacts": {"modelDir": uri},
                "count": 3,
            }
        });
        assert!(elide(&mut v));
        assert_eq!(
            v,
            json!({
                "spec": {
                    "metadata": {"short": "v", "big": ""},
                    "workload": {"args": ["--a", ""]},
                    "artifacts": {"modelDir": uri},
                    "count": 3,
                }
            })
        );
    }

    #[test]
    fn an_object_of_short_strings_is_left_alone() {
        let mut v = json!({"a": ["b", {"c": "d"}], "e": null});
        let before = v.clone();
        assert!(!elide(&mut v));
        assert_eq!(v, before);
    }
}
