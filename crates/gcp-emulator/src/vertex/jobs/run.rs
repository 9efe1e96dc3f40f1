//! A job's run: the timer that moves it QUEUED -> PENDING -> RUNNING -> done, its wait for
//! capacity, its timeout, checkpoints and logs.

use super::*;

/// `jobSpec.scheduling.timeout`, or Vertex's default of 7 days.
fn timeout(job: &Value) -> std::time::Duration {
    job["jobSpec"]["scheduling"]["timeout"]
        .as_str()
        .and_then(crate::wire::time::parse_duration)
        .and_then(|d| d.to_std().ok())
        .unwrap_or(std::time::Duration::from_secs(7 * 24 * 3600))
}

/// When a RUNNING job's simulated run ends: `startTime` + the shorter of `jobRun` and
/// `scheduling.timeout`.
fn run_end(job: &Value, job_run: std::time::Duration) -> Option<chrono::DateTime<chrono::Utc>> {
    let start = job["startTime"].as_str().and_then(crate::wire::time::parse_ts)?;
    Some(Cloud::add(start, job_run.min(timeout(job))))
}

fn run_ends_after(job: &Value, job_run: std::time::Duration, now: chrono::DateTime<chrono::Utc>) -> bool {
    run_end(job, job_run).is_some_and(|end| end > now)
}

/// Where a job's simulated training checkpoints: the `CHECKPOINT_DIR` in the first worker pool's
/// environment (the operator sets it), else Vertex's own `AIP_CHECKPOINT_DIR`, which is
/// `<baseOutputDirectory>/checkpoints/` ("AIP_CHECKPOINT_DIR = <base_output_directory>/checkpoints/",
/// aiplatform v1 `CustomJobSpec.baseOutputDirectory`,
/// https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec). `None` without either.
fn job_checkpoint_dir(job: &Value) -> Option<String> {
    let pool = &job["jobSpec"]["workerPoolSpecs"][0];
    let env = pool["containerSpec"]["env"]
        .as_array()
        .or_else(|| pool["pythonPackageSpec"]["env"].as_array());
    let from_env = env
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "CHECKPOINT_DIR")
        .and_then(|e| e["value"].as_str())
        .map(str::to_string);
    let dir = from_env.or_else(|| {
        job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
            .as_str()
            .map(|p| format!("{}/checkpoints/", p.trim_end_matches('/')))
    })?;
    if !dir.starts_with("gs://") {
        return None;
    }
    Some(if dir.ends_with('/') {
        dir
    } else {
        format!("{dir}/")
    })
}

/// The message a [`crate::faults::Fault::FailJob`] gave for this job (named by its full name or id).
fn failure_message(w: &Cloud, name: &str) -> Option<String> {
    w.faults
        .messages
        .get(name)
        .or_else(|| name.rsplit('/').next().and_then(|id| w.faults.messages.get(id)))
        .cloned()
}

