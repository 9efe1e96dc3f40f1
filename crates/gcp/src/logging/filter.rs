//! Cloud Logging queries, built from typed terms and never concatenated from user text.
//!
//! The syntax is the Logging query language
//! (<https://cloud.google.com/logging/docs/view/logging-query-language>): comparisons
//! `FIELD OP VALUE` joined by `AND`; string values in double quotes with `\` and `"` escaped;
//! a path segment that is not a plain identifier (label keys such as `tpu-operator-node`) in
//! double quotes (`labels."compute.googleapis.com/resource_name"` in that page's examples).

use chrono::{DateTime, SecondsFormat, Utc};

/// One comparison of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    field: String,
    op: &'static str,
    value: String,
}

/// A conjunction of comparisons: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFilter {
    terms: Vec<Term>,
}

impl LogFilter {
    /// `field = "value"`. `field` is a path of segments, each quoted when it needs to be.
    pub fn eq(mut self, field: &[&str], value: &str) -> Self {
        self.terms.push(Term {
            field: path(field),
            op: "=",
            value: quote(value),
        });
        self
    }

    /// `timestamp >= "<RFC 3339>"`.
    pub fn since(mut self, time: DateTime<Utc>) -> Self {
        self.terms.push(Term {
            field: "timestamp".into(),
            op: ">=",
            value: quote(&time.to_rfc3339_opts(SecondsFormat::Nanos, true)),
        });
        self
    }

    /// The query, one comparison per line (the Logs Explorer shows it that way; a newline
    /// between comparisons is an implicit `AND`, written out here).
    pub fn render(&self) -> String {
        self.terms
            .iter()
            .map(|t| format!("{} {} {}", t.field, t.op, t.value))
            .collect::<Vec<_>>()
            .join("\nAND ")
    }
}

impl std::fmt::Display for LogFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// A field path: plain identifiers as they are, anything else quoted.
fn path(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|s| {
            let plain = !s.is_empty()
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !s.starts_with(|c: char| c.is_ascii_digit());
            if plain { s.to_string() } else { quote(s) }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A string literal: double quotes, with backslash and double quote escaped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_joined_with_and_and_label_keys_are_quoted() {
        let f = LogFilter::default().eq(&["resource", "type"], "ml_job").eq(
            &["jsonPayload", "container", "metadata", "tpu-operator-node"],
            "n-1",
        );
        assert_eq!(
            f.render(),
            "resource.type = \"ml_job\"\nAND jsonPayload.container.metadata.\"tpu-operator-node\" = \"n-1\""
        );
    }

    /// A value cannot close its quotes and add a clause of its own: whatever a name holds, the
    /// query keeps one comparison per term.
    #[test]
    fn a_value_cannot_escape_its_quotes() {
        let hostile = r#"x" OR resource.type="gce_instance"#;
        let f = LogFilter::default().eq(&["resource", "labels", "job_id"], hostile);
        assert_eq!(
            f.render(),
            r#"resource.labels.job_id = "x\" OR resource.type=\"gce_instance""#
        );
        let f = LogFilter::default().eq(&["labels", "a\"b"], "\\");
        assert_eq!(f.render(), r#"labels."a\"b" = "\\""#);
    }

    #[test]
    fn time_bounds_are_rfc3339_utc() {
        let t = DateTime::parse_from_rfc3339("2026-11-26T05:00:00.5Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            LogFilter::default().since(t).render(),
            "timestamp >= \"2026-11-26T05:00:00.500000000Z\""
        );
    }
}
