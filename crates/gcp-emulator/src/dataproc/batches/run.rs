//! A batch's run: the timer that moves it PENDING -> RUNNING -> done, cancellation through its
//! operation, and the fault that fails it now.

use super::*;

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
pub(super) fn ttl(batch: &Value) -> std::time::Duration {
    batch["environmentConfig"]["executionConfig"]["ttl"]
        .as_str()
        .and_then(crate::wire::time::parse_duration)
        .and_then(|d| d.to_std().ok())
        .unwrap_or(std::time::Duration::from_secs(4 * 3600))
}

/// A line of the batch's driver log (when outputs are simulated).
fn batch_log(w: &mut Cloud, name: &str, uuid: &str, severity: i32, text: &str) {
    if w.cfg.simulate_outputs {
        crate::logging::workloads::dataproc_batch(w, name, uuid, severity, text);
    }
}

/// The batch's `approximateUsage` for the time it has run.
fn record_usage(b: &mut BatchRec, now: chrono::DateTime<chrono::Utc>) {
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
}

/// RUNNING -> done: FAILED past its ttl, FAILED by fault (`failure` holds the message), else
/// SUCCEEDED.
fn finish_run(
    w: &mut Cloud,
    dp: &mut Dataproc,
    name: &str,
    now: chrono::DateTime<chrono::Utc>,
    batch_run: std::time::Duration,
    failure: Option<String>,
) {
    use crate::logging::workloads::{ERROR, INFO};
    let Some(b) = dp.batches.get_mut(name) else { return };
    let uuid = b.body["uuid"].as_str().unwrap_or_default().to_string();
    let id = name.rsplit('/').next().unwrap_or_default().to_string();
    record_usage(b, now);
    let limit = ttl(&b.body);
    if failure.is_none() && limit < batch_run {
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
        batch_log(w, name, &uuid, ERROR, &msg);
        finish(w, dp, name, false);
        return;
    }
    let succeeded = failure.is_none();
    if let Some(msg) = failure {
        move_to(b, "FAILED", Some(&msg), now);
        batch_log(w, name, &uuid, ERROR, &msg);
    } else {
        move_to(b, "SUCCEEDED", None, now);
        batch_log(
            w,
            name,
            &uuid,
            INFO,
            &format!("Batch {id} finished: the Spark job wrote its output"),
        );
    }
    finish(w, dp, name, succeeded);
}

pub fn fire(w: &mut Cloud, dp: &mut Dataproc, seq: u64, name: &str) {
    use crate::logging::workloads::INFO;
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
            // A run longer than the batch's ttl is ended at the ttl (by `finish_run`).
            let run = d.batch_run.min(ttl(&b.body));
            let t = w.schedule(Cloud::add(now, run), TimerKind::Batch, name);
            if let Some(b) = dp.batches.get_mut(name) {
                b.timer = Some(t);
            }
        }
        "RUNNING" => {
            let failure = failing.then(|| {
                message.unwrap_or_else(|| {
                    "Job failed with message [Simulated failure injected by gcp-emulator]".into()
                })
            });
            finish_run(w, dp, name, now, d.batch_run, failure);
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
