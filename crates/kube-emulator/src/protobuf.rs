//! Just enough of the Kubernetes protobuf encoding to accept the bodies kubectl's generator
//! commands send (`kubectl create namespace|configmap|secret NAME`), which use typed clients that
//! speak protobuf. Responses are always JSON, which those clients also accept.

use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// One decoded field: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (number, wire) = (key >> 3, key & 7);
        let field = match wire {
            0 => Field::Varint(varint(buf, &mut pos)?),
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|_| "length overflow")?;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or("truncated field")?;
                let bytes = &buf[pos..end];
                pos = end;
                Field::Bytes(bytes)
            }
            1 => {
                pos += 8;
                continue;
            }
            5 => {
                pos += 4;
                continue;
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        out.push((number, field));
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "invalid UTF-8 in a string field".to_string())
}

/// A `map<string, string|bytes>` entry.
fn map_entry(bytes: &[u8], binary: bool) -> Result<(String, Value), String> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for (n, f) in fields(bytes)? {
        if let Field::Bytes(b) = f {
            match n {
                1 => key = text(b)?,
                2 => {
                    value = Value::String(if binary {
                        crate::meta::base64_encode(b)
                    } else {
                        text(b)?
                    })
                }
                _ => {}
            }
        }
    }
    Ok((key, value))
}

fn insert_entry(obj: &mut Map<String, Value>, field: &str, bytes: &[u8], binary: bool) -> Result<(), String> {
    let (k, v) = map_entry(bytes, binary)?;
    obj.entry(field).or_insert_with(|| json!({}))[k] = v;
    Ok(())
}

fn push_string(obj: &mut Map<String, Value>, field: &str, bytes: &[u8]) -> Result<(), String> {
    let s = text(bytes)?;
    obj.entry(field)
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("array")
        .push(Value::String(s));
    Ok(())
}

fn object_meta(bytes: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                m.insert("name".into(), Value::String(text(b)?));
            }
            (2, Field::Bytes(b)) => {
                m.insert("generateName".into(), Value::String(text(b)?));
            }
            (3, Field::Bytes(b)) => {
                m.insert("namespace".into(), Value::String(text(b)?));
            }
            (11, Field::Bytes(b)) => insert_entry(&mut m, "labels", b, false)?,
            (12, Field::Bytes(b)) => insert_entry(&mut m, "annotations", b, false)?,
            (14, Field::Bytes(b)) => push_string(&mut m, "finalizers", b)?,
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

/// Decodes a protobuf request body of a kind kubectl's generators create.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let (api_version, kind, raw) = envelope(body)?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind.clone()));
    object_fields(&kind, raw, &mut obj)?;
    if kind == "DeleteOptions" {
        return delete_options(raw);
    }
    if !matches!(kind.as_str(), "ConfigMap" | "Secret" | "Namespace") {
        return Err(format!(
            "protobuf bodies are accepted only for Namespace, ConfigMap and Secret, not {kind:?}"
        ));
    }
    Ok(Value::Object(obj))
}

/// The k8s protobuf envelope (`runtime.Unknown`): the object's apiVersion and kind, and its
/// raw encoding.
fn envelope(body: &[u8]) -> Result<(String, String, &[u8]), String> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("missing the k8s protobuf envelope")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(rest)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (tn, tf) in fields(type_meta)? {
                    match (tn, tf) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    Ok((api_version, kind, raw))
}

/// The fields of a ConfigMap, Secret or Namespace encoded in `raw`, into `obj`; only metadata
/// for other kinds.
fn object_fields(kind: &str, raw: &[u8], obj: &mut Map<String, Value>) -> Result<(), String> {
    for (n, f) in fields(raw)? {
        let Field::Bytes(b) = f else {
            if let (4, Field::Varint(v)) = (n, &f)
                && (kind == "ConfigMap")
            {
                obj.insert("immutable".into(), Value::Bool(*v != 0));
            }
            if let (5, Field::Varint(v)) = (n, &f)
                && kind == "Secret"
            {
                obj.insert("immutable".into(), Value::Bool(*v != 0));
            }
            continue;
        };
        match (kind, n) {
            (_, 1) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            ("ConfigMap", 2) => insert_entry(obj, "data", b, false)?,
            ("ConfigMap", 3) => insert_entry(obj, "binaryData", b, true)?,
            ("Secret", 2) => insert_entry(obj, "data", b, true)?,
            ("Secret", 3) => {
                obj.insert("type".into(), Value::String(text(b)?));
            }
            ("Secret", 4) => insert_entry(obj, "stringData", b, false)?,
            ("Namespace", 2) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(b)? {
                    if let (1, Field::Bytes(s)) = (sn, sf) {
                        push_string(&mut spec, "finalizers", s)?;
                    }
                }
                obj.insert("spec".into(), Value::Object(spec));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `meta.k8s.io/v1 DeleteOptions`, which client-go sends as the body of a DELETE (helm does).
fn delete_options(raw: &[u8]) -> Result<Value, String> {
    let mut out = Map::new();
    out.insert("kind".into(), json!("DeleteOptions"));
    out.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Varint(v)) => {
                out.insert("gracePeriodSeconds".into(), json!(v));
            }
            (2, Field::Bytes(b)) => {
                let mut pre = Map::new();
                for (pn, pf) in fields(b)? {
                    match (pn, pf) {
                        (1, Field::Bytes(u)) => pre.insert("uid".into(), Value::String(text(u)?)),
                        (2, Field::Bytes(r)) => pre.insert("resourceVersion".into(), Value::String(text(r)?)),
                        _ => None,
                    };
                }
                out.insert("preconditions".into(), Value::Object(pre));
            }
            (3, Field::Varint(v)) => {
                out.insert("orphanDependents".into(), Value::Bool(v != 0));
            }
            (4, Field::Bytes(b)) => {
                out.insert("propagationPolicy".into(), Value::String(text(b)?));
            }
            (5, Field::Bytes(b)) => push_string(&mut out, "dryRun", b)?,
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_delete_options() {
        let opts = [field(4, b"Foreground"), field(2, &field(1, b"u-1"))].concat();
        let type_meta = [field(1, b"meta.k8s.io/v1"), field(2, b"DeleteOptions")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &opts)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["propagationPolicy"], "Foreground");
        assert_eq!(v["preconditions"]["uid"], "u-1");
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            field(1, b"c1"),
            field(11, &[field(1, b"app"), field(2, b"x")].concat()),
        ]
        .concat();
        let cm = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &cm)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "labels": {"app": "x"}}, "data": {"k": "v"}})
        );
    }
}
