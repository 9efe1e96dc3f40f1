//! Dataproc Serverless batches: create (with `batchId` + idempotent `requestId`), get, list
//! (AIP-160 filter, `orderBy=create_time desc`), delete (terminal only), cancel through the
//! batch's operation, and the state machine PENDING -> RUNNING -> SUCCEEDED | FAILED,
//! CANCELLING -> CANCELLED. The create operation completes only at the terminal state, with the
//! final Batch as its response.

use super::Dataproc;
use super::{BATCH_TYPE, META_TYPE, op_name};
use crate::api::{Reply, list_body};
use crate::cloud::{Cloud, TimerKind};
use crate::errors::{ApiError, ApiResult};
use crate::faults::name_matches;
use crate::filter;
use crate::lro;
use crate::wire::Query;
use crate::wire::labels::label_ok;
use crate::wire::schema::{self, Svc};
use crate::wire::time::{parse_duration, ts};
use serde_json::{Map, Value, json};

// Each part in its own file; the parts share this module's imports and private items
// (`use super::*`), and what they make public is re-exported here so callers keep their paths.
mod create;
mod run;

pub use create::*;
pub use run::*;

const CONFIGS: [&str; 5] = [
    "pysparkBatch",
    "sparkBatch",
    "sparkRBatch",
    "sparkSqlBatch",
    "pysparkNotebookBatch",
];
const TERMINAL: [&str; 3] = ["SUCCEEDED", "FAILED", "CANCELLED"];
const NO_VERSION_WARNING: &str = "No runtime version specified. Using the default runtime version. It is recommended to select a specific major.minor runtime version in production, as the default runtime version may change at any time.";

/// Spark properties the service fills in (golden log), unless the batch sets them.
const DEFAULT_PROPERTIES: [(&str, &str); 7] = [
    ("spark.dataproc.scaling.version", "2"),
    ("spark.driver.cores", "4"),
    ("spark.driver.memory", "9600m"),
    ("spark.dynamicAllocation.executorAllocationRatio", "0.3"),
    ("spark.executor.cores", "4"),
    ("spark.executor.instances", "2"),
    ("spark.executor.memory", "9600m"),
];

#[derive(Clone, Debug)]
pub struct BatchRec {
    pub body: Value,
    pub op: String,
    pub timer: Option<u64>,
    pub create_seq: u64,
    pub created: chrono::DateTime<chrono::Utc>,
    /// Copies of the filterable fields kept next to the record: list filters over thousands of
    /// batches would otherwise walk every JSON body (cache misses dominate).
    pub state: &'static str,
    pub labels: Vec<(String, String)>,
}

impl BatchRec {
    pub fn state(&self) -> &str {
        self.state
    }
}

/// Resolves `2.2` to a full runtime version like the service does (`2.2.39`).
pub fn runtime_version(v: &str) -> String {
    let patch = match v {
        "1.1" => "96",
        "1.2" => "58",
        "2.0" => "107",
        "2.1" => "71",
        "2.2" => "39",
        "2.3" => "12",
        "3.0" => "4",
        _ => return v.to_string(),
    };
    format!("{v}.{patch}")
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("batch \"{name}\" not found"))
}

pub fn get(dp: &Dataproc, name: &str) -> ApiResult<Reply> {
    let rec = dp.batches.find(name, not_found)?;
    Ok(Reply::msg(Svc::Dataproc, "Batch", rec.body.clone()))
}

const FILTER_FIELDS: [&str; 6] = [
    "batch_id",
    "batch_uuid",
    "state",
    "create_time",
    "labels",
    "runtime_info.cohort_info.cohort",
];

pub fn list(dp: &Dataproc, parent: &str, q: &Query) -> ApiResult<Reply> {
    let expr = q
        .get("filter")
        .map(|f| filter::parse(f, &FILTER_FIELDS))
        .transpose()?;
    match q
        .get("orderBy")
        .map(|o| o.split_whitespace().collect::<Vec<_>>().join(" "))
    {
        None => {}
        Some(o) if o == "create_time desc" || o == "create_time" => {}
        Some(o) => {
            return Err(ApiError::invalid_field(
                "order_by",
                format!("Invalid value at 'order_by': \"{o}\" (only \"create_time desc\" is supported)"),
            ));
        }
    }
    let prefix = format!("{parent}/batches/");
    let mut all: Vec<&BatchRec> = dp
        .batches
        .under(&prefix)
        .map(|(_, r)| r)
        .filter(|r| expr.as_ref().is_none_or(|e| filter::eval(e, &|f| field(r, f))))
        .collect();
    // Newest first (the service's default and only supported order).
    // Newest first; integer keys keep this cheap with thousands of resources.
    all.sort_unstable_by_key(|r| std::cmp::Reverse((r.created, r.create_seq)));
    let (page, next) = super::BATCH_PAGING.page(&all, q)?;
    let items = page.into_iter().map(|r| r.body.clone()).collect();
    Ok(Reply::list(
        "batches",
        Svc::Dataproc,
        "Batch",
        list_body("batches", items, next),
    ))
}

fn field(r: &BatchRec, f: &str) -> Option<String> {
    let b = &r.body;
    let s = |v: &Value| v.as_str().map(str::to_string);
    if let Some(k) = f.strip_prefix("labels.") {
        return r.labels.iter().find(|(lk, _)| lk == k).map(|(_, v)| v.clone());
    }
    match f {
        "batch_id" => b["name"]
            .as_str()
            .and_then(|n| n.rsplit('/').next())
            .map(str::to_string),
        "batch_uuid" => s(&b["uuid"]),
        "state" => Some(r.state.to_string()),
        "create_time" => s(&b["createTime"]),
        "runtime_info.cohort_info.cohort" => s(&b["runtimeInfo"]["cohortInfo"]["cohort"]),
        _ => None,
    }
}

pub fn delete(dp: &mut Dataproc, name: &str) -> ApiResult<Reply> {
    let rec = dp.batches.find(name, not_found)?;
    if !TERMINAL.contains(&rec.state()) {
        return Err(ApiError::precondition(format!(
            "Cannot delete batch \"{name}\" in state {}: the batch must be in CANCELLED, SUCCEEDED or FAILED state",
            rec.state()
        )));
    }
    dp.batches.remove(name);
    Ok(Reply::json(json!({})))
}
