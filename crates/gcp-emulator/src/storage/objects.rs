//! GCS objects: list (prefix, delimiter, paging, offsets), get (metadata / `alt=media`), insert
//! (`uploadType=media` and `multipart`, `ifGenerationMatch`), delete.

use super::{no_bucket, no_object};
use crate::api::{Body, Reply, Req};
use crate::blobs::hash::base64;
use crate::blobs::{Bucket, put_object};
use crate::cloud::Cloud;
use crate::errors::{ApiError, ApiResult, Code};
use crate::wire::Query;
use bytes::Bytes;
use serde_json::{Map, Value, json};

enum Entry {
    Object(Value),
    Prefix(String),
}

/// `maxResults`, within [1, 1000] (1000 when not given).
fn max_results(q: &Query) -> ApiResult<usize> {
    Ok(match q.get("maxResults") {
        None => 1000,
        Some(v) => v.parse::<usize>().map_err(|_| {
            ApiError::gcs(
                Code::InvalidArgument,
                "invalid",
                format!("Invalid unsigned integer value: '{v}'."),
            )
        })?,
    }
    .clamp(1, 1000))
}

/// The bucket's objects under `prefix` within [`startOffset`, `endOffset`), in name order, with
/// the names past a `delimiter` rolled up into their prefix (the object too when it is that
/// prefix's directory marker and `includeTrailingDelimiter` is set).
fn entries(b: &Bucket, q: &Query) -> Vec<(String, Entry)> {
    let prefix = q.get("prefix").unwrap_or("");
    let delimiter = q.get("delimiter");
    let start = q.get("startOffset");
    let end = q.get("endOffset");
    let trailing = q
        .get("includeTrailingDelimiter")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut entries: Vec<(String, Entry)> = Vec::new();
    for (name, obj) in b
        .objects
        .range(prefix.to_string()..)
        .take_while(|(k, _)| k.starts_with(prefix))
    {
        if start.is_some_and(|s| name.as_str() < s) || end.is_some_and(|e| name.as_str() >= e) {
            continue;
        }
        if let Some(d) = delimiter
            && let Some(pos) = name[prefix.len()..].find(d)
        {
            let p = name[..prefix.len() + pos + d.len()].to_string();
            let is_dir_marker = p == *name;
            if !matches!(entries.last(), Some((k, Entry::Prefix(x))) if *x == p && *k == p) {
                entries.push((p.clone(), Entry::Prefix(p)));
            }
            if !(trailing && is_dir_marker) {
                continue;
            }
        }
        entries.push((name.clone(), Entry::Object(obj.meta.clone())));
    }
    entries
}

/// The key after which to continue (GCS tokens are opaque; ours is base64 of it).
fn page_after(q: &Query) -> ApiResult<Option<String>> {
    Ok(match q.get("pageToken") {
        None => None,
        Some(t) => Some(
            decode_token(t)
                .ok_or_else(|| ApiError::gcs(Code::InvalidArgument, "invalid", "Invalid page token."))?,
        ),
    })
}

/// One page of at most `max` entries after `after`: the objects list body.
fn page(entries: Vec<(String, Entry)>, after: Option<String>, max: usize) -> Value {
    let mut items = Vec::new();
    let mut prefixes = Vec::new();
    let mut last = None;
    let mut more = false;
    for (key, e) in entries
        .into_iter()
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k > a))
    {
        if items.len() + prefixes.len() == max {
            more = true;
            break;
        }
        match e {
            Entry::Object(m) => items.push(m),
            Entry::Prefix(p) => prefixes.push(Value::String(p)),
        }
        last = Some(key);
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("storage#objects"));
    if more && let Some(l) = last {
        out.insert("nextPageToken".into(), json!(base64(l.as_bytes())));
    }
    if !prefixes.is_empty() {
        out.insert("prefixes".into(), Value::Array(prefixes));
    }
    if !items.is_empty() {
        out.insert("items".into(), Value::Array(items));
    }
    Value::Object(out)
}

pub fn list(w: &Cloud, bucket: &str, q: &Query) -> ApiResult<Reply> {
    let b = w.buckets.get(bucket).ok_or_else(no_bucket)?;
    let max = max_results(q)?;
    let entries = entries(b, q);
    let after = page_after(q)?;
    Ok(Reply::json(page(entries, after, max)))
}

fn decode_token(t: &str) -> Option<String> {
    const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in t.trim_end_matches('=').chars() {
        let v = B64.find(c)? as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).ok()
}

pub fn get(w: &Cloud, bucket: &str, name: &str, q: &Query) -> ApiResult<Reply> {
    let b = w.buckets.get(bucket).ok_or_else(no_bucket)?;
    let o = b.objects.get(name).ok_or_else(|| no_object(bucket, name))?;
    if let Some(g) = q.get("generation")
        && o.meta["generation"].as_str() != Some(g)
    {
        return Err(no_object(bucket, name));
    }
    if q.get("alt") == Some("media") {
        let ct = o.meta["contentType"]
            .as_str()
            .unwrap_or("application/octet-stream")
            .to_string();
        return Ok(Reply {
            status: 200,
            body: Body::Raw {
                content_type: ct,
                data: o.data.clone(),
            },
            shape: crate::api::Shape::Plain,
        });
    }
    Ok(Reply::json(o.meta.clone()))
}

