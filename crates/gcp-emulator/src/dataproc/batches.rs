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

fn batch_id_ok(id: &str) -> bool {
    (4..=63).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

fn request_id_ok(id: &str) -> bool {
    id.len() <= 40
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("batch \"{name}\" not found"))
}

fn check_config(b: &Value) -> ApiResult<()> {
    let set: Vec<&str> = CONFIGS.iter().copied().filter(|c| b.get(*c).is_some()).collect();
    if set.len() != 1 {
        return Err(ApiError::invalid_field(
            "batch.batch_config",
            format!(
                "Invalid value at 'batch.batch_config': exactly one of pyspark_batch, spark_batch, spark_r_batch, spark_sql_batch, pyspark_notebook_batch must be set (got {})",
                set.len()
            ),
        ));
    }
    if let Some(sb) = b.get("sparkBatch")
        && sb.get("mainJarFileUri").is_some() == sb.get("mainClass").is_some()
    {
        return Err(ApiError::invalid_field(
            "batch.spark_batch.main_jar_file_uri",
            "Invalid value at 'batch.spark_batch': exactly one of main_jar_file_uri or main_class must be set",
        ));
    }
    let exec = &b["environmentConfig"]["executionConfig"];
    if exec.get("idleTtl").is_some() {
        return Err(ApiError::invalid_field(
            "batch.environment_config.execution_config.idle_ttl",
            "Invalid value at 'batch.environment_config.execution_config.idle_ttl': idle_ttl is only supported for sessions",
        ));
    }
    if let Some(ttl) = exec["ttl"].as_str() {
        let d = parse_duration(ttl).unwrap_or_default();
        if d < chrono::Duration::minutes(10) || d > chrono::Duration::days(14) {
            return Err(ApiError::invalid_field(
                "batch.environment_config.execution_config.ttl",
                format!(
                    "Invalid value at 'batch.environment_config.execution_config.ttl': {ttl} is outside [10m, 14d]"
                ),
            ));
        }
    }
    if exec.get("networkUri").is_some() && exec.get("subnetworkUri").is_some() {
        return Err(ApiError::invalid_field(
            "batch.environment_config.execution_config.network_uri",
            "Invalid value at 'batch.environment_config.execution_config': network_uri and subnetwork_uri are mutually exclusive",
        ));
    }
    if let Some(labels) = b["labels"].as_object() {
        if labels.len() > 32 {
            return Err(ApiError::invalid_field(
                "batch.labels",
                "Invalid value at 'batch.labels': at most 32 labels",
            ));
        }
        for (k, v) in labels {
            let v = v.as_str().unwrap_or("");
            if !label_ok(k, false) || !label_ok(v, true) {
                return Err(ApiError::invalid_field(
                    &format!("batch.labels[{k}]"),
                    format!("Invalid value at 'batch.labels': label \"{k}\"=\"{v}\" violates label rules"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks a create's `requestId`; a repeated one answers with the operation of the create that
/// first used it.
fn replay_request(w: &Cloud, parent: &str, rid: &str) -> ApiResult<Option<Reply>> {
    if !request_id_ok(rid) {
        return Err(ApiError::invalid_field(
            "request_id",
            format!(
                "Invalid value at 'request_id': \"{rid}\" must be at most 40 characters of letters, digits, '_' and '-'"
            ),
        ));
    }
    Ok(w.request_ids
        .replay(&format!("dataproc|{parent}|{rid}"), &w.ops)
        .map(|op| Reply::op(op.body.clone())))
}

/// The `batchId` asked for, else the batch's uuid without hyphens.
fn resolve_batch_id(q: &Query, uuid: &str) -> ApiResult<String> {
    match q.get("batchId") {
        Some(id) if batch_id_ok(id) => Ok(id.to_string()),
        Some(id) => Err(ApiError::invalid_field(
            "batch_id",
            format!(
                "Invalid value at 'batch_id': \"{id}\" must be 4-63 characters of lowercase letters, digits and hyphens"
            ),
        )),
        None => Ok(uuid.replace('-', "")),
    }
}

/// Adds the `goog-dataproc-*` labels the service puts on every batch; returns all its labels.
fn add_service_labels(b: &mut Value, batch_id: &str, uuid: &str, location: &str) -> Map<String, Value> {
    let mut labels = b["labels"].as_object().cloned().unwrap_or_default();
    labels.insert("goog-dataproc-batch-id".into(), json!(batch_id));
    labels.insert("goog-dataproc-batch-uuid".into(), json!(uuid));
    labels.insert("goog-dataproc-location".into(), json!(location));
    labels.insert(
        "goog-dataproc-drz-resource-uuid".into(),
        json!(format!("batch-{uuid}")),
    );
    b["labels"] = Value::Object(labels.clone());
    labels
}

/// Resolves the runtime version (`default_runtime` when none is given) and fills in the Spark
/// properties the service sets; returns the create operation's warnings.
fn fill_runtime_config(b: &mut Value, name: &str, default_runtime: &str) -> Vec<&'static str> {
    let given = b["runtimeConfig"]["version"].as_str().map(str::to_string);
    let warnings: Vec<&str> = if given.is_none() {
        vec![NO_VERSION_WARNING]
    } else {
        vec![]
    };
    let version = runtime_version(&given.unwrap_or_else(|| default_runtime.to_string()));
    if b.get("runtimeConfig").is_none() {
        b["runtimeConfig"] = json!({});
    }
    b["runtimeConfig"]["version"] = json!(version);
    let mut props = b["runtimeConfig"]["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    props.insert("spark:spark.app.name".into(), json!(name));
    for (k, v) in DEFAULT_PROPERTIES {
        if !props.contains_key(k) && !props.contains_key(&format!("spark:{k}")) {
            props.insert(format!("spark:{k}"), json!(v));
        }
    }
    b["runtimeConfig"]["properties"] = Value::Object(props);
    warnings
}

/// Fills in the `environmentConfig` the service returns when the batch leaves it out.
fn fill_environment_config(b: &mut Value) {
    if b.get("environmentConfig").is_none() {
        b["environmentConfig"] = json!({});
    }
    let env = &mut b["environmentConfig"];
    if env.get("executionConfig").is_none() {
        env["executionConfig"] = json!({});
    }
    if env["executionConfig"].get("ttl").is_none() {
        env["executionConfig"]["ttl"] = json!("14400s");
    }
    if env["executionConfig"].get("authenticationConfig").is_none() {
        env["executionConfig"]["authenticationConfig"] = json!({});
    }
    if env.get("peripheralsConfig").is_none() {
        env["peripheralsConfig"] = json!({});
    }
    if env["peripheralsConfig"].get("sparkHistoryServerConfig").is_none() {
        env["peripheralsConfig"]["sparkHistoryServerConfig"] = json!({});
    }
}

pub fn create(
    w: &mut Cloud,
    dp: &mut Dataproc,
    project: &str,
    location: &str,
    q: &Query,
    body: &Value,
) -> ApiResult<Reply> {
    let parent = format!("projects/{project}/locations/{location}");
    let rid = q.get("requestId");
    if let Some(rid) = rid
        && let Some(replayed) = replay_request(w, &parent, rid)?
    {
        return Ok(replayed);
    }
    let mut b = schema::validate(Svc::Dataproc, "Batch", body, "batch")?;
    check_config(&b)?;
    let uuid = w.uuid();
    let batch_id = resolve_batch_id(q, &uuid)?;
    let name = format!("{parent}/batches/{batch_id}");
    if dp.batches.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Already exists: Failed to create batch: Batch {name}"
        )));
    }
    let now = ts(w.now);
    let number = w.project_number(project);
    let op_id = w.uuid();
    let op = op_name(project, location, &op_id);

    let labels = add_service_labels(&mut b, &batch_id, &uuid, location);
    let warnings = fill_runtime_config(&mut b, &name, &w.cfg.dataproc_default_runtime);
    fill_environment_config(&mut b);

    b["name"] = json!(name);
    b["uuid"] = json!(uuid);
    b["createTime"] = json!(now);
    b["creator"] = json!(w.cfg.creator);
    b["operation"] = json!(op);
    b["state"] = json!("PENDING");
    b["stateTime"] = json!(now);
    b["runtimeInfo"] = json!({
        "outputUri": format!("gs://dataproc-staging-{location}-{number}-emul/google-cloud-dataproc-metainfo/{uuid}/jobs/srvls-batch-{}/driveroutput", &uuid[..8]),
    });

    let mut meta = json!({
        "@type": META_TYPE, "batch": name, "batchUuid": uuid, "createTime": now,
        "description": "Batch", "labels": labels, "operationType": "BATCH",
    });
    if !warnings.is_empty() {
        meta["warnings"] = json!(warnings);
    }
    let op_body = lro::start(&mut w.ops, Svc::Dataproc, op.clone(), meta);
    if let Some(rid) = rid {
        w.request_ids.remember(format!("dataproc|{parent}|{rid}"), &op);
    }
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.batch_pending),
        TimerKind::Batch,
        &name,
    );
    let create_seq = w.next_seq();
    dp.batches.insert(
        name,
        BatchRec {
            body: b,
            op,
            timer: Some(timer),
            create_seq,
            created: w.now,
            state: "PENDING",
            labels: labels
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
        },
    );
    Ok(Reply::op(op_body))
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

/// `operations.cancel` on a batch's operation cancels the batch.
pub fn cancel_op(w: &mut Cloud, dp: &mut Dataproc, op: &str) -> ApiResult<()> {
    let rec = lro::get(&w.ops, Svc::Dataproc, op)?;
    let batch = rec.body["metadata"]["batch"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(b) = dp.batches.get(&batch) else {
        return Err(ApiError::precondition(format!(
            "Operation {op} has no batch to cancel"
        )));
    };
    match b.state() {
        "CANCELLING" => return Ok(()),
        s if TERMINAL.contains(&s) => {
            return Err(ApiError::precondition(format!(
                "Cannot cancel batch \"{batch}\" in state {s}"
            )));
        }
        _ => {}
    }
    let t = w.schedule(
        Cloud::add(w.now, w.cfg.durations.batch_cancel),
        TimerKind::Batch,
        &batch,
    );
    let now = w.now;
    let b = dp.batches.get_mut(&batch).expect("checked above");
    move_to(b, "CANCELLING", None, now);
    b.timer = Some(t);
    Ok(())
}

/// Appends the current state to `stateHistory` and enters `state`.
fn move_to(b: &mut BatchRec, state: &'static str, message: Option<&str>, at: chrono::DateTime<chrono::Utc>) {
    let prev = json!({"state": b.body["state"], "stateStartTime": b.body["stateTime"]});
    if b.body.get("stateHistory").is_none() {
        b.body["stateHistory"] = json!([]);
    }
    if let Some(h) = b.body["stateHistory"].as_array_mut() {
        h.push(prev);
    }
    b.body["state"] = json!(state);
    b.state = state;
    b.body["stateTime"] = json!(ts(at));
    match message {
        Some(m) => b.body["stateMessage"] = json!(m),
        None => {
            if let Some(o) = b.body.as_object_mut() {
                o.remove("stateMessage");
            }
        }
    }
}

/// Fault: make a batch fail now (if running) or at the end of its run.
pub fn fail_now(w: &mut Cloud, dp: &mut Dataproc, name: &str) {
    let keys: Vec<String> = dp
        .batches
        .keys()
        .filter(|k| k.as_str() == name || k.rsplit('/').next() == Some(name))
        .cloned()
        .collect();
    for k in keys {
        let now = w.now;
        let t = w.schedule(now, TimerKind::Batch, &k);
        if let Some(b) = dp.batches.get_mut(&k)
            && !TERMINAL.contains(&b.state())
            && b.state() != "CANCELLING"
        {
            b.timer = Some(t);
            // Skip straight to the end of the run.
            if b.state() == "PENDING" {
                move_to(b, "RUNNING", None, now);
            }
        }
    }
}

/// The batch's `environmentConfig.executionConfig.ttl` (the server fills in 4 h when absent).
fn ttl(batch: &Value) -> std::time::Duration {
    batch["environmentConfig"]["executionConfig"]["ttl"]
        .as_str()
        .and_then(crate::wire::time::parse_duration)
        .and_then(|d| d.to_std().ok())
        .unwrap_or(std::time::Duration::from_secs(4 * 3600))
}

pub fn fire(w: &mut Cloud, dp: &mut Dataproc, seq: u64, name: &str) {
    use crate::logging::workloads::{ERROR, INFO};
    let now = w.now;
    let d = w.cfg.durations.clone();
    let failing = name_matches(&w.faults.failing, name);
    let message = w.faults.messages.get(name).cloned().or_else(|| {
        name.rsplit('/')
            .next()
            .and_then(|id| w.faults.messages.get(id).cloned())
    });
    let Some(b) = dp.batches.get_mut(name) else { return };
    if b.timer != Some(seq) {
        return;
    }
    b.timer = None;
    let uuid = b.body["uuid"].as_str().unwrap_or_default().to_string();
    let id = name.rsplit('/').next().unwrap_or_default().to_string();
    let log = |w: &mut Cloud, severity: i32, text: &str| {
        if w.cfg.simulate_outputs {
            crate::logging::workloads::dataproc_batch(w, name, &uuid, severity, text);
        }
    };
    match b.state().to_string().as_str() {
        "PENDING" => {
            move_to(b, "RUNNING", None, now);
            log(
                w,
                INFO,
                &format!("Starting the Spark driver of batch {id} (simulated by gcp-emulator)"),
            );
            let id = name.rsplit('/').next().unwrap_or_default();
            let region = name.split('/').nth(3).unwrap_or_default();
            b.body["runtimeInfo"]["endpoints"] = json!({
                "Spark History Server": format!("https://emulator-{id}-dot-{region}.dataproc.googleusercontent.com/sparkhistory/"),
            });
            // A run longer than the batch's ttl is ended at the ttl (below).
            let run = d.batch_run.min(ttl(&b.body));
            let t = w.schedule(Cloud::add(now, run), TimerKind::Batch, name);
            if let Some(b) = dp.batches.get_mut(name) {
                b.timer = Some(t);
            }
        }
        "RUNNING" => {
            let started = b.body["stateTime"]
                .as_str()
                .and_then(crate::wire::time::parse_ts)
                .unwrap_or(now);
            let secs = (now - started).num_seconds().max(1);
            b.body["runtimeInfo"]["approximateUsage"] = json!({
                "acceleratorType": "UNSPECIFIED",
                // 12 DCUs (driver 4 + 2 executors x 4 cores), shuffle 100 GB per executor.
                "milliDcuSeconds": (secs * 12 * 1000).to_string(),
                "shuffleStorageGbSeconds": (secs * 200).to_string(),
            });
            let limit = ttl(&b.body);
            if !failing && limit < d.batch_run {
                // Issue 21 item 6: "When the workload exceeds this duration, it will be
                // unconditionally terminated without waiting for ongoing work to finish ... If
                // ttl is not specified for a batch that uses 2.1+ runtime version, it defaults to
                // 4 hours." (dataproc v1 discovery doc, `ExecutionConfig.ttl`). The terminal
                // state and message are not documented: FAILED with a stateMessage naming the ttl
                // is the reading chosen (docs/reliability.md, "Not verified against real GCP").
                let msg = format!(
                    "Batch terminated: it exceeded its ttl of {}s (environmentConfig.executionConfig.ttl). (simulated by gcp-emulator)",
                    limit.as_secs()
                );
                move_to(b, "FAILED", Some(&msg), now);
                log(w, ERROR, &msg);
                finish(w, dp, name, false);
                return;
            }
            if failing {
                let msg = message.unwrap_or_else(|| {
                    "Job failed with message [Simulated failure injected by gcp-emulator]".into()
                });
                move_to(b, "FAILED", Some(&msg), now);
                log(w, ERROR, &msg);
            } else {
                move_to(b, "SUCCEEDED", None, now);
                log(
                    w,
                    INFO,
                    &format!("Batch {id} finished: the Spark job wrote its output"),
                );
            }
            finish(w, dp, name, !failing);
        }
        "CANCELLING" => {
            move_to(b, "CANCELLED", Some("Batch was cancelled"), now);
            log(w, INFO, "Batch was cancelled: the Spark driver stopped");
            finish(w, dp, name, false);
        }
        _ => {}
    }
}

fn finish(w: &mut Cloud, dp: &mut Dataproc, name: &str, succeeded: bool) {
    let Some(b) = dp.batches.get(name) else { return };
    let (op, resp) = (b.op.clone(), lro::any(BATCH_TYPE, &b.body));
    let body = b.body.clone();
    lro::finish_ok(&mut w.ops, w.now, &op, resp);
    if succeeded && w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name) {
        crate::outputs::batch_succeeded(w, &body);
    }
}
