//! customJobs.cancel / delete, and the faults that fail or preempt a job now.

use super::*;

pub fn cancel(w: &mut Cloud, vx: &mut Vertex, name: &str) -> ApiResult<()> {
    let rec = vx.jobs.find(name, not_found)?;
    match rec.state() {
        "JOB_STATE_CANCELLING" => return Ok(()),
        s if TERMINAL.contains(&s) => {
            return Err(ApiError::precondition(format!(
                "Cannot cancel CustomJob \"{name}\" in state {s}"
            )));
        }
        _ => {}
    }
    let t = w.schedule(
        Cloud::add(w.now, w.cfg.durations.job_cancel),
        TimerKind::Job,
        name,
    );
    let now = ts(w.now);
    let rec = vx.jobs.get_mut(name).expect("checked");
    rec.set_state("JOB_STATE_CANCELLING");
    rec.body["updateTime"] = json!(now);
    rec.timer = Some(t);
    Ok(())
}

pub fn delete(w: &mut Cloud, vx: &mut Vertex, name: &str) -> ApiResult<Reply> {
    let rec = vx.jobs.find(name, not_found)?;
    if !TERMINAL.contains(&rec.state()) {
        return Err(ApiError::precondition(format!(
            "CustomJob \"{name}\" is in state {}; cancel it and wait for a terminal state before deleting",
            rec.state()
        )));
    }
    vx.jobs.remove(name);
    let parent = name.split("/customJobs/").next().unwrap_or_default().to_string();
    let seq = w.next_seq();
    let op_name = format!(
        "{parent}/operations/{}",
        6_000_000_000_000_000_000u64 + seq * 104_729
    );
    let now = ts(w.now);
    let meta = json!({"@type": DELETE_META_TYPE, "genericMetadata": {"createTime": now, "updateTime": now}});
    lro::start(&mut w.ops, Svc::Vertex, op_name.clone(), meta);
    lro::finish_ok(&mut w.ops, w.now, &op_name, json!({"@type": lro::EMPTY}));
    Ok(Reply::op(w.ops[&op_name].body.clone()))
}

/// Fault: fail the job now (if it exists and is not terminal) or at the end of its run.
pub fn fail_now(w: &mut Cloud, vx: &mut Vertex, name: &str) {
    let keys: Vec<String> = vx
        .jobs
        .keys()
        .filter(|k| k.as_str() == name || k.rsplit('/').next() == Some(name))
        .cloned()
        .collect();
    for k in keys {
        let t = w.schedule(w.now, TimerKind::Job, &k);
        if let Some(j) = vx.jobs.get_mut(&k)
            && !TERMINAL.contains(&j.state())
            && j.state() != "JOB_STATE_CANCELLING"
        {
            j.set_state("JOB_STATE_RUNNING");
            j.timer = Some(t);
        }
    }
}

/// Issue 21 item 7: the Spot VMs of a running (or provisioning) Spot custom job are reclaimed.
///
/// What Google documents, and so what this imitates:
/// * `Scheduling.restartJobOnWorkerRestart` (aiplatform v1 discovery document): "Restarts the
///   entire CustomJob if a worker gets restarted." With it set, the service starts the whole job
///   over: back to JOB_STATE_PENDING (capacity again), then RUNNING for a full `jobRun`; the job
///   never reaches a failed state and nothing is left for the caller to do.
/// * Without it the job ends JOB_STATE_FAILED with a STOCKOUT error: "When Spot VMs are
///   preempted, the ... job fails with a STOCKOUT error" (https://cloud.google.com/vertex-ai/docs/predictions/use-spot-vms,
///   "Preemption handling"; the training page, https://cloud.google.com/vertex-ai/docs/training/use-spot-vms,
///   describes the same preemption handling). The `google.rpc` code for it is not documented:
///   RESOURCE_EXHAUSTED (8), the code of every other capacity error, with `STOCKOUT` in the
///   message (docs/reliability.md, "Not verified against real GCP").
///
/// Jobs that are not Spot (`scheduling.strategy` SPOT) cannot be preempted: FAILED_PRECONDITION.
pub fn preempt(w: &mut Cloud, vx: &mut Vertex, name: &str) -> ApiResult<()> {
    let key = vx
        .jobs
        .keys()
        .find(|k| k.as_str() == name || k.rsplit('/').next() == Some(name))
        .cloned()
        .ok_or_else(|| not_found(name))?;
    let now = w.now;
    let d = w.cfg.durations.clone();
    let j = vx.jobs.get(&key).ok_or_else(|| not_found(name))?;
    let scheduling = &j.body["jobSpec"]["scheduling"];
    let spot = scheduling["strategy"] == json!("SPOT") || scheduling["strategy"] == json!(4);
    if !spot {
        return Err(ApiError::precondition(format!(
            "custom job {key} does not run on Spot VMs (scheduling.strategy is not SPOT)"
        )));
    }
    if !matches!(j.state(), "JOB_STATE_PENDING" | "JOB_STATE_RUNNING") {
        return Err(ApiError::precondition(format!(
            "custom job {key} is {}: only a provisioning or running job can be preempted",
            j.state()
        )));
    }
    let restart = scheduling["restartJobOnWorkerRestart"].as_bool().unwrap_or(false);
    let t = w.schedule(
        Cloud::add(
            now,
            if restart {
                d.job_pending
            } else {
                std::time::Duration::ZERO
            },
        ),
        TimerKind::Job,
        &key,
    );
    let j = vx.jobs.get_mut(&key).ok_or_else(|| not_found(name))?;
    j.body["updateTime"] = json!(ts(now));
    if restart {
        // The whole job starts over: provisioning again, then a full run.
        j.set_state("JOB_STATE_PENDING");
        j.timer = Some(t);
    } else {
        j.timer = None;
        j.set_state("JOB_STATE_FAILED");
        j.body["endTime"] = json!(ts(now));
        j.body["error"] = ApiError::new(
            Code::ResourceExhausted,
            "STOCKOUT: the job's Spot VMs were preempted (reclaimed by Compute Engine). (simulated by gcp-emulator)",
        )
        .rpc_status();
    }
    Ok(())
}
