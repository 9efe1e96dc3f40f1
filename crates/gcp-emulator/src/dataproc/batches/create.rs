//! batches.create: the id and requestId checks (and replay), the config checks, and the server
//! defaults Dataproc fills in (service labels, runtime and environment config).

use super::*;

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

/// The batch's labels: at most 32, each under the label rules.
fn check_labels(b: &Value) -> ApiResult<()> {
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
    check_labels(b)
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

/// Where the batch's driver output goes, in its staging bucket.
fn driver_output_uri(location: &str, number: u64, uuid: &str) -> String {
    format!(
        "gs://dataproc-staging-{location}-{number}-emul/google-cloud-dataproc-metainfo/{uuid}/jobs/srvls-batch-{}/driveroutput",
        &uuid[..8]
    )
}

/// The fields the service sets on a new batch: its identity, creator, operation, PENDING state
/// and runtime info.
fn fill_server_fields(
    b: &mut Value,
    creator: &str,
    name: &str,
    uuid: &str,
    op: &str,
    now: &str,
    output_uri: String,
) {
    b["name"] = json!(name);
    b["uuid"] = json!(uuid);
    b["createTime"] = json!(now);
    b["creator"] = json!(creator);
    b["operation"] = json!(op);
    b["state"] = json!("PENDING");
    b["stateTime"] = json!(now);
    b["runtimeInfo"] = json!({
        "outputUri": output_uri,
    });
}

/// The create operation's `BatchOperationMetadata`, with the runtime warnings when there are any.
fn batch_metadata(
    name: &str,
    uuid: &str,
    now: &str,
    labels: &Map<String, Value>,
    warnings: &[&str],
) -> Value {
    let mut meta = json!({
        "@type": META_TYPE, "batch": name, "batchUuid": uuid, "createTime": now,
        "description": "Batch", "labels": labels, "operationType": "BATCH",
    });
    if !warnings.is_empty() {
        meta["warnings"] = json!(warnings);
    }
    meta
}

/// The batch's labels as the (key, value) pairs a list filter reads.
fn label_pairs(labels: &Map<String, Value>) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The new batch's name, which no batch may hold yet.
fn new_batch_name(dp: &Dataproc, parent: &str, batch_id: &str) -> ApiResult<String> {
    let name = format!("{parent}/batches/{batch_id}");
    if dp.batches.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Already exists: Failed to create batch: Batch {name}"
        )));
    }
    Ok(name)
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
    let name = new_batch_name(dp, &parent, &batch_id)?;
    let now = ts(w.now);
    let number = w.project_number(project);
    let op_id = w.uuid();
    let op = op_name(project, location, &op_id);

    let labels = add_service_labels(&mut b, &batch_id, &uuid, location);
    let warnings = fill_runtime_config(&mut b, &name, &w.cfg.dataproc_default_runtime);
    fill_environment_config(&mut b);

    let output_uri = driver_output_uri(location, number, &uuid);
    fill_server_fields(&mut b, &w.cfg.creator, &name, &uuid, &op, &now, output_uri);

    let meta = batch_metadata(&name, &uuid, &now, &labels, &warnings);
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
            labels: label_pairs(&labels),
        },
    );
    Ok(Reply::op(op_body))
}
