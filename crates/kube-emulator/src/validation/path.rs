//! Field paths in the apiserver's dotted form (`spec.training.vertex.machineType`, `spec.x[0].y`).

use serde_json::Value;
use std::fmt;

/// One step of a field path: an object key or a list index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path from the object root to a field, rendered like `field.Path` in Go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<Segment>);

impl FieldPath {
    pub fn root() -> Self {
        Self(Vec::new())
    }

    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_string()));
        Self(segments)
    }

    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        Self(segments)
    }

    pub fn parent(&self) -> Self {
        let mut segments = self.0.clone();
        segments.pop();
        Self(segments)
    }

    /// Parses the dotted form back (kube-cel reports its paths that way). Keys containing dots
    /// cannot be told apart from nesting in that form; CRD field names never contain dots.
    pub fn parse(text: &str) -> Self {
        let mut segments = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let (name, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !name.is_empty() {
                segments.push(Segment::Key(name.to_string()));
            }
            while let Some(end) = rest.find(']') {
                let inner = &rest[1..end];
                match inner.parse::<usize>() {
                    Ok(i) => segments.push(Segment::Index(i)),
                    Err(_) => segments.push(Segment::Key(inner.to_string())),
                }
                rest = &rest[end + 1..];
            }
        }
        Self(segments)
    }

    /// The value at this path inside `root`, if present.
    pub fn lookup<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        let mut current = root;
        for segment in &self.0 {
            current = match segment {
                Segment::Key(k) => current.get(k)?,
                Segment::Index(i) => current.get(*i)?,
            };
        }
        Some(current)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for segment in &self.0 {
            match segment {
                Segment::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// Renders a value the way Go's `field.Error` does in messages: strings quoted, numbers and bools
/// bare, `null` for nil, JSON for composite values.
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".to_string(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

/// The OpenAPI type name of a JSON value (what the apiserver prints as the value of CEL errors).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_parses_dotted_paths() {
        let p = FieldPath::root().key("spec").key("x").index(0).key("y");
        assert_eq!(p.to_string(), "spec.x[0].y");
        assert_eq!(FieldPath::parse("spec.x[0].y"), p);
        assert_eq!(FieldPath::root().index(2).to_string(), "[2]");
    }
}
