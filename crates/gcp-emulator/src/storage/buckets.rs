//! GCS buckets: insert, get, list, delete (empty only), plus the metadata real GCS returns.

use super::no_bucket;
use crate::api::{Reply, Req};
use crate::blobs::{Bucket, bucket_meta};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult, Code};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn name_ok(n: &str) -> bool {
    (3..=63).contains(&n.len())
        && n.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_.".contains(&c))
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.as_bytes()[n.len() - 1].is_ascii_alphanumeric()
}

/// Creates a bucket (admin API and `buckets.insert`); `Ok(false)` when it already existed.
pub fn create(w: &mut Cloud, name: &str, project: &str, req: &Value) -> ApiResult<bool> {
    if !name_ok(name) {
        return Err(ApiError::gcs(
            Code::InvalidArgument,
            "invalid",
            "Invalid bucket name: '".to_string() + name + "'",
        ));
    }
    if w.buckets.contains_key(name) {
        return Ok(false);
    }
    let meta = bucket_meta(w, name, project, req);
    w.buckets.insert(
        name.to_string(),
        Bucket {
            meta,
            objects: BTreeMap::new(),
        },
    );
    Ok(true)
}

pub fn insert(w: &mut Cloud, req: &Req) -> ApiResult<Reply> {
    let body = req.json()?;
    let project = req
        .query
        .get("project")
        .ok_or_else(|| ApiError::gcs(Code::InvalidArgument, "required", "Required parameter: project"))?;
    let name = body["name"]
        .as_str()
        .ok_or_else(|| ApiError::gcs(Code::InvalidArgument, "required", "Required"))?
        .to_string();
    if !create(w, &name, project, &body)? {
        return Err(ApiError::gcs(
            Code::AlreadyExists,
            "conflict",
            "Your previous request to create the named bucket succeeded and you already own it.",
        ));
    }
    Ok(Reply::json(w.buckets[&name].meta.clone()))
}

pub fn get(w: &Cloud, name: &str) -> ApiResult<Reply> {
    let b = w.buckets.get(name).ok_or_else(no_bucket)?;
    Ok(Reply::json(b.meta.clone()))
}

pub fn list(w: &Cloud, req: &Req) -> ApiResult<Reply> {
    let project = req
        .query
        .get("project")
        .ok_or_else(|| ApiError::gcs(Code::InvalidArgument, "required", "Required parameter: project"))?;
    let number = w.cfg.project_number(project).to_string();
    let items: Vec<Value> = w
        .buckets
        .values()
        .filter(|b| b.meta["projectNumber"].as_str() == Some(number.as_str()))
        .map(|b| b.meta.clone())
        .collect();
    let mut out = json!({"kind": "storage#buckets"});
    if !items.is_empty() {
        out["items"] = Value::Array(items);
    }
    Ok(Reply::json(out))
}

pub fn delete(w: &mut Cloud, name: &str) -> ApiResult<Reply> {
    let b = w.buckets.get(name).ok_or_else(no_bucket)?;
    if !b.objects.is_empty() {
        return Err(ApiError::gcs(
            Code::AlreadyExists,
            "conflict",
            "The bucket you tried to delete is not empty.",
        ));
    }
    w.buckets.remove(name);
    Ok(Reply::no_content())
}
