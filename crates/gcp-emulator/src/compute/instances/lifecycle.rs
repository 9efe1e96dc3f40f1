//! An instance after insert: delete, preemption, the timer that moves its status on, its run end
//! (`maxRunDuration`) and its removal.

use super::*;

/// Starts deleting (STOPPING -> gone after `instanceStop`); `op` completes when it is gone.
pub fn begin_delete(w: &mut Cloud, ce: &mut ComputeState, key: &str, op: Option<String>) {
    crate::compute::interrupt::interrupt(w, ce, key, crate::training::Cause::Deletion);
    let at = Cloud::add(w.now, w.cfg.durations.instance_stop);
    let already = ce
        .instances
        .get(key)
        .is_some_and(|r| r.status() == "STOPPING" && !r.to_terminated);
    let seq = (!already).then(|| w.schedule(at, TimerKind::Compute, &format!("i|{key}")));
    if let Some(r) = ce.instances.get_mut(key) {
        if let Some(seq) = seq {
            r.seq = seq;
            r.body["status"] = json!("STOPPING");
            r.to_terminated = false;
        }
        r.delete_ops.extend(op);
        // A workload stopped by maintenance does not restart on a VM going down.
        r.run.paused = None;
    }
}

pub fn delete(
    w: &mut Cloud,
    ce: &mut ComputeState,
    project: &str,
    scope: &str,
    key: &str,
    req: &Req,
) -> ApiResult<Value> {
    if let Some(op) = operations::replay(w, ce, scope, req)? {
        return Ok(op);
    }
    if !ce.instances.contains_key(key) {
        return Err(errors::not_found(key));
    }
    let zone = scope.rsplit('/').next().unwrap_or_default().to_string();
    let op = operations::start(w, ce, project, &Loc::Zone(zone), "delete", key);
    begin_delete(w, ce, key, Some(op.clone()));
    Ok(operations::remember(w, ce, scope, req, &op))
}

/// Preempts a Spot VM now: STOPPING, then TERMINATED (action STOP, default) or gone (DELETE).
pub fn preempt(w: &mut Cloud, ce: &mut ComputeState, name: &str) -> ApiResult<()> {
    let key = find_key(ce, name).ok_or_else(|| errors::not_found(name))?;
    let r = &ce.instances[&key];
    let s = &r.body["scheduling"];
    if s["provisioningModel"] != "SPOT" && s["preemptible"] != true {
        return Err(ApiError::precondition(format!(
            "instance {key} is not a Spot VM (scheduling.provisioningModel {})",
            s["provisioningModel"].as_str().unwrap_or("STANDARD")
        )));
    }
    if !matches!(r.status(), "PROVISIONING" | "STAGING" | "RUNNING") {
        return Err(ApiError::precondition(format!(
            "instance {key} is {}, not running",
            r.status()
        )));
    }
    let to_terminated = s["instanceTerminationAction"] != "DELETE";
    crate::compute::interrupt::interrupt(w, ce, &key, crate::training::Cause::Preemption);
    let at = Cloud::add(w.now, w.cfg.durations.instance_stop);
    let seq = w.schedule(at, TimerKind::Compute, &format!("i|{key}"));
    let r = ce.instances.get_mut(&key).expect("found above");
    r.seq = seq;
    r.to_terminated = to_terminated;
    r.body["status"] = json!("STOPPING");
    r.run.paused = None;
    Ok(())
}

/// STAGING -> RUNNING: the run end is scheduled (`maxRunDuration`, outside a MIG), the insert
/// operation completes, a resize request counts the instance, and its workload starts.
fn start_running(w: &mut Cloud, ce: &mut ComputeState, key: &str) {
    let r = ce.instances.get(key).expect("present");
    let now = ts(w.now);
    let run = r.body["scheduling"]["maxRunDuration"]["seconds"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|_| r.igm.is_none());
    let end_seq = run.map(|s| {
        let at = Cloud::add(w.now, std::time::Duration::from_secs(s));
        w.schedule(at, TimerKind::Compute, &format!("ie|{key}"))
    });
    let r = ce.instances.get_mut(key).expect("present");
    r.body["status"] = json!("RUNNING");
    r.body["lastStartTimestamp"] = json!(now);
    if let Some(s) = end_seq {
        r.end_seq = s;
    }
    let op = r.insert_op.take();
    let rr = r.resize.clone();
    if let Some(op) = op {
        operations::done(w, ce, &op);
    }
    if let Some(rr) = rr {
        crate::compute::resize::instance_running(ce, &rr);
    }
    crate::compute::workload::start(w, ce, key);
}

