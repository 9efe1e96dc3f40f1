//! queuedResources.delete (`force`) and reset, and preemption by fault.

use super::*;

pub fn delete(w: &mut Cloud, tpu: &mut Tpu, name: &str, q: &Query) -> ApiResult<Reply> {
    if let Some(rid) = q.get("requestId").filter(|rid| !request_id_ok(rid)) {
        return Err(bad_request_id(rid));
    }
    let rid_key = q.get("requestId").map(|rid| format!("tpu-delete|{name}|{rid}"));
    if let Some(op) = rid_key.as_ref().and_then(|k| w.request_ids.replay(k, &w.ops)) {
        return Ok(Reply::op(op.body.clone()));
    }
    let force = q.bool("force")?;
    let rec = tpu.qrs.find(name, not_found)?;
    let live = live_nodes(tpu, rec);
    let state = rec.state().to_string();
    if state == "DELETING" {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" is already being deleted"
        )));
    }
    if !force && !live.is_empty() && !["ACCEPTED", "FAILED", "SUSPENDED"].contains(&state.as_str()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {state} still has nodes ({}); delete them first or set force=true",
            live.join(", ")
        )));
    }
    let d = w.cfg.durations.qr_delete;
    for n in &live {
        crate::tpu::nodes::delete_quietly(w, tpu, n, d);
    }
    let parent = super::parent_of(name).to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "delete"),
    );
    if let Some(k) = rid_key {
        w.request_ids.remember(k, &op_name);
    }
    let timer = w.schedule(Cloud::add(w.now, d), TimerKind::QueuedResource, name);
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    let previous = rec.op.replace(op_name);
    set_state(&mut rec.body, "DELETING", Some("USER"));
    rec.timer = Some(timer);
    if let Some(prev) = previous {
        lro::finish_err(
            &mut w.ops,
            w.now,
            &prev,
            &ApiError::new(Code::Aborted, format!("QueuedResource \"{name}\" was deleted")),
        );
    }
    Ok(Reply::op(op))
}

pub fn reset(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<Reply> {
    let rec = tpu.qrs.find(name, not_found)?;
    let state = rec.state().to_string();
    if !["FAILED", "SUSPENDED"].contains(&state.as_str()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {state} cannot be reset (only FAILED or SUSPENDED)"
        )));
    }
    let parent = super::parent_of(name).to_string();
    let op_name = tpu_op_name(w, &parent);
    let op = lro::start(
        &mut w.ops,
        Svc::Tpu,
        op_name.clone(),
        op_metadata(w.now, name, "reset"),
    );
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_queue),
        TimerKind::QueuedResource,
        name,
    );
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    set_state(&mut rec.body, "ACCEPTED", Some("USER"));
    rec.timer = Some(timer);
    rec.nodes.clear();
    let resp = lro::any(QR_TYPE, &rec.body);
    lro::finish_ok(&mut w.ops, w.now, &op_name, resp);
    let done = w.ops.get(&op_name).map(|o| o.body.clone()).unwrap_or(op);
    Ok(Reply::op(done))
}

/// Fault: the capacity behind a queued resource is reclaimed now.
pub fn preempt(w: &mut Cloud, tpu: &mut Tpu, name: &str) -> ApiResult<()> {
    let rec = tpu.qrs.find(name, not_found)?;
    if !["ACTIVE", "PROVISIONING"].contains(&rec.state()) {
        return Err(ApiError::precondition(format!(
            "QueuedResource \"{name}\" in state {} has no capacity to preempt",
            rec.state()
        )));
    }
    let nodes = rec.nodes.clone();
    for n in &nodes {
        crate::tpu::nodes::mark_preempted(w, tpu, n);
    }
    let timer = w.schedule(
        Cloud::add(w.now, w.cfg.durations.qr_suspend),
        TimerKind::QueuedResource,
        name,
    );
    let rec = tpu.qrs.get_mut(name).expect("checked above");
    set_state(&mut rec.body, "SUSPENDING", Some("SERVICE"));
    rec.timer = Some(timer);
    Ok(())
}
