//! Simulated workload outputs, following the team's conventions exactly:
//! * Dataproc batch SUCCEEDED: `_SUCCESS` and `part-00000` under runtime property
//!   `spark.tpuoperator.outputUri` if present, else under the LAST `gs://` argument of the batch.
//! * Vertex custom job SUCCEEDED: `model/saved_model.pb` under
//!   `jobSpec.baseOutputDirectory.outputUriPrefix` (Vertex's AIP_MODEL_DIR = `<prefix>/model/`).
//! * TPU VM workload: `<tpu-operator-done-uri>_SUCCESS`, or `<done-uri>_FAILED` holding the exit
//!   code, written by plain concatenation like the operator's startup script does.
//! * Checkpoints a running training workload writes (TPU VM nodes, Compute Engine TPU VMs, Vertex
//!   jobs), orbax style, under the `CHECKPOINT_DIR` its startup script passes to the container.
//!
//! These are facts several services share, so they live here, below the services.

use crate::blobs::{parse_gs, put_object};
use crate::cloud::Cloud;
use bytes::Bytes;
use serde_json::Value;

pub const OUTPUT_PROPERTY: &str = "spark.tpuoperator.outputUri";

/// Metadata key the operator sets: where the VM's workload writes `_SUCCESS` / `_FAILED`.
pub const DONE_URI_KEY: &str = "tpu-operator-done-uri";

/// Metadata key the operator sets to a new value (an RFC 3339 time) to ask the workload for a
/// checkpoint now; only a startup script that watches it (names it) can honour it.
pub const CHECKPOINT_REQUEST_KEY: &str = "tpu-operator-checkpoint-request";

fn join(prefix: &str, leaf: &str) -> String {
    if prefix.is_empty() || prefix.ends_with('/') {
        format!("{prefix}{leaf}")
    } else {
        format!("{prefix}/{leaf}")
    }
}

/// The output prefix a batch declares (property first, then its last `gs://` argument).
pub fn batch_output_uri(batch: &Value) -> Option<String> {
    let props = &batch["runtimeConfig"]["properties"];
    if let Some(u) = props[OUTPUT_PROPERTY]
        .as_str()
        .or_else(|| props[format!("spark:{OUTPUT_PROPERTY}")].as_str())
    {
        return Some(u.to_string());
    }
    [
        "pysparkBatch",
        "sparkBatch",
        "sparkRBatch",
        "pysparkNotebookBatch",
    ]
    .iter()
    .filter_map(|k| batch[*k]["args"].as_array())
    .flatten()
    .filter_map(Value::as_str)
    .rfind(|a| a.starts_with("gs://"))
    .map(str::to_string)
}

fn write(w: &mut Cloud, uri: &str, data: &'static [u8], content_type: &str) {
    if let Some((bucket, name)) = parse_gs(uri) {
        put_object(w, &bucket, &name, Bytes::from_static(data), content_type, None);
    }
}

pub fn batch_succeeded(w: &mut Cloud, batch: &Value) {
    if let Some(prefix) = batch_output_uri(batch) {
        write(w, &join(&prefix, "_SUCCESS"), b"", "application/octet-stream");
        write(
            w,
            &join(&prefix, "part-00000"),
            b"simulated output row written by gcp-emulator\n",
            "text/plain",
        );
    }
}

pub fn job_succeeded(w: &mut Cloud, job: &Value) {
    if let Some(prefix) = job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].as_str() {
        let prefix = prefix.to_string();
        write(
            w,
            &join(&join(&prefix, "model/"), "saved_model.pb"),
            b"simulated saved_model.pb (gcp-emulator)",
            "application/octet-stream",
        );
    }
}

/// The workload's end: `_SUCCESS`, or `_FAILED` holding the exit code (`failed`).
pub fn tpu_workload_done(w: &mut Cloud, done_uri: &str, failed: Option<i32>) {
    if let Some(code) = failed {
        if let Some((bucket, name)) = parse_gs(&format!("{done_uri}_FAILED")) {
            put_object(
                w,
                &bucket,
                &name,
                Bytes::from(code.to_string()),
                "text/plain",
                None,
            );
        }
    } else {
        write(w, &format!("{done_uri}_SUCCESS"), b"", "application/octet-stream");
    }
}

