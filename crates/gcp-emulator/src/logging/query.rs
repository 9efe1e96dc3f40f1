//! The part of the Logging query language
//! (<https://cloud.google.com/logging/docs/view/logging-query-language>) the emulator evaluates:
//! comparisons (`= != < <= > >=`, `:` as has) on `logName`, `resource.type`,
//! `resource.labels.*`, `labels.*`, `severity` (ordered by level), `timestamp`,
//! `receiveTimestamp`, `insertId`, `textPayload` and `jsonPayload.*`, with quoted path segments,
//! `AND`, `OR`, `NOT` and parentheses (one grammar with AIP-160: [`crate::filter`]). Global
//! restrictions (a bare value), functions and regular expressions are refused as unsupported.

use super::store::{Entry, SEVERITIES};
use crate::errors::{ApiError, ApiResult};
use crate::filter::{self, Expr};
use crate::wire::time::ts;

const FIELDS: &[&str] = &[
    "logName",
    "resource.type",
    "resource.labels.",
    "labels",
    "severity",
    "timestamp",
    "receiveTimestamp",
    "insertId",
    "textPayload",
    "jsonPayload.",
];

/// A parsed filter; the empty filter matches every entry.
pub struct Query(Option<Expr>);

pub fn parse(text: &str) -> ApiResult<Query> {
    if text.trim().is_empty() {
        return Ok(Query(None));
    }
    let mut e = filter::parse(text, FIELDS)?;
    normalize(&mut e, text)?;
    Ok(Query(Some(e)))
}

impl Query {
    pub fn matches(&self, entry: &Entry) -> bool {
        self.0
            .as_ref()
            .is_none_or(|e| filter::eval(e, &|f| entry.field(f)))
    }
}

/// Severities compare by level: both sides become zero-padded level numbers.
pub fn severity_key(n: i32) -> String {
    format!("{n:04}")
}

/// Values that compare by meaning, rewritten so the string comparison of [`filter::eval`] is
/// right: severities as level numbers, times in one RFC 3339 form. Clients write times in more
/// than one form: Google's Python client sends `2026-11-25T05:36:17.088287+0000` (no colon in
/// the offset; tests/golden/logging/python-client.json).
fn normalize(e: &mut Expr, text: &str) -> ApiResult<()> {
    match e {
        Expr::And(v) | Expr::Or(v) => v.iter_mut().try_for_each(|x| normalize(x, text)),
        Expr::Not(x) => normalize(x, text),
        Expr::Cmp { field, value, .. } if field == "severity" => {
            if let Some((_, n)) = SEVERITIES
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(value))
            {
                *value = severity_key(*n);
            }
            Ok(())
        }
        Expr::Cmp { field, value, .. } if field == "timestamp" || field == "receiveTimestamp" => {
            let parsed = chrono::DateTime::parse_from_rfc3339(value)
                .or_else(|_| chrono::DateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S%.f%z"))
                .map_err(|_| {
                    ApiError::invalid_field(
                        "filter",
                        format!("Invalid filter \"{text}\": {field} {value:?} is not a time"),
                    )
                })?;
            *value = ts(parsed.with_timezone(&chrono::Utc));
            Ok(())
        }
        Expr::Cmp { .. } => Ok(()),
    }
}
