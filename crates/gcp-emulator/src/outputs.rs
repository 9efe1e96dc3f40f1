//! Simulated workload outputs, following the team's conventions exactly:
//! * Dataproc batch SUCCEEDED: `_SUCCESS` and `part-00000` under runtime property
//!   `spark.tpuoperator.outputUri` if present, else under the LAST `gs://` argument of the batch.
//! * Vertex custom job SUCCEEDED: `model/saved_model.pb` under
//!   `jobSpec.baseOutputDirectory.outputUriPrefix` (Vertex's AIP_MODEL_DIR = `<prefix>/model/`).
//! * TPU VM workload: `<tpu-operator-done-uri>_SUCCESS`, or `<done-uri>_FAILED` holding the exit
//!   code, written by plain concatenation like the operator's startup script does.

use crate::storage::{parse_gs, put_object};
use crate::world::World;
use bytes::Bytes;
use serde_json::Value;

pub const OUTPUT_PROPERTY: &str = "spark.tpuoperator.outputUri";

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

fn write(w: &mut World, uri: &str, data: &'static [u8], content_type: &str) {
    if let Some((bucket, name)) = parse_gs(uri) {
        put_object(w, &bucket, &name, Bytes::from_static(data), content_type, None);
    }
}

pub fn batch_succeeded(w: &mut World, batch: &Value) {
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

pub fn job_succeeded(w: &mut World, job: &Value) {
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

pub fn tpu_workload_done(w: &mut World, done_uri: &str, failed: bool) {
    if failed {
        write(w, &format!("{done_uri}_FAILED"), b"1", "text/plain");
    } else {
        write(w, &format!("{done_uri}_SUCCESS"), b"", "application/octet-stream");
    }
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
