//! queuedResources.create: the id and requestId checks, the node specs, the queueing window.

use super::*;

fn id_ok(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_.~+%-".contains(&c))
}

/// `requestId` of `queuedResources.create` / `.delete`: the discovery document (`tpu.v2.json`,
/// rev 20261001, both methods) describes it as "Optional. Idempotent request UUID.", and so does
/// the REST reference
/// (<https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.queuedResources/create>).
/// Any textual UUID form is accepted (hyphenated, simple, braced, `urn:uuid:`); that a non-UUID is
/// refused with 400 INVALID_ARGUMENT is the safer reading of "UUID", not a recorded answer
/// (docs/reliability.md, "Not verified against real GCP").
pub(super) fn request_id_ok(id: &str) -> bool {
    uuid::Uuid::try_parse(id).is_ok()
}

pub(super) fn bad_request_id(rid: &str) -> ApiError {
    ApiError::invalid_field(
        "request_id",
        format!("Invalid value at 'request_id' (TYPE_STRING), \"{rid}\": must be a UUID"),
    )
}

/// Node ids a spec creates (`nodeId`, or `{nodeIdPrefix}-0..N-1` for multislice).
pub(super) fn spec_node_ids(spec: &Value, i: usize) -> ApiResult<(Vec<String>, bool)> {
    if let Some(id) = spec["nodeId"].as_str() {
        return Ok((vec![id.to_string()], false));
    }
    let ms = &spec["multisliceParams"];
    let count = ms["nodeCount"].as_i64().unwrap_or(0);
    if count > 1 {
        let prefix = ms["nodeIdPrefix"].as_str().unwrap_or("node");
        return Ok(((0..count).map(|n| format!("{prefix}-{n}")).collect(), true));
    }
    Err(ApiError::invalid_field(
        &format!("queued_resource.tpu.node_spec[{i}].node_id"),
        format!(
            "Invalid value at 'queued_resource.tpu.node_spec[{i}]': node_id or multislice_params.node_count > 1 is required"
        ),
    ))
}

/// Checks the node specs (and the reservation, spot / guaranteed choice) of a queued resource
/// to create; none of the nodes it would create may exist yet.
fn check_node_specs(tpu: &Tpu, qr: &Value) -> ApiResult<()> {
    let specs = qr["tpu"]["nodeSpec"].as_array().cloned().unwrap_or_default();
    if specs.is_empty() {
        return Err(ApiError::invalid_field(
            "queued_resource.tpu.node_spec",
            "queued_resource.tpu.node_spec must not be empty",
        ));
    }
    crate::tpu::reservations::validate(qr)?;
    if qr.get("spot").is_some() && qr.get("guaranteed").is_some() {
        return Err(ApiError::invalid_field(
            "queued_resource.spot",
            "only one of spot or guaranteed may be set",
        ));
    }
    for (i, spec) in specs.iter().enumerate() {
        let sp = spec["parent"].as_str().unwrap_or("");
        crate::tpu::split_parent(sp).map_err(|_| {
            ApiError::invalid_field(
                &format!("queued_resource.tpu.node_spec[{i}].parent"),
                format!("invalid parent \"{sp}\""),
            )
        })?;
        crate::tpu::nodes::resolve_accel(&spec["node"], &format!("queued_resource.tpu.node_spec[{i}].node"))?;
        for nid in spec_node_ids(spec, i)?.0 {
            if tpu.nodes.contains_key(&format!("{sp}/nodes/{nid}")) {
                return Err(ApiError::already_exists(format!(
                    "Resource '{sp}/nodes/{nid}' already exists"
                )));
            }
        }
    }
    Ok(())
}

/// A queueing policy's window, `(validAfter, validUntil)` (`None`: unbounded). Each bound is the
/// first one set of its absolute time, its duration from `now` and its end of `validInterval`.
fn queueing_window(policy: &Value, now: DateTime<Utc>) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let bound = |time: &str, duration: &str, interval_end: &str| {
        policy[time]
            .as_str()
            .and_then(parse_ts)
            .or_else(|| {
                policy[duration]
                    .as_str()
                    .and_then(parse_duration)
                    .map(|d| now + d)
            })
            .or_else(|| policy["validInterval"][interval_end].as_str().and_then(parse_ts))
    };
    (
        bound("validAfterTime", "validAfterDuration", "startTime"),
        bound("validUntilTime", "validUntilDuration", "endTime"),
    )
}

/// The `queuedResourceId` query parameter, which must be a valid resource id.
fn checked_id(q: &Query) -> ApiResult<&str> {
    let id = q
        .get("queuedResourceId")
        .ok_or_else(|| ApiError::invalid_field("queued_resource_id", "queued_resource_id is required"))?;
    if !id_ok(id) {
        return Err(ApiError::invalid_field(
            "queued_resource_id",
            format!("Invalid value at 'queued_resource_id': \"{id}\" does not match ^[A-Za-z0-9_.~+%-]+$"),
        ));
    }
    Ok(id)
}

pub fn create(
    w: &mut Cloud,
    tpu: &mut Tpu,
    project: &str,
    zone: &str,
    q: &Query,
    body: &Value,
) -> ApiResult<Reply> {
    let parent = format!("projects/{project}/locations/{zone}");
    if let Some(rid) = q.get("requestId") {
        if !request_id_ok(rid) {
            return Err(bad_request_id(rid));
        }
        if let Some(op) = w.request_ids.replay(&format!("tpu|{parent}|{rid}"), &w.ops) {
            return Ok(Reply::op(op.body.clone()));
        }
    }
    let id = checked_id(q)?;
    let mut qr = schema::validate(Svc::Tpu, "QueuedResource", body, "queued_resource")?;
    check_node_specs(tpu, &qr)?;
    let name = format!("{parent}/queuedResources/{id}");
    if tpu.qrs.contains_key(&name) {
        return Err(ApiError::already_exists(format!(
            "Resource '{name}' already exists"
        )));
    }
    let now = w.now;
    let (valid_after, valid_until) = queueing_window(&qr["queueingPolicy"], now);
    qr["name"] = json!(name);
    qr["createTime"] = json!(ts(now));
    set_state(&mut qr, "CREATING", None);
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, &name, "create"),
    );
    if let Some(rid) = q.get("requestId") {
        w.request_ids.remember(format!("tpu|{parent}|{rid}"), &op_name);
    }
    let timer = w.schedule(
        Cloud::add(now, w.cfg.durations.qr_accept),
        TimerKind::QueuedResource,
        &name,
    );
    tpu.qrs.insert(
        name,
        QrRec {
            body: qr,
            op: Some(op_name),
            timer: Some(timer),
            nodes: vec![],
            valid_until,
            valid_after,
        },
    );
    Ok(Reply::op(op))
}
