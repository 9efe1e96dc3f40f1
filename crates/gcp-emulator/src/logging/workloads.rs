//! The log lines simulated workloads write, with the monitored resources and log names real ones
//! use, so `tpu-operator logs` and the Console links find them the same way:
//! * a Vertex AI custom job: resource `ml_job` (labels `job_id`, `project_id`, `task_name`),
//!   log `workerpool0-0` (the replica that writes it);
//! * a Dataproc Serverless batch: resource `cloud_dataproc_batch` (labels `batch_id`,
//!   `batch_uuid`, `location`, `project_id`), the driver's output in log
//!   `dataproc.googleapis.com%2Foutput`;
//! * a TPU VM (or Compute Engine) workload container: what docker's `gcplogs` driver writes
//!   (moby `daemon/logger/gcplogs/gcplogging.go`): log `gcplogs-docker-driver`, resource
//!   `gce_instance` (`instance_id`, `zone`), `jsonPayload {instance, container {name,
//!   imageName, metadata}, message}`, where `metadata` holds the container labels the
//!   `--log-opt labels=` option lists. Only a startup script that runs the container with
//!   `--log-driver=gcplogs` gets these lines: the emulator reads the script as docker would.

use std::collections::BTreeMap;

use serde_json::json;

use super::store::{NewEntry, Payload};
use crate::cloud::Cloud;

/// `INFO` and `ERROR` (`google/logging/type/log_severity.proto`).
pub const INFO: i32 = 200;
pub const ERROR: i32 = 500;

fn write(w: &mut Cloud, project: &str, entry: NewEntry) {
    let number = w.cfg.project_number(project);
    let now = w.now;
    w.logs.push(entry, number, now);
}

/// `projects/{p}/locations/{l}/{collection}/{id}` (or Compute Engine's `zones/{l}`) → (p, l, id).
fn parts(name: &str) -> Option<(&str, &str, &str)> {
    let s: Vec<&str> = name.split('/').collect();
    match s.as_slice() {
        ["projects", p, "locations" | "zones", l, _, id] => Some((p, l, id)),
        _ => None,
    }
}

/// A line of a custom job's replica `workerpool0-0`.
pub fn vertex_job(w: &mut Cloud, job: &str, severity: i32, text: &str) {
    let Some((project, _, id)) = parts(job) else {
        return;
    };
    let (project, id) = (project.to_string(), id.to_string());
    let entry = NewEntry {
        log_name: format!("projects/{project}/logs/workerpool0-0"),
        resource_type: "ml_job".into(),
        resource_labels: BTreeMap::from([
            ("job_id".into(), id),
            ("project_id".into(), project.clone()),
            ("task_name".into(), "workerpool0-0".into()),
        ]),
        labels: BTreeMap::new(),
        severity,
        payload: Payload::Text(text.to_string()),
        timestamp: None,
    };
    write(w, &project, entry);
}

/// A line of a batch's Spark driver output.
pub fn dataproc_batch(w: &mut Cloud, batch: &str, uuid: &str, severity: i32, text: &str) {
    let Some((project, location, id)) = parts(batch) else {
        return;
    };
    let (project, location, id) = (project.to_string(), location.to_string(), id.to_string());
    let entry = NewEntry {
        log_name: format!("projects/{project}/logs/dataproc.googleapis.com%2Foutput"),
        resource_type: "cloud_dataproc_batch".into(),
        resource_labels: BTreeMap::from([
            ("batch_id".into(), id),
            ("batch_uuid".into(), uuid.to_string()),
            ("location".into(), location),
            ("project_id".into(), project.clone()),
        ]),
        labels: BTreeMap::new(),
        severity,
        payload: Payload::Text(text.to_string()),
        timestamp: None,
    };
    write(w, &project, entry);
}

/// The last lines a simulated training container prints: a finished run, or (exit code `failed`)
/// a Python traceback ending in the error (`error`, else a simulated `RuntimeError`).
pub fn exit_lines(failed: Option<i32>, error: Option<&str>) -> Vec<(i32, String)> {
    match failed {
        None => vec![(INFO, "Training finished: the model was saved".into())],
        Some(code) => vec![
            (ERROR, "Traceback (most recent call last):".into()),
            (ERROR, "  File \"/app/train.py\", line 42, in <module>".into()),
            (
                ERROR,
                error.map_or_else(
                    || {
                        format!(
                            "RuntimeError: simulated training failure (the container exits with code {code})"
                        )
                    },
                    str::to_string,
                ),
            ),
        ],
    }
}

/// How a startup script runs its container's logs: the container labels docker's `gcplogs`
/// driver copies into each entry (`--label K=V` for the keys `--log-opt labels=` lists), with
/// `${WORKER:-0}` left for [`workload`] to fill in per host. `None` when the script does not
/// use the `gcplogs` driver (its container's output stays on the VM).
pub fn gcplogs_labels(script: &str) -> Option<BTreeMap<String, String>> {
    if !script.contains("--log-driver=gcplogs") {
        return None;
    }
    let listed: Vec<&str> = script
        .split("--log-opt labels=")
        .nth(1)
        .map(|rest| rest.split_whitespace().next().unwrap_or("").split(',').collect())
        .unwrap_or_default();
    let mut labels = BTreeMap::new();
    for part in script.split("--label ").skip(1) {
        let word = part.split_whitespace().next().unwrap_or("");
        let word = word.trim_matches(|c| c == '\'' || c == '"');
        if let Some((k, v)) = word.split_once('=')
            && listed.contains(&k)
        {
            labels.insert(k.to_string(), v.to_string());
        }
    }
    Some(labels)
}

/// A line of the workload container on each of `hosts` hosts of node (or instance group)
/// `node` in `zone`, when its startup `script` logs through `gcplogs`.
pub fn workload(w: &mut Cloud, node: &str, script: &str, hosts: usize, severity: i32, text: &str) {
    let Some(labels) = gcplogs_labels(script) else {
        return;
    };
    let Some((project, zone, id)) = parts(node) else {
        return;
    };
    let (project, zone, id) = (project.to_string(), zone.to_string(), id.to_string());
    let image = script
        .split("docker pull ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("")
        .trim_matches('\'')
        .to_string();
    for host in 0..hosts.max(1) {
        let metadata: BTreeMap<&String, String> = labels
            .iter()
            .map(|(k, v)| (k, v.replace("${WORKER:-0}", &host.to_string())))
            .collect();
        let instance = format!("{id}-w-{host}");
        let instance_id = w.cfg.project_number(&instance).to_string();
        let entry = NewEntry {
            log_name: format!("projects/{project}/logs/gcplogs-docker-driver"),
            resource_type: "gce_instance".into(),
            resource_labels: BTreeMap::from([
                ("instance_id".into(), instance_id.clone()),
                ("zone".into(), zone.clone()),
            ]),
            labels: BTreeMap::new(),
            severity,
            payload: Payload::Json(json!({
                "instance": {"zone": zone, "name": instance, "id": instance_id},
                "container": {"name": "/tpu-workload", "imageName": image, "metadata": metadata},
                "message": text,
            })),
            timestamp: None,
        };
        write(w, &project, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_labels_of_a_gcplogs_container_are_kept() {
        let script = "docker run --rm --log-driver=gcplogs \\\n  --log-opt labels=a,host \\\n  \
                      --label 'a=1' --label \"host=${WORKER:-0}\" --label 'b=2' 'img'";
        let labels = gcplogs_labels(script).unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["a"], "1");
        assert_eq!(labels["host"], "${WORKER:-0}");
        assert_eq!(gcplogs_labels("docker run 'img'"), None);
    }
}