/// The `CHECKPOINT_DIR` a startup script passes to its container (TPU nodes and Compute Engine
/// instances run the same script).
pub fn checkpoint_dir_in(script: &str) -> Option<String> {
    let start = script.find("-e 'CHECKPOINT_DIR=")? + "-e 'CHECKPOINT_DIR=".len();
    let value = &script[start..];
    let value = &value[..value.find('\'')?];
    let mut dir = value.to_string();
    if !dir.starts_with("gs://") {
        return None;
    }
    if !dir.ends_with('/') {
        dir.push('/');
    }
    Some(dir)
}

/// Steps the simulated training runs between two checkpoints.
pub const STEPS_PER_CHECKPOINT: u64 = 100;

/// The newest step already under `dir` (orbax layout `<dir>/<step>/…`): where a restarted
/// workload resumes.
fn newest_step(w: &Cloud, bucket: &str, prefix: &str) -> u64 {
    let Some(b) = w.buckets.get(bucket) else { return 0 };
    b.objects
        .range(prefix.to_string()..)
        .take_while(|(k, _)| k.starts_with(prefix))
        .filter_map(|(k, _)| k[prefix.len()..].split('/').next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// A simulated training workload writes one checkpoint the way orbax does on Cloud Storage: the
/// step's directory `<dir>/<step>/` with its state and, last, the `_CHECKPOINT_METADATA` file
/// that marks it complete. The step continues from the newest checkpoint already in `dir` (a
/// `gs://` prefix ending in `/`), as a training loop restored from it would, so a workload
/// recreated after a preemption resumes. Used by TPU VM workloads and Vertex jobs.
/// Returns the step written.
pub fn write_checkpoint_to(w: &mut Cloud, dir: &str) -> Option<u64> {
    let (bucket, prefix) = parse_gs(dir)?;
    let step = newest_step(w, &bucket, &prefix) + STEPS_PER_CHECKPOINT;
    write_checkpoint_at(w, dir, step).then_some(step)
}

/// The newest complete checkpoint under `dir`: the highest `<step>` with its
/// `<dir>/<step>/_CHECKPOINT_METADATA` (orbax writes it last); 0 when there is none.
pub fn committed_step(w: &Cloud, dir: &str) -> u64 {
    let Some((bucket, prefix)) = parse_gs(dir) else {
        return 0;
    };
    let Some(b) = w.buckets.get(&bucket) else { return 0 };
    b.objects
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .filter_map(|(k, _)| {
            let (step, leaf) = k[prefix.len()..].split_once('/')?;
            (leaf == "_CHECKPOINT_METADATA").then(|| step.parse::<u64>().ok())?
        })
        .max()
        .unwrap_or(0)
}

/// Writes the checkpoint of `step` under `dir` (orbax layout, as [`write_checkpoint_to`]);
/// `false` when `dir` is not a `gs://` prefix or that step is already complete there.
pub fn write_checkpoint_at(w: &mut Cloud, dir: &str, step: u64) -> bool {
    let Some((bucket, prefix)) = parse_gs(dir) else {
        return false;
    };
    let done = format!("{prefix}{step}/_CHECKPOINT_METADATA");
    if w.buckets
        .get(&bucket)
        .is_some_and(|b| b.objects.contains_key(&done))
    {
        return false;
    }
    for (leaf, data) in [
        (
            "state/checkpoint",
            format!("simulated train state at step {step} (gcp-emulator)"),
        ),
        ("_CHECKPOINT_METADATA", format!("{{\"step\": {step}}}")),
    ] {
        let object = format!("{prefix}{step}/{leaf}");
        put_object(
            w,
            &bucket,
            &object,
            Bytes::from(data),
            "application/octet-stream",
            None,
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn batch_output_prefers_property_then_last_gs_arg() {
        let b = json!({"pysparkBatch": {"args": ["gs://b/in/", "--x", "gs://b/out/"]}});
        assert_eq!(batch_output_uri(&b).as_deref(), Some("gs://b/out/"));
        let b = json!({"pysparkBatch": {"args": ["gs://b/out/"]},
                       "runtimeConfig": {"properties": {"spark.tpuoperator.outputUri": "gs://b/declared/"}}});
        assert_eq!(batch_output_uri(&b).as_deref(), Some("gs://b/declared/"));
        assert_eq!(batch_output_uri(&json!({"sparkSqlBatch": {}})), None);
        assert_eq!(join("gs://b/p", "_SUCCESS"), "gs://b/p/_SUCCESS");
    }
}
