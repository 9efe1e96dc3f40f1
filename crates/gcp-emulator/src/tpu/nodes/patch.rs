//! nodes.patch: the update mask, the UpdateNode operation and the timer that applies it.

use super::*;

const PATCHABLE: [(&str, &str); 5] = [
    ("description", "description"),
    ("tags", "tags"),
    ("labels", "labels"),
    ("metadata", "metadata"),
    (
        "network_config.enable_external_ips",
        "networkConfig.enableExternalIps",
    ),
];

/// The JSON paths of the fields an `updateMask` names; a field that cannot be updated fails the
/// call.
fn mask_paths(mask: &str) -> ApiResult<Vec<&'static str>> {
    let mut paths = Vec::new();
    for m in mask.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let snake = schema::snake(m);
        let Some((_, json_path)) = PATCHABLE.iter().find(|(s, _)| *s == snake) else {
            return Err(ApiError::invalid_field(
                "update_mask",
                format!(
                    "Invalid value at 'update_mask': field \"{m}\" cannot be updated (supported: description, tags, labels, metadata, network_config.enable_external_ips)"
                ),
            ));
        };
        paths.push(*json_path);
    }
    Ok(paths)
}

pub fn patch(w: &mut Cloud, tpu: &mut Tpu, name: &str, q: &Query, body: &Value) -> ApiResult<Reply> {
    if !tpu.nodes.contains_key(name) {
        return Err(not_found(name));
    }
    let mask = q
        .get("updateMask")
        .ok_or_else(|| ApiError::invalid_field("update_mask", "update_mask is required"))?;
    let patch = schema::validate_partial(Svc::Tpu, "Node", body, "node")?;
    let paths = mask_paths(mask)?;
    if let Some(op) = operation_in_flight(w, name) {
        // Issue 21 item 8: a node takes one operation at a time; a valid patch while another runs
        // (the create, a start/stop, an earlier patch, `gcloud ... tpu-vm ssh` adding its key)
        // is refused with 409, which gcloud retries. The code (ABORTED rather than
        // FAILED_PRECONDITION) and text are not documented (docs/reliability.md, "Not verified
        // against real GCP"); ABORTED, the canonical code for a concurrency conflict, is chosen.
        return Err(ApiError::new(
            Code::Aborted,
            format!(
                "The node {name} has an operation in progress ({op}); retry once it is done. (simulated by gcp-emulator)"
            ),
        ));
    }
    let (ready, before) = {
        let rec = tpu.nodes.get_mut(name).expect("checked above");
        let before = rec.body["metadata"][CHECKPOINT_REQUEST_KEY]
            .as_str()
            .map(str::to_string);
        // A masked field is replaced whole, maps included (AIP-134, "Update":
        // <https://google.aip.dev/134>): `metadata` in the mask replaces the node's metadata map,
        // so a client that adds one key (gcloud `tpu-vm ssh` adding `ssh-keys`) sends the rest.
        for p in &paths {
            set_path(&mut rec.body, &patch, p);
        }
        (rec.state() == "READY", before)
    };
    if ready {
        if paths.contains(&"metadata") {
            checkpoint_request(w, tpu, name, before.as_deref());
            waited_attributes(w, tpu, name);
        }
        maybe_schedule_workload(w, tpu, name);
    }
    let parent = name.split("/nodes/").next().unwrap_or_default().to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "update"),
    );
    w.schedule(
        Cloud::add(w.now, w.cfg.durations.tpu_update),
        TimerKind::NodeUpdateOp,
        &op_name,
    );
    Ok(Reply::op(op))
}

/// A pending TPU operation whose `metadata.target` is the node.
fn operation_in_flight(w: &Cloud, node: &str) -> Option<String> {
    w.ops
        .iter()
        .find(|(_, o)| o.svc == Svc::Tpu && !o.done() && o.body["metadata"]["target"] == json!(node))
        .map(|(n, _)| n.clone())
}

fn set_path(target: &mut Value, src: &Value, path: &str) {
    let parts: Vec<&str> = path.split('.').collect();
    let mut s = Some(src);
    for p in &parts {
        s = s.and_then(|v| v.get(*p));
    }
    let mut t = target;
    for p in &parts[..parts.len() - 1] {
        if t.get(*p).is_none() {
            t[*p] = json!({});
        }
        t = &mut t[*p];
    }
    let last = parts[parts.len() - 1];
    match (s, t.as_object_mut()) {
        (Some(v), Some(m)) => {
            m.insert(last.to_string(), v.clone());
        }
        (None, Some(m)) => {
            m.remove(last);
        }
        _ => {}
    }
}

/// `response` of a finished update: the node as it is when the operation ends.
pub fn fire_update_op(w: &mut Cloud, tpu: &mut Tpu, op_name: &str) {
    let target = w
        .ops
        .get(op_name)
        .and_then(|o| o.body["metadata"]["target"].as_str().map(str::to_string));
    match target.and_then(|t| tpu.nodes.get(&t)) {
        Some(rec) => {
            // Unlike create's, the update operation's copy keeps `health` (golden log).
            let resp = lro::any(NODE_TYPE, &view(rec));
            lro::finish_ok(&mut w.ops, w.now, op_name, resp);
        }
        None => lro::finish_err(
            &mut w.ops,
            w.now,
            op_name,
            &ApiError::not_found("TPU node was deleted during the update"),
        ),
    }
}