/// A PENDING job whose location has no training capacity waits on; returns when to look again
/// (`None`: it expired).
fn wait_for_capacity(
    j: &mut JobRec,
    job_pending: std::time::Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<std::time::Duration> {
    // Issue 21 item 6: FLEX_START waits for capacity at most `maxWaitDuration` ("the
    // maximum duration that a job will wait for the requested resources to be
    // provisioned if the scheduling strategy is set to [Strategy.DWS_FLEX_START]. If set
    // to 0, the job will wait indefinitely. The default is 24 hours.", aiplatform v1
    // `Scheduling.maxWaitDuration`), then it is JOB_STATE_EXPIRED ("The job has
    // expired."). That EXPIRED is the state reached, without an `error`, is the reading
    // chosen (docs/reliability.md, "Not verified against real GCP").
    let scheduling = &j.body["jobSpec"]["scheduling"];
    let flex = scheduling["strategy"] == json!("FLEX_START") || scheduling["strategy"] == json!(6);
    let max_wait = scheduling["maxWaitDuration"]
        .as_str()
        .and_then(crate::wire::time::parse_duration)
        .and_then(|d| d.to_std().ok())
        .unwrap_or(std::time::Duration::from_secs(24 * 3600));
    let created = j.body["createTime"]
        .as_str()
        .and_then(crate::wire::time::parse_ts)
        .unwrap_or(now);
    let expires = Cloud::add(created, max_wait);
    if flex && !max_wait.is_zero() && now >= expires {
        j.set_state("JOB_STATE_EXPIRED");
        j.body["endTime"] = json!(ts(now));
        None
    } else if flex && !max_wait.is_zero() {
        Some(job_pending.min((expires - now).to_std().unwrap_or_default()))
    } else {
        Some(job_pending)
    }
}

/// Ends a RUNNING job's run: FAILED past its `scheduling.timeout` or under a
/// [`crate::faults::Fault::FailJob`], else SUCCEEDED (with its simulated outputs).
fn end_run(
    w: &mut Cloud,
    j: &mut JobRec,
    name: &str,
    job_run: std::time::Duration,
    now: chrono::DateTime<chrono::Utc>,
) {
    let failing = name_matches(&w.faults.failing, name);
    let stamp = ts(now);
    j.body["endTime"] = json!(stamp);
    if j.body.get("startTime").is_none() {
        j.body["startTime"] = json!(stamp);
    }
    let limit = timeout(&j.body);
    if !failing && limit < job_run {
        // Issue 21 item 6: "The maximum job running time. The default is 7 days."
        // (aiplatform v1 `Scheduling.timeout`). What the job looks like afterwards is not
        // documented: FAILED with DEADLINE_EXCEEDED (code 4) and a message naming the
        // limit is the reading chosen (docs/reliability.md, "Not verified against real GCP").
        j.set_state("JOB_STATE_FAILED");
        let msg = format!(
            "The job exceeded its maximum running time (scheduling.timeout {}s) and was stopped. (simulated by gcp-emulator)",
            limit.as_secs()
        );
        job_log(w, name, ERROR, &msg);
        j.body["error"] = ApiError::new(Code::DeadlineExceeded, msg).rpc_status();
    } else if failing {
        j.set_state("JOB_STATE_FAILED");
        let msg = failure_message(w, name).unwrap_or_else(|| {
            "The replica workerpool0-0 exited with a non-zero status of 1. (simulated by gcp-emulator)".into()
        });
        job_log(
            w,
            name,
            ERROR,
            "Traceback (most recent call last): RuntimeError: simulated training failure",
        );
        job_log(w, name, ERROR, &msg);
        j.body["error"] = ApiError::new(Code::Internal, msg).rpc_status();
    } else {
        j.set_state("JOB_STATE_SUCCEEDED");
        job_log(w, name, INFO, "Training finished: the model was saved");
        let body = j.body.clone();
        if w.cfg.simulate_outputs && !name_matches(&w.faults.suppressed_outputs, name) {
            crate::outputs::job_succeeded(w, &body);
        }
    }
}

/// A line of the job's replica, when simulated workloads write outputs.
fn job_log(w: &mut Cloud, name: &str, severity: i32, text: &str) {
    if w.cfg.simulate_outputs {
        crate::logging::workloads::vertex_job(w, name, severity, text);
    }
}

/// PENDING -> RUNNING: logs the start and returns when the run next wakes (its first checkpoint,
/// or its end).
fn start_run(
    w: &mut Cloud,
    j: &mut JobRec,
    name: &str,
    d: &crate::config::Durations,
    stamp: &str,
) -> Option<std::time::Duration> {
    j.set_state("JOB_STATE_RUNNING");
    j.body["startTime"] = json!(stamp);
    web_access(j, name);
    let image = j.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"]
        .as_str()
        .unwrap_or("a Python package")
        .to_string();
    job_log(
        w,
        name,
        INFO,
        &format!("Starting training on replica workerpool0-0 ({image})"),
    );
    // A run longer than `scheduling.timeout` is ended at the timeout (by `fire`); until
    // then it checkpoints every `workloadCheckpoint` when it has a checkpoint directory.
    let run = d.job_run.min(timeout(&j.body));
    let every = d.workload_checkpoint;
    if every.is_zero() || job_checkpoint_dir(&j.body).is_none() {
        Some(run)
    } else {
        Some(every.min(run))
    }
}

/// `enableWebAccess`: one interactive-shell URI per replica of every worker pool, keyed
/// `workerpool{pool}-{replica}` ("Output only. URIs for accessing interactive shells (one URI
/// for each training node). Only available if job_spec.enable_web_access is true", aiplatform v1
/// `CustomJob.webAccessUris`), shaped like the URIs of
/// <https://cloud.google.com/vertex-ai/docs/training/monitor-debug-interactive-shell>
/// (`https://<id>-dot-<region>.aiplatform-training.googleusercontent.com`).
fn web_access(j: &mut JobRec, name: &str) {
    if j.body["jobSpec"]["enableWebAccess"] != json!(true) {
        return;
    }
    let region = name.split('/').nth(3).unwrap_or("us-central1").to_string();
    let id = name.rsplit('/').next().unwrap_or_default().to_string();
    let pools = j.body["jobSpec"]["workerPoolSpecs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut uris = serde_json::Map::new();
    for (pool, spec) in pools.iter().enumerate() {
        let replicas = spec["replicaCount"]
            .as_str()
            .and_then(|n| n.parse::<u64>().ok())
            .or_else(|| spec["replicaCount"].as_u64())
            .unwrap_or(1);
        for replica in 0..replicas {
            let host = format!("{id}{pool}{replica}");
            uris.insert(
                format!("workerpool{pool}-{replica}"),
                json!(format!(
                    "https://{host}-dot-{region}.aiplatform-training.googleusercontent.com"
                )),
            );
        }
    }
    j.body["webAccessUris"] = serde_json::Value::Object(uris);
}

/// The simulated training's checkpoint under `dir`, with its log line (unless outputs are off or
/// suppressed for this job).
fn save_checkpoint(w: &mut Cloud, name: &str, dir: &str) {
    if w.cfg.simulate_outputs
        && !name_matches(&w.faults.suppressed_outputs, name)
        && let Some(step) = crate::outputs::write_checkpoint_to(w, dir)
    {
        job_log(
            w,
            name,
            INFO,
            &format!("step {step}: checkpoint saved to {dir}{step}/"),
        );
    }
}

pub fn fire(w: &mut Cloud, vx: &mut Vertex, seq: u64, name: &str) {
    let now = w.now;
    let d = w.cfg.durations.clone();
    // `projects/{n}/locations/{location}/customJobs/{id}`
    let no_capacity = name
        .split('/')
        .nth(3)
        .is_some_and(|l| w.faults.vertex_stockouts.contains(l));
    let Some(j) = vx.jobs.get_mut(name) else { return };
    if j.timer != Some(seq) {
        return;
    }
    j.timer = None;
    let mut checkpoint: Option<String> = None;
    let stamp = ts(now);
    j.body["updateTime"] = json!(stamp);
    let next = match j.state().to_string().as_str() {
        "JOB_STATE_QUEUED" => {
            j.set_state("JOB_STATE_PENDING");
            Some(d.job_pending)
        }
        "JOB_STATE_PENDING" if no_capacity => wait_for_capacity(j, d.job_pending, now),
        "JOB_STATE_PENDING" => start_run(w, j, name, &d, &stamp),
        "JOB_STATE_RUNNING" if run_ends_after(&j.body, d.job_run, now) => {
            // Still running: the simulated training writes a checkpoint (below) and runs on.
            let end = run_end(&j.body, d.job_run).unwrap_or(now);
            let every = d.workload_checkpoint;
            checkpoint = (!every.is_zero()).then(|| job_checkpoint_dir(&j.body)).flatten();
            let to_end = (end - now).to_std().unwrap_or_default();
            Some(if every.is_zero() {
                to_end
            } else {
                every.min(to_end)
            })
        }
        "JOB_STATE_RUNNING" => {
            end_run(w, j, name, d.job_run, now);
            None
        }
        "JOB_STATE_CANCELLING" => {
            job_log(w, name, INFO, "Training stopped: the job was cancelled");
            j.set_state("JOB_STATE_CANCELLED");
            j.body["endTime"] = json!(stamp);
            j.body["error"] = json!({"code": 1, "message": "CANCELED"});
            None
        }
        _ => None,
    };
    if let Some(dir) = checkpoint {
        save_checkpoint(w, name, &dir);
    }
    if let Some(after) = next {
        let t = w.schedule(Cloud::add(now, after), TimerKind::Job, name);
        if let Some(j) = vx.jobs.get_mut(name) {
            j.timer = Some(t);
        }
    }
}
