//! Seeding the emulated Cloud Storage with the inputs the manifests declare.
//!
//! In a real project the raw data is already in its bucket; in the empty emulated cloud it is
//! not, and the controllers rightly refuse to start a batch whose declared inputs are missing.
//! `local` shows the happy path, so it writes one small sample object under every declared
//! input (PreprocessBatch `spec.inputs`, TrainingPipeline `spec.preprocess.inputs` and
//! `spec.artifacts.rawData`) before applying.

use serde_json::Value;

use super::apply::Manifest;

/// The `gs://` inputs a manifest declares.
pub fn declared_inputs(manifest: &Manifest) -> Vec<String> {
    let spec = &manifest.object.data["spec"];
    let pointers: &[&str] = match manifest.gvk.kind.as_str() {
        "PreprocessBatch" => &["/inputs"],
        "TrainingPipeline" => &["/preprocess/inputs", "/artifacts/rawData"],
        _ => &[],
    };
    let mut out = Vec::new();
    for pointer in pointers {
        match spec.pointer(pointer) {
            Some(Value::String(uri)) => out.push(uri.clone()),
            Some(Value::Array(uris)) => out.extend(uris.iter().filter_map(Value::as_str).map(str::to_owned)),
            _ => {}
        }
    }
    out.retain(|uri| uri.starts_with("gs://"));
    out
}

/// Bucket and object name for a sample under `uri`: a prefix (`gs://b/raw/`) gets
/// `raw/sample-00000.txt`, an object URI is written as is.
pub fn sample_object(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("gs://")?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return None;
    }
    let name = if path.is_empty() || path.ends_with('/') {
        format!("{path}sample-00000.txt")
    } else {
        path.to_string()
    };
    Some((bucket.to_string(), name))
}

/// Writes the samples; returns how many inputs were seeded.
pub fn seed_inputs(gcp: &gcp_emulator::Emulator, manifests: &[Manifest]) -> usize {
    let mut seeded = 0;
    for uri in manifests.iter().flat_map(declared_inputs) {
        if let Some((bucket, name)) = sample_object(&uri) {
            gcp.put_object(
                &bucket,
                &name,
                "sample input written by tpu-operator local\n",
                "text/plain",
            );
            seeded += 1;
        }
    }
    seeded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_go_under_prefixes_or_at_object_uris() {
        assert_eq!(
            sample_object("gs://data/raw/corpus/"),
            Some(("data".into(), "raw/corpus/sample-00000.txt".into()))
        );
        assert_eq!(
            sample_object("gs://data/raw/file.jsonl"),
            Some(("data".into(), "raw/file.jsonl".into()))
        );
        assert_eq!(
            sample_object("gs://data"),
            Some(("data".into(), "sample-00000.txt".into()))
        );
        assert_eq!(sample_object("s3://nope/x"), None);
    }
}
