//! Structural comparison of two normalised JSON documents, reporting each differing leaf by its
//! path (`metadata.labels.app`, `items[2].data`), so a difference list reads like a review comment.

use serde_json::Value;

/// One place where the emulator's answer differs from the real server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Dotted path inside the compared document; empty for the document root.
    pub path: String,
    /// The emulator's value (`<absent>` when it has none).
    pub emulator: String,
    /// The real server's value (`<absent>` when it has none).
    pub real: String,
}

const ABSENT: &str = "<absent>";

/// Every leaf-level difference between `emulator` and `real`.
pub fn diff(emulator: &Value, real: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", Some(emulator), Some(real), &mut out);
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn render(v: Option<&Value>) -> String {
    match v {
        None => ABSENT.to_owned(),
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => {
            let s = other.to_string();
            if s.len() > 300 {
                format!("{}…", &s[..s.floor_char_boundary(300)])
            } else {
                s
            }
        }
    }
}

fn walk(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Difference>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                walk(&join(path, k), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}[{i}]"), Some(p), Some(q), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference {
            path: path.to_owned(),
            emulator: render(a),
            real: render(b),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reports_each_differing_leaf_by_path() {
        let emulator = json!({"metadata": {"labels": {"a": "1"}}, "items": [1, 2], "code": 409});
        let real = json!({"metadata": {"labels": {"a": "2", "b": "x"}}, "items": [1, 3], "code": 409});
        let d = diff(&emulator, &real);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["items[1]", "metadata.labels.a", "metadata.labels.b"]);
        assert_eq!(d[2].emulator, "<absent>");
        assert_eq!(d[2].real, "\"x\"");
    }

    #[test]
    fn arrays_of_different_length_are_one_difference() {
        let d = diff(&json!({"items": [1]}), &json!({"items": [1, 2]}));
        assert_eq!(
            d,
            vec![Difference {
                path: "items".into(),
                emulator: "[1]".into(),
                real: "[1,2]".into()
            }]
        );
        assert!(diff(&json!({"x": [1, {"y": null}]}), &json!({"x": [1, {"y": null}]})).is_empty());
    }
}
