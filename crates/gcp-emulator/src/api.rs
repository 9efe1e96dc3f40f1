//! The request / reply types every service handler works with.

use crate::errors::{ApiError, ApiResult};
use crate::wire::Query;
use crate::wire::schema::{self, Svc};
use axum::http::Method;
use bytes::Bytes;
use serde_json::Value;

/// A request after the service prefix (`/tpu`, `/dataproc`, ...) has been stripped.
#[derive(Debug)]
pub struct Req {
    pub method: Method,
    /// The API version the path named (`v2` or `v2alpha1` for TPU, `v1`, ...; empty for Cloud
    /// Storage and Compute Engine, which have one).
    pub version: &'static str,
    /// Path segments after the API version, percent-decoded one by one.
    pub segs: Vec<String>,
    /// `:verb` suffix of the last segment (cloud APIs only), e.g. `stop` for `nodes/x:stop`.
    pub verb: Option<String>,
    pub query: Query,
    pub body: Bytes,
    pub content_type: Option<String>,
}

impl Req {
    /// The body as JSON (`{}` when empty, as the Rust SDK sends for bodiless POSTs).
    pub fn json(&self) -> ApiResult<Value> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Default::default()));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::invalid(format!("Invalid JSON payload received. {e}")))
    }
}

/// How to re-encode enums in a reply when the client asked for integers.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Plain,
    Msg(Svc, &'static str),
    List {
        key: &'static str,
        svc: Svc,
        schema: &'static str,
    },
    Op,
    Ops,
}

#[derive(Debug)]
pub enum Body {
    Json(Value),
    Raw { content_type: String, data: Bytes },
    NoContent,
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Body,
    pub shape: Shape,
}

impl Reply {
    pub fn json(v: Value) -> Reply {
        Reply {
            status: 200,
            body: Body::Json(v),
            shape: Shape::Plain,
        }
    }
    pub fn msg(svc: Svc, schema: &'static str, v: Value) -> Reply {
        Reply {
            status: 200,
            body: Body::Json(v),
            shape: Shape::Msg(svc, schema),
        }
    }
    pub fn list(key: &'static str, svc: Svc, schema: &'static str, v: Value) -> Reply {
        Reply {
            status: 200,
            body: Body::Json(v),
            shape: Shape::List { key, svc, schema },
        }
    }
    pub fn op(v: Value) -> Reply {
        Reply {
            status: 200,
            body: Body::Json(v),
            shape: Shape::Op,
        }
    }
    pub fn ops(v: Value) -> Reply {
        Reply {
            status: 200,
            body: Body::Json(v),
            shape: Shape::Ops,
        }
    }
    pub fn no_content() -> Reply {
        Reply {
            status: 204,
            body: Body::NoContent,
            shape: Shape::Plain,
        }
    }
}

/// Builds a list response: `{key: [...], nextPageToken}`, or `{}` when empty like Google.
pub fn list_body(key: &str, items: Vec<Value>, next: Option<String>) -> Value {
    let mut m = serde_json::Map::new();
    if !items.is_empty() {
        m.insert(key.to_string(), Value::Array(items));
    }
    if let Some(t) = next {
        m.insert("nextPageToken".into(), Value::String(t));
    }
    Value::Object(m)
}

/// A 404 for paths no method matches (Google's front end answers these with NOT_FOUND too).
pub fn no_route(method: &Method, path: &str) -> ApiError {
    ApiError::not_found(format!(
        "The requested URL {path} (method {method}) was not found on this server."
    ))
}

/// Rewrites the enums of a reply body as numbers (`$alt=json;enum-encoding=int`).
pub fn encode_ints(v: &mut Value, shape: Shape) {
    match shape {
        Shape::Plain => {}
        Shape::Msg(svc, name) => schema::enums_to_int(svc, name, v),
        Shape::List {
            key,
            svc,
            schema: name,
        } => {
            if let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) {
                items
                    .iter_mut()
                    .for_each(|it| schema::enums_to_int(svc, name, it));
            }
        }
        Shape::Op => schema::operation_enums_to_int(v),
        Shape::Ops => {
            if let Some(items) = v.get_mut("operations").and_then(Value::as_array_mut) {
                items.iter_mut().for_each(schema::operation_enums_to_int);
            }
        }
    }
}