/// Lifecycle step.
pub fn fire(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some(r) = ce.instances.get(key) else {
        return;
    };
    if r.seq != seq {
        return;
    }
    let d = w.cfg.durations.clone();
    match r.status().to_string().as_str() {
        "PROVISIONING" if r.doomed => {
            let r = ce.instances.remove(key).expect("present");
            if let Some(op) = &r.insert_op {
                let msg = stockout_message(&r.project, &r.zone);
                operations::fail(w, ce, op, STOCKOUT_CODE, &msg, STOCKOUT_HTTP);
            }
            gone(w, ce, r);
        }
        "PROVISIONING" => {
            let at = Cloud::add(w.now, d.instance_stage);
            let seq = w.schedule(at, TimerKind::Compute, &format!("i|{key}"));
            let r = ce.instances.get_mut(key).expect("present");
            r.seq = seq;
            r.body["status"] = json!("STAGING");
        }
        "STAGING" => start_running(w, ce, key),
        "STOPPING" if r.to_terminated => {
            let now = ts(w.now);
            let r = ce.instances.get_mut(key).expect("present");
            r.body["status"] = json!("TERMINATED");
            r.body["lastStopTimestamp"] = json!(now);
            crate::compute::recheck(w, ce);
        }
        "STOPPING" => {
            let r = ce.instances.remove(key).expect("present");
            gone(w, ce, r);
        }
        _ => {}
    }
}

/// Ends the VM's run `secs` from now (a resize request's `requestedRunDuration`).
pub fn schedule_end(w: &mut Cloud, ce: &mut ComputeState, key: &str, secs: u64) {
    let at = Cloud::add(w.now, std::time::Duration::from_secs(secs));
    let seq = w.schedule(at, TimerKind::Compute, &format!("ie|{key}"));
    if let Some(r) = ce.instances.get_mut(key) {
        r.end_seq = seq;
    }
}

/// The run duration is over (`maxRunDuration` since RUNNING, or a resize request's
/// `requestedRunDuration` since provisioning): the termination action (DELETE or STOP). A MIG
/// member is deleted and its MIG's target size shrinks by one (assumed: otherwise the MIG would
/// recreate it).
pub fn fire_run_end(w: &mut Cloud, ce: &mut ComputeState, seq: u64, key: &str) {
    let Some(r) = ce.instances.get(key) else {
        return;
    };
    if r.end_seq != seq || matches!(r.status(), "STOPPING" | "TERMINATED") {
        return;
    }
    let stop = r.body["scheduling"]["instanceTerminationAction"] == "STOP" && r.igm.is_none();
    if let Some(g) = r.igm.clone()
        && let Some(g) = ce.igms.get_mut(&g)
    {
        g.target_size = (g.target_size - 1).max(0);
    }
    begin_delete(w, ce, key, None);
    if stop && let Some(r) = ce.instances.get_mut(key) {
        r.to_terminated = true;
    }
}

/// Bookkeeping once an instance no longer exists.
pub(super) fn gone(w: &mut Cloud, ce: &mut ComputeState, r: InstanceRec) {
    crate::compute::maintenance::abandon(w, ce, r.run.maintenance_op.clone());
    if let Some(op) = &r.insert_op {
        operations::done(w, ce, op);
    }
    for op in &r.delete_ops {
        operations::done(w, ce, op);
    }
    if let Some(g) = &r.igm {
        crate::compute::igm::member_gone(w, ce, g);
    }
    crate::compute::recheck(w, ce);
}
