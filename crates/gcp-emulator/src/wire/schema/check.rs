//! Checking a JSON value against a discovery schema: messages, fields, strings (formats, enums)
//! and the defaults a missing field takes.

use super::*;

pub(super) fn check_message(svc: Svc, name: &str, v: &Value, path: &str, req: bool) -> ApiResult<Value> {
    let props = schema(svc, name);
    let Value::Object(obj) = v else {
        return Err(ApiError::invalid_field(
            path,
            format!("Invalid value at '{path}' (TYPE_MESSAGE), {v}"),
        ));
    };
    let mut out = Map::new();
    for (k, val) in obj {
        let Some(p) = props.get(k) else {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!(" at '{path}'")
            };
            return Err(ApiError::invalid_field(
                &join(path, k),
                format!("Invalid JSON payload received. Unknown name \"{k}\"{at}: Cannot find field."),
            ));
        };
        if p.ro || val.is_null() {
            continue;
        }
        if let Some(norm) = check_value(svc, p, val, &join(path, k), req)? {
            out.insert(k.clone(), norm);
        }
    }
    for (k, p) in props {
        if req && p.req && !p.ro && !out.contains_key(k) {
            let field = join(path, k);
            return Err(ApiError::invalid_field(
                &field,
                format!("Invalid value at '{field}': required field is missing or empty"),
            ));
        }
    }
    Ok(Value::Object(out))
}

/// A repeated field: each item checked, defaults kept; empty is unset.
fn check_array(svc: Svc, p: &Prop, v: &Value, path: &str, req: bool) -> ApiResult<Option<Value>> {
    let Value::Array(items) = v else {
        return Err(bad_value(path, p, v));
    };
    let item = p.items.as_deref().expect("array schemas have items");
    let mut out = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        // Repeated scalars keep default values (an empty string in args is meaningful).
        let norm = match check_value(svc, item, it, &at, req)? {
            Some(n) => n,
            None => default_of(item),
        };
        out.push(norm);
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

/// A map field (`additionalProperties`): each value checked, defaults kept; empty is unset.
fn check_map(svc: Svc, p: &Prop, v: &Value, path: &str, req: bool) -> ApiResult<Option<Value>> {
    let Value::Object(m) = v else {
        return Err(bad_value(path, p, v));
    };
    let vp = p.additional.as_deref().expect("checked");
    let mut out = Map::new();
    for (k, it) in m {
        let at = format!("{path}[{k}]");
        let norm = match check_value(svc, vp, it, &at, req)? {
            Some(n) => n,
            None => default_of(vp),
        };
        out.insert(k.clone(), norm);
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

/// Returns `None` when the value is the proto3 default (and so is not stored / emitted).
fn check_value(svc: Svc, p: &Prop, v: &Value, path: &str, req: bool) -> ApiResult<Option<Value>> {
    if let Some(r) = &p.reference {
        return check_message(svc, r, v, path, req).map(Some);
    }
    match p.ty.as_deref() {
        Some("array") => check_array(svc, p, v, path, req),
        Some("object") if p.additional.is_some() => check_map(svc, p, v, path, req),
        Some("string") => check_string(p, v, path),
        Some("integer") => {
            let n = match v {
                Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64().unwrap_or(i64::MAX),
                Value::String(s) => s.parse::<i64>().map_err(|_| bad_value(path, p, v))?,
                _ => return Err(bad_value(path, p, v)),
            };
            if p.format.as_deref() == Some("uint32") && n < 0 {
                return Err(bad_value(path, p, v));
            }
            Ok((n != 0).then(|| Value::from(n)))
        }
        Some("number") => match v {
            Value::Number(n) => Ok((n.as_f64() != Some(0.0)).then(|| v.clone())),
            Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => Ok(Some(v.clone())),
            _ => Err(bad_value(path, p, v)),
        },
        Some("boolean") => match v {
            Value::Bool(b) => Ok(b.then_some(Value::Bool(true))),
            _ => Err(bad_value(path, p, v)),
        },
        // `any` (e.g. Operation.response, Status.details) and plain objects: accepted as is.
        _ => Ok(Some(v.clone())),
    }
}

/// A string's `format`: int64 / uint64 must parse, durations and timestamps must be well formed
/// (empty is allowed: it is the default).
fn check_format(p: &Prop, v: &Value, path: &str, s: &str) -> ApiResult<()> {
    match p.format.as_deref() {
        Some("int64") if s.parse::<i64>().is_err() => return Err(bad_value(path, p, v)),
        Some("uint64") if s.parse::<u64>().is_err() => return Err(bad_value(path, p, v)),
        Some("google-duration") if !s.is_empty() && crate::wire::time::parse_duration(s).is_none() => {
            return Err(ApiError::invalid_field(
                path,
                format!("Invalid value at '{path}' (type.googleapis.com/google.protobuf.Duration), \"{s}\""),
            ));
        }
        Some("google-datetime") if !s.is_empty() && crate::wire::time::parse_ts(s).is_none() => {
            return Err(ApiError::invalid_field(
                path,
                format!("Invalid value at '{path}' (type.googleapis.com/google.protobuf.Timestamp), \"{s}\""),
            ));
        }
        _ => {}
    }
    Ok(())
}

fn check_string(p: &Prop, v: &Value, path: &str) -> ApiResult<Option<Value>> {
    if let (Some(names), Some(nums)) = (&p.names, &p.nums) {
        let name = match v {
            Value::String(s) if names.contains(s) => s.clone(),
            Value::Number(n) => {
                let n = n.as_i64().ok_or_else(|| bad_value(path, p, v))?;
                nums.iter()
                    .find(|(_, num)| **num == n)
                    .map(|(k, _)| k.clone())
                    .ok_or_else(|| {
                        ApiError::invalid_field(path, format!("Invalid value at '{path}' (TYPE_ENUM), {n}"))
                    })?
            }
            _ => {
                return Err(ApiError::invalid_field(
                    path,
                    format!("Invalid value at '{path}' (TYPE_ENUM), {v}"),
                ));
            }
        };
        let is_default = nums.get(&name) == Some(&0);
        return Ok((!is_default).then_some(Value::String(name)));
    }
    // Compute's discovery enums carry names only (no proto numbers): names are checked, kept.
    if let Some(names) = &p.names {
        return match v {
            Value::String(s) if names.contains(s) => Ok(Some(v.clone())),
            _ => Err(ApiError::invalid_field(
                path,
                format!(
                    "Invalid value for field '{path}': {v}. Allowed values: {}",
                    names.join(", ")
                ),
            )),
        };
    }
    let s = match (v, p.format.as_deref()) {
        (Value::String(s), _) => s.clone(),
        (Value::Number(n), Some("int64" | "uint64")) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => return Err(bad_value(path, p, v)),
    };
    check_format(p, v, path, &s)?;
    let is_default = s.is_empty() || (matches!(p.format.as_deref(), Some("int64" | "uint64")) && s == "0");
    Ok((!is_default).then_some(Value::String(s)))
}

fn default_of(p: &Prop) -> Value {
    match p.ty.as_deref() {
        Some("integer") | Some("number") => Value::from(0),
        Some("boolean") => Value::Bool(false),
        Some("string") if matches!(p.format.as_deref(), Some("int64" | "uint64")) => Value::from("0"),
        Some("string") => match &p.nums {
            Some(nums) => Value::from(
                nums.iter()
                    .find(|(_, n)| **n == 0)
                    .map(|(k, _)| k.clone())
                    .unwrap_or_default(),
            ),
            None => Value::from(""),
        },
        _ => Value::Object(Map::new()),
    }
}
