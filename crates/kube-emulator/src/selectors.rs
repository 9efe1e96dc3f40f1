//! Label selectors (equality- and set-based) and field selectors.

use crate::errors::{ApiError, ApiResult};
use crate::meta;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_set(key: &str, rest: &str, original: &str) -> ApiResult<(String, Vec<String>)> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: {original:?}: expected a (...) value list"
            ))
        })?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.trim().to_string(), values))
}

impl LabelSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for term in split_terms(text) {
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                let (k, v) = parse_set(k, rest, term)?;
                Requirement::NotIn(k, v)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                let (k, v) = parse_set(k, rest, term)?;
                Requirement::In(k, v)
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(term.to_string())
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {term:?}"
                )));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = meta::labels(obj);
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `path=value`, `path==value`, `path!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Field labels each kind supports (besides `metadata.name` / `metadata.namespace`).
fn supported(kind: &str, field: &str) -> bool {
    if field == "metadata.name" || field == "metadata.namespace" {
        return true;
    }
    match kind {
        "Event" => matches!(
            field,
            "involvedObject.kind"
                | "involvedObject.namespace"
                | "involvedObject.name"
                | "involvedObject.uid"
                | "involvedObject.apiVersion"
                | "involvedObject.resourceVersion"
                | "involvedObject.fieldPath"
                | "reason"
                | "reportingComponent"
                | "source"
                | "type"
        ),
        "Secret" => field == "type",
        "Namespace" => field == "status.phase",
        _ => false,
    }
}

impl FieldSelector {
    pub fn parse(text: &str, kind: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for term in split_terms(text) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !supported(kind, field) {
                return Err(ApiError::bad_request(format!(
                    "\"{field}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let mut current = obj;
            for part in field.split('.') {
                current = current.get(part).unwrap_or(&Value::Null);
            }
            let actual = match current {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_equality_and_sets() {
        let obj = json!({"metadata": {"labels": {"app": "a", "tier": "web"}}});
        for (sel, expected) in [
            ("app=a", true),
            ("app==a,tier!=db", true),
            ("app in (a, b),tier notin (db)", true),
            ("app notin (a)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing,app", true),
            ("missing in (x)", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&obj),
                expected,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selectors_on_name_and_unknown_fields() {
        let obj = json!({"metadata": {"name": "x", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=x", "Widget")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=ns", "Widget")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(FieldSelector::parse("spec.x=1", "Widget").unwrap_err().code, 400);
    }
}
