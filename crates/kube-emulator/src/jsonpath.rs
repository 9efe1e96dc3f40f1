//! The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`, and filters
//! `.a[?(@.type=="Ready")].status` (with `==` or `!=`).

use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter {
        field: Vec<String>,
        equal: bool,
        value: String,
    },
}

fn parse(path: &str) -> Vec<Step> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end > 0 {
                steps.push(Step::Field(r[..end].to_string()));
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else { break };
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Ok(i) = inner.parse::<usize>() {
                steps.push(Step::Index(i));
            } else if let Some(expr) = inner.strip_prefix("?(").and_then(|e| e.strip_suffix(')')) {
                let (lhs, equal, rhs) = match expr.split_once("!=") {
                    Some((l, r)) => (l, false, r),
                    None => match expr.split_once("==") {
                        Some((l, r)) => (l, true, r),
                        None => continue,
                    },
                };
                let field = lhs
                    .trim()
                    .trim_start_matches('@')
                    .split('.')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let value = rhs.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
                steps.push(Step::Filter { field, equal, value });
            } else {
                let key = inner.trim_matches(|c| c == '"' || c == '\'');
                steps.push(Step::Field(key.to_string()));
            }
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            steps.push(Step::Field(rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    steps
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// All values the path selects.
pub fn select<'a>(root: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in parse(path) {
        let mut next = Vec::new();
        for v in current {
            match &step {
                Step::Field(f) => next.extend(v.get(f)),
                Step::Index(i) => next.extend(v.get(*i)),
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter { field, equal, value } => {
                    for item in v.as_array().into_iter().flatten() {
                        let mut target = Some(item);
                        for f in field {
                            target = target.and_then(|t| t.get(f));
                        }
                        let matches = target.is_some_and(|t| scalar_text(t) == *value);
                        if matches == *equal {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selects_fields_indexes_and_filters() {
        let obj = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Stalled", "status": "False"}]},
                         "spec": {"items": [{"n": 1}, {"n": 2}]}});
        assert_eq!(
            select(&obj, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(select(&obj, ".spec.items[1].n"), vec![&json!(2)]);
        assert_eq!(select(&obj, ".spec.items[*].n").len(), 2);
        assert!(select(&obj, ".spec.missing").is_empty());
    }
}
