//! The Cloud Storage object store: buckets, objects and the metadata real GCS gives them. It sits
//! below the services because more than Cloud Storage writes into it: the simulated workloads of
//! TPU nodes, Compute Engine VMs, Dataproc batches and Vertex jobs leave their outputs and
//! checkpoints here (`outputs.rs`). The `storage` service serves it over the JSON API.

pub mod hash;

use crate::wire::time::ts;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use hash::{base64, crc32c, md5};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the object store needs from the cloud it sits in: the emulated time, fresh sequence
/// numbers (generations), project numbers, and the buckets themselves. `Cloud` provides it; the
/// store does not name `Cloud`, so it stays below it.
pub trait Host {
    fn now(&self) -> DateTime<Utc>;
    fn next_seq(&mut self) -> u64;
    fn project_number(&mut self, project: &str) -> u64;
    fn buckets(&mut self) -> &mut BTreeMap<String, Bucket>;
}

#[derive(Clone, Debug)]
pub struct Object {
    pub meta: Value,
    pub data: Bytes,
}

#[derive(Clone, Debug)]
pub struct Bucket {
    pub meta: Value,
    pub objects: BTreeMap<String, Object>,
}

pub fn bucket_meta(w: &mut impl Host, name: &str, project: &str, req: &Value) -> Value {
    let now = ts(w.now());
    let number = w.project_number(project);
    let generation = (w.now().timestamp_micros().max(0) as u64 / 100 + w.next_seq() % 100).to_string();
    let ubla = req["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"]
        .as_bool()
        .unwrap_or(false);
    let mut iam = json!({"publicAccessPrevention": "inherited"});
    if ubla {
        iam["uniformBucketLevelAccess"] = json!({"enabled": true, "lockedTime": now});
        iam["bucketPolicyOnly"] = json!({"enabled": true, "lockedTime": now});
    } else {
        iam["uniformBucketLevelAccess"] = json!({"enabled": false});
        iam["bucketPolicyOnly"] = json!({"enabled": false});
    }
    let location = req["location"].as_str().unwrap_or("US").to_uppercase();
    let mut m = json!({
        "kind": "storage#bucket",
        "id": name,
        "selfLink": format!("https://www.googleapis.com/storage/v1/b/{name}"),
        "projectNumber": number.to_string(),
        "name": name,
        "timeCreated": now,
        "updated": now,
        "metageneration": "1",
        "generation": generation,
        "iamConfiguration": iam,
        "softDeletePolicy": {"retentionDurationSeconds": "604800", "effectiveTime": now},
        "location": location,
        "locationType": if location == "US" || location == "EU" || location == "ASIA" { "multi-region" } else { "region" },
        "storageClass": req["storageClass"].as_str().unwrap_or("STANDARD"),
        "etag": "CAE=",
    });
    if m["locationType"] == "multi-region" {
        // Replication settings only exist for multi/dual-region buckets (golden logs).
        m["rpo"] = json!("DEFAULT");
    } else {
        // Single-region buckets report zone isolation (golden logs).
        m["satisfiesPZI"] = json!(true);
    }
    if let Some(h) = req.get("hierarchicalNamespace") {
        m["hierarchicalNamespace"] = h.clone();
    }
    if let Some(l) = req.get("labels") {
        m["labels"] = l.clone();
    }
    m
}

pub fn object_meta(
    w: &mut impl Host,
    bucket: &str,
    name: &str,
    data: &[u8],
    content_type: &str,
    metadata: Option<Value>,
) -> Value {
    let generation = (w.now().timestamp_micros().max(0) as u64 * 1000 + w.next_seq() % 1000).to_string();
    let enc = urlencoding::encode(name);
    let now = ts(w.now());
    let mut m = json!({
        "kind": "storage#object",
        "id": format!("{bucket}/{name}/{generation}"),
        "selfLink": format!("https://www.googleapis.com/storage/v1/b/{bucket}/o/{enc}"),
        "mediaLink": format!("https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{enc}?generation={generation}&alt=media"),
        "name": name,
        "bucket": bucket,
        "generation": generation,
        "metageneration": "1",
        "contentType": content_type,
        "storageClass": "STANDARD",
        "size": data.len().to_string(),
        "md5Hash": base64(&md5(data)),
        "crc32c": base64(&crc32c(data)),
        "etag": base64(&md5(generation.as_bytes())[..8]),
        "timeCreated": now,
        "updated": now,
        "timeStorageClassUpdated": now,
    });
    if let Some(md) = metadata.filter(|v| v.as_object().is_some_and(|o| !o.is_empty())) {
        m["metadata"] = md;
    }
    m
}

/// Splits `gs://bucket/path` into (bucket, path).
pub fn parse_gs(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("gs://")?;
    let (b, p) = rest.split_once('/').unwrap_or((rest, ""));
    (!b.is_empty()).then(|| (b.to_string(), p.to_string()))
}

/// Writes an object (creating the bucket if needed); used by uploads and simulated workloads.
pub fn put_object(
    w: &mut impl Host,
    bucket: &str,
    name: &str,
    data: Bytes,
    content_type: &str,
    metadata: Option<Value>,
) -> Value {
    if !w.buckets().contains_key(bucket) {
        let meta = bucket_meta(w, bucket, "emulator", &serde_json::json!({}));
        w.buckets().insert(
            bucket.to_string(),
            Bucket {
                meta,
                objects: BTreeMap::new(),
            },
        );
    }
    let meta = object_meta(w, bucket, name, &data, content_type, metadata);
    let b = w.buckets().get_mut(bucket).expect("created above");
    b.objects.insert(
        name.to_string(),
        Object {
            meta: meta.clone(),
            data,
        },
    );
    meta
}