pub fn delete(w: &mut Cloud, bucket: &str, name: &str) -> ApiResult<Reply> {
    let b = w.buckets.get_mut(bucket).ok_or_else(no_bucket)?;
    b.objects.remove(name).ok_or_else(|| no_object(bucket, name))?;
    Ok(Reply::no_content())
}

fn precondition(w: &Cloud, bucket: &str, name: &str, q: &Query) -> ApiResult<()> {
    let Some(want) = q
        .pairs()
        .iter()
        .find(|(k, _)| k == "ifGenerationMatch")
        .map(|(_, v)| v.clone())
    else {
        return Ok(());
    };
    let current = w
        .buckets
        .get(bucket)
        .and_then(|b| b.objects.get(name))
        .and_then(|o| o.meta["generation"].as_str().map(str::to_string));
    let ok = match (want.as_str(), current) {
        ("0", None) => true,
        ("0", Some(_)) => false,
        (g, Some(c)) => g == c,
        (_, None) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::gcs(
            Code::FailedPrecondition,
            "conditionNotMet",
            "At least one of the pre-conditions you specified did not hold.",
        ))
    }
}

/// `multipart/related`: a JSON metadata part then the media part.
fn split_multipart(content_type: &str, body: &[u8]) -> ApiResult<(Value, String, Bytes)> {
    let bad = |why: &str| {
        ApiError::gcs(
            Code::InvalidArgument,
            "invalid",
            format!("Invalid multipart request: {why}"),
        )
    };
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"').to_string())
        .ok_or_else(|| bad("no boundary"))?;
    let delim = format!("--{boundary}");
    let text = body;
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(pos) = find(rest, delim.as_bytes()) {
        rest = &rest[pos + delim.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let next = find(rest, delim.as_bytes()).ok_or_else(|| bad("unterminated part"))?;
        parts.push(&rest[..next]);
    }
    if parts.len() < 2 {
        return Err(bad("expected metadata and media parts"));
    }
    let parse_part = |p: &[u8]| -> ApiResult<(String, Bytes)> {
        let p = p.strip_prefix(b"\r\n").unwrap_or(p);
        let sep = find(p, b"\r\n\r\n").ok_or_else(|| bad("part without headers"))?;
        let headers = String::from_utf8_lossy(&p[..sep]).to_string();
        let mut data = &p[sep + 4..];
        data = data.strip_suffix(b"\r\n").unwrap_or(data);
        let ct = headers
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        Ok((ct, Bytes::copy_from_slice(data)))
    };
    let (_, meta) = parse_part(parts[0])?;
    let meta: Value =
        serde_json::from_slice(&meta).map_err(|e| bad(&format!("metadata is not JSON: {e}")))?;
    let (ct, data) = parse_part(parts[1])?;
    Ok((meta, ct, data))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The upload in an insert's request: the object's metadata, content type and data, by
/// `uploadType` (`media`, `multipart`, or none: metadata only, an empty object).
fn upload(req: &Req) -> ApiResult<(Value, String, Bytes)> {
    let header_ct = req
        .content_type
        .clone()
        .unwrap_or_else(|| "application/octet-stream".into());
    Ok(match req.query.get("uploadType") {
        Some("multipart") => {
            let (meta, ct, data) = split_multipart(&header_ct, &req.body)?;
            let ct = meta["contentType"]
                .as_str()
                .map(str::to_string)
                .unwrap_or(if ct.is_empty() {
                    "application/octet-stream".into()
                } else {
                    ct
                });
            (meta, ct, data)
        }
        Some("media") => (json!({}), header_ct, req.body.clone()),
        Some("resumable") => {
            return Err(ApiError::gcs(
                Code::Unimplemented,
                "notImplemented",
                "Resumable uploads are not supported by gcp-emulator; use uploadType=media or multipart.",
            ));
        }
        Some(other) => {
            return Err(ApiError::gcs(
                Code::InvalidArgument,
                "invalid",
                format!("Invalid upload type: {other}"),
            ));
        }
        // Metadata-only insert on /storage/v1/b/{b}/o: an empty object.
        None => {
            let meta: Value = if req.body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&req.body).map_err(|e| {
                    ApiError::gcs(Code::InvalidArgument, "parseError", format!("Parse Error: {e}"))
                })?
            };
            let ct = meta["contentType"]
                .as_str()
                .unwrap_or("application/octet-stream")
                .to_string();
            (meta, ct, Bytes::new())
        }
    })
}

pub fn insert(w: &mut Cloud, bucket: &str, req: &Req) -> ApiResult<Reply> {
    let q = &req.query;
    let (meta, content_type, data) = upload(req)?;
    let name = q
        .get("name")
        .map(str::to_string)
        .or_else(|| meta["name"].as_str().map(str::to_string))
        .ok_or_else(|| ApiError::gcs(Code::InvalidArgument, "required", "Required"))?;
    if name.is_empty() || name.len() > 1024 || name.contains('\r') || name.contains('\n') {
        return Err(ApiError::gcs(
            Code::InvalidArgument,
            "invalid",
            "The specified object name is not valid.",
        ));
    }
    precondition(w, bucket, &name, q)?;
    let m = put_object(
        w,
        bucket,
        &name,
        data,
        &content_type,
        meta.get("metadata").cloned(),
    );
    Ok(Reply::json(m))
}
