//! The emulated log: entries in the order they were written, bounded.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::query::Query;
use crate::errors::{ApiError, ApiResult};
use crate::wire::time::{parse_ts, ts};

/// Oldest entries are dropped past this many (a long scale run writes many lines).
const MAX_ENTRIES: usize = 100_000;

/// `google.logging.type.LogSeverity`: name and number
/// (`google/logging/type/log_severity.proto`).
pub const SEVERITIES: [(&str, i32); 9] = [
    ("DEFAULT", 0),
    ("DEBUG", 100),
    ("INFO", 200),
    ("NOTICE", 300),
    ("WARNING", 400),
    ("ERROR", 500),
    ("CRITICAL", 600),
    ("ALERT", 700),
    ("EMERGENCY", 800),
];

/// A severity's number from its name or number.
pub fn severity_number(v: &Value) -> Option<i32> {
    match v {
        Value::Null => Some(0),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| SEVERITIES.iter().find(|(_, s)| i64::from(*s) == n))
            .map(|(_, s)| *s),
        Value::String(s) => SEVERITIES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|(_, n)| *n),
        _ => None,
    }
}

fn severity_name(n: i32) -> &'static str {
    SEVERITIES
        .iter()
        .find(|(_, s)| *s == n)
        .map_or("DEFAULT", |(name, _)| name)
}

#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    Text(String),
    Json(Value),
}

/// An entry before it is stored.
#[derive(Clone, Debug)]
pub struct NewEntry {
    /// `projects/{project}/logs/{id}` as written.
    pub log_name: String,
    pub resource_type: String,
    pub resource_labels: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub severity: i32,
    pub payload: Payload,
    /// Defaults to the time received.
    pub timestamp: Option<DateTime<Utc>>,
}

/// A stored entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub seq: u64,
    /// The project number the log belongs to.
    pub project: u64,
    pub new: NewEntry,
    pub timestamp: DateTime<Utc>,
    pub received: DateTime<Utc>,
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl NewEntry {
    /// Entry `i` of an `entries.write` body, with the body's defaults applied.
    pub fn from_write(body: &Value, e: &Value, i: usize) -> ApiResult<Self> {
        let field = |f: &str| format!("entries[{i}].{f}");
        let log_name = e["logName"]
            .as_str()
            .or(body["logName"].as_str())
            .filter(|n| log_project(n).is_some())
            .ok_or_else(|| {
                ApiError::invalid_field(
                    &field("log_name"),
                    "logName is required, as projects/{project}/logs/{log_id}",
                )
            })?;
        let resource = if e["resource"].is_object() {
            &e["resource"]
        } else {
            &body["resource"]
        };
        let Some(resource_type) = resource["type"].as_str().filter(|t| !t.is_empty()) else {
            return Err(ApiError::invalid_field(
                &field("resource"),
                "resource.type is required",
            ));
        };
        let mut labels = string_map(&body["labels"]);
        labels.extend(string_map(&e["labels"]));
        let payload = match (&e["textPayload"], &e["jsonPayload"]) {
            (Value::String(t), Value::Null) => Payload::Text(t.clone()),
            (Value::Null, j @ Value::Object(_)) => Payload::Json(j.clone()),
            (Value::Null, Value::Null) => Payload::Text(String::new()),
            _ => {
                return Err(ApiError::invalid_field(
                    &field("payload"),
                    "set one of textPayload (a string) or jsonPayload (an object)",
                ));
            }
        };
        let severity = severity_number(&e["severity"]).ok_or_else(|| {
            ApiError::invalid_field(&field("severity"), format!("Invalid severity {}", e["severity"]))
        })?;
        let timestamp = match e["timestamp"].as_str() {
            None => None,
            Some(t) => Some(parse_ts(t).ok_or_else(|| {
                ApiError::invalid_field(&field("timestamp"), format!("Invalid timestamp \"{t}\""))
            })?),
        };
        Ok(Self {
            log_name: log_name.to_string(),
            resource_type: resource_type.to_string(),
            resource_labels: string_map(&resource["labels"]),
            labels,
            severity,
            payload,
            timestamp,
        })
    }
}

/// The project of `projects/{project}/logs/{id}`.
pub fn log_project(log_name: &str) -> Option<&str> {
    let rest = log_name.strip_prefix("projects/")?;
    let (project, log) = rest.split_once("/logs/")?;
    (!project.is_empty() && !log.is_empty()).then_some(project)
}

