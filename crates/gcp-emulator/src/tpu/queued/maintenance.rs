//! v2alpha1 `queuedResources.performMaintenanceQueuedResource`: the customer starts the pending,
//! reschedulable maintenance of some of a queued resource's nodes now, as `nodes.performMaintenance`
//! does for a node of its own. Google maintains a queued resource's nodes through it.
//!
//! Assumed (not documented): `nodeNames` takes the nodes' full names or their ids; the call is
//! all or nothing (every named node is checked before any starts); one operation covers the
//! named nodes and is done when the last of their maintenances is over.

use super::*;
use crate::tpu::nodes::{check_reschedulable, start_maintenance};

/// The queued resource's node that `named` (a full name or an id) names, or why it is refused.
fn node_of(rec: &QrRec, name: &str, named: &str) -> ApiResult<String> {
    let parent = super::parent_of(name);
    let full = match named.contains("/nodes/") {
        true => named.to_string(),
        false => format!("{parent}/nodes/{named}"),
    };
    if !rec.nodes.contains(&full) {
        return Err(ApiError::invalid_field(
            "node_names",
            format!("Invalid value at 'node_names': \"{named}\" is not a node of QueuedResource \"{name}\""),
        ));
    }
    Ok(full)
}

pub fn perform_maintenance(w: &mut Cloud, tpu: &mut Tpu, name: &str, body: &Value) -> ApiResult<Reply> {
    let rec = tpu.qrs.find(name, not_found)?;
    let req = schema::validate(Svc::Tpu, "PerformMaintenanceQueuedResourceRequest", body, "")?;
    if rec.state() != "ACTIVE" {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" is in state {}; maintenance needs an ACTIVE queued resource",
            rec.state()
        )));
    }
    let named: Vec<&str> = req["nodeNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if named.is_empty() {
        return Err(ApiError::invalid_field(
            "node_names",
            "Invalid value at 'node_names': at least one node is required",
        ));
    }
    let mut nodes = Vec::new();
    for n in named {
        let full = node_of(rec, name, n)?;
        if !nodes.contains(&full) {
            nodes.push(full);
        }
    }
    for n in &nodes {
        check_reschedulable(tpu, n)?;
    }
    let parent = super::parent_of(name).to_string();
    let op_name = tpu_op_name(w, &parent);
    let mut meta = op_metadata(w.now, name, "performMaintenanceQueuedResource");
    meta["apiVersion"] = json!("v2alpha1");
    let op = lro::start(&mut w.ops, Svc::Tpu, op_name.clone(), meta);
    for n in &nodes {
        start_maintenance(w, tpu, n, &op_name);
    }
    Ok(Reply::op(op))
}
