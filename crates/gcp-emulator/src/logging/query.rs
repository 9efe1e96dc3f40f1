//! The part of the Logging query language
//! (<https://cloud.google.com/logging/docs/view/logging-query-language>) the emulator evaluates:
//! comparisons (`= != < <= > >=`, `:` as has) on `logName`, `resource.type`,
//! `resource.labels.*`, `labels.*`, `severity` (ordered by level), `timestamp`,
//! `receiveTimestamp`, `insertId`, `textPayload` and `jsonPayload.*`, with quoted path segments,
//! `AND`, `OR`, `NOT` and parentheses (one grammar with AIP-160: [`crate::filter`]). Global
//! restrictions (a bare value), functions and regular expressions are refused as unsupported.

use super::store::{Entry, SEVERITIES};
use crate::errors::ApiResult;
use crate::filter::{self, Expr};

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
    severity_values(&mut e);
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

fn severity_values(e: &mut Expr) {
    match e {
        Expr::And(v) | Expr::Or(v) => v.iter_mut().for_each(severity_values),
        Expr::Not(x) => severity_values(x),
        Expr::Cmp { field, value, .. } if field == "severity" => {
            if let Some((_, n)) = SEVERITIES
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(value))
            {
                *value = severity_key(*n);
            }
        }
        Expr::Cmp { .. } => {}
    }
}