impl Entry {
    /// The entry as `entries.list` returns it.
    pub fn to_json(&self, enum_int: bool) -> Value {
        let n = &self.new;
        let mut v = json!({
            "logName": n.log_name,
            "resource": {"type": n.resource_type, "labels": n.resource_labels},
            "timestamp": ts(self.timestamp),
            "receiveTimestamp": ts(self.received),
            "insertId": format!("{:016x}", self.seq),
        });
        if n.severity != 0 {
            v["severity"] = if enum_int {
                json!(n.severity)
            } else {
                json!(severity_name(n.severity))
            };
        }
        if !n.labels.is_empty() {
            v["labels"] = json!(n.labels);
        }
        match &n.payload {
            Payload::Text(t) => v["textPayload"] = json!(t),
            Payload::Json(j) => v["jsonPayload"] = j.clone(),
        }
        v
    }

    /// The value of a query field, as a string (`None` when the entry does not have it).
    pub fn field(&self, field: &str) -> Option<String> {
        let n = &self.new;
        match field {
            "logName" => Some(n.log_name.clone()),
            "resource.type" => Some(n.resource_type.clone()),
            "severity" => Some(super::query::severity_key(n.severity)),
            "timestamp" => Some(ts(self.timestamp)),
            "receiveTimestamp" => Some(ts(self.received)),
            "insertId" => Some(format!("{:016x}", self.seq)),
            "textPayload" => match &n.payload {
                Payload::Text(t) => Some(t.clone()),
                Payload::Json(_) => None,
            },
            f => {
                if let Some(k) = f.strip_prefix("resource.labels.") {
                    n.resource_labels.get(k).cloned()
                } else if let Some(k) = f.strip_prefix("labels.") {
                    n.labels.get(k).cloned()
                } else if let Some(path) = f.strip_prefix("jsonPayload.") {
                    json_field(&n.payload, path)
                } else {
                    None
                }
            }
        }
    }
}

/// A field under `jsonPayload`: object keys joined by `.`; a key that itself holds dots is
/// matched whole when the path ends with it.
fn json_field(payload: &Payload, path: &str) -> Option<String> {
    let Payload::Json(mut v) = payload.clone() else {
        return None;
    };
    let mut rest = path;
    loop {
        if let Some(found) = v.get(rest) {
            return match found {
                Value::String(s) => Some(s.clone()),
                Value::Null => None,
                other => Some(other.to_string()),
            };
        }
        let (head, tail) = rest.split_once('.')?;
        v = v.get(head)?.clone();
        rest = tail;
    }
}

/// Where the next page starts: after the entry with this (timestamp, seq).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    nanos: i64,
    seq: u64,
}

impl Cursor {
    pub fn parse(token: &str) -> ApiResult<Option<Self>> {
        if token.is_empty() {
            return Ok(None);
        }
        let bad = || ApiError::invalid_field("page_token", format!("Invalid page token \"{token}\""));
        let (nanos, seq) = token.split_once('-').ok_or_else(bad)?;
        Ok(Some(Self {
            nanos: nanos.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        }))
    }

    pub fn token(&self) -> String {
        format!("{}-{}", self.nanos, self.seq)
    }

    fn of(e: &Entry) -> Self {
        Self {
            nanos: e.timestamp.timestamp_nanos_opt().unwrap_or(i64::MAX),
            seq: e.seq,
        }
    }
}

/// Every entry written, oldest first.
#[derive(Default)]
pub struct LogStore {
    entries: VecDeque<Entry>,
    seq: u64,
}

impl LogStore {
    /// Stores an entry of the log of project number `project`, received at `now`.
    pub fn push(&mut self, new: NewEntry, project: u64, now: DateTime<Utc>) {
        self.seq += 1;
        let timestamp = new.timestamp.unwrap_or(now);
        self.entries.push_back(Entry {
            seq: self.seq,
            project,
            new,
            timestamp,
            received: now,
        });
        if self.entries.len() > MAX_ENTRIES {
            self.entries.pop_front();
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One page of the entries of `projects` matching `query`, in time order (`newest_first`
    /// reversed), starting after `after`; and the cursor of the next page when there is one.
    pub fn page(
        &self,
        projects: &[u64],
        query: &Query,
        newest_first: bool,
        after: Option<Cursor>,
        size: usize,
    ) -> (Vec<&Entry>, Option<Cursor>) {
        let mut matching: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| projects.contains(&e.project) && query.matches(e))
            .collect();
        matching.sort_by_key(|e| Cursor::of(e).pair());
        if newest_first {
            matching.reverse();
        }
        let start = after.map_or(0, |c| {
            matching
                .iter()
                .position(|e| {
                    let p = Cursor::of(e).pair();
                    if newest_first { p < c.pair() } else { p > c.pair() }
                })
                .unwrap_or(matching.len())
        });
        let page: Vec<&Entry> = matching.iter().skip(start).take(size).copied().collect();
        let next = (start + page.len() < matching.len())
            .then(|| page.last().map(|e| Cursor::of(e)))
            .flatten();
        (page, next)
    }
}

impl Cursor {
    fn pair(&self) -> (i64, u64) {
        (self.nanos, self.seq)
    }
}
