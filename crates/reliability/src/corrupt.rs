//! A corrupting proxy in front of gcp-emulator: it forwards every request and, while a mode is
//! set, damages the successful GET answers (the reads controllers observe state with). The
//! emulator answers only well-formed, schema-valid bodies (it validates against the discovery
//! documents), so malformed responses need a server of their own; forwarding the rest keeps the
//! state machines real.

use std::sync::{Arc, Mutex};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    response::Response,
};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Pass answers through.
    None,
    /// Drop `state` and `name` from the resource.
    MissingFields,
    /// `state` is an enum number no API defines (999) and a name no API defines.
    UnknownEnum,
    /// `state` is an object, `labels` a string.
    WrongTypes,
    /// The body is cut in half (invalid JSON).
    Truncated,
    /// An HTML error page with status 200.
    NotJson,
}

pub const ALL: [Corruption; 5] = [
    Corruption::MissingFields,
    Corruption::UnknownEnum,
    Corruption::WrongTypes,
    Corruption::Truncated,
    Corruption::NotJson,
];

#[derive(Clone)]
struct Proxy {
    upstream: String,
    http: reqwest::Client,
    mode: Arc<Mutex<Corruption>>,
    damaged: Arc<Mutex<u64>>,
}

pub struct CorruptingProxy {
    pub url: String,
    mode: Arc<Mutex<Corruption>>,
    damaged: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl CorruptingProxy {
    pub async fn start(upstream: &str) -> Self {
        let mode = Arc::new(Mutex::new(Corruption::None));
        let damaged = Arc::new(Mutex::new(0));
        let proxy = Proxy {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            mode: mode.clone(),
            damaged: damaged.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(proxy);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            mode,
            damaged,
            task,
        }
    }

    pub fn set(&self, mode: Corruption) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Answers damaged so far.
    pub fn damaged(&self) -> u64 {
        *self.damaged.lock().unwrap()
    }
}

impl Drop for CorruptingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    let method = req.method().clone();
    let path_q = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_default();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    let mut out = p
        .http
        .request(method.clone(), format!("{}{path_q}", p.upstream))
        .body(body);
    if let Some(ct) = headers.get("content-type") {
        out = out.header("content-type", ct);
    }
    let resp = match out.send().await {
        Ok(r) => r,
        Err(e) => {
            return Response::builder()
                .status(502)
                .body(Body::from(e.to_string()))
                .unwrap();
        }
    };
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .cloned()
        .unwrap_or_else(|| "application/json".parse().unwrap());
    let bytes = resp.bytes().await.unwrap_or_default();
    let mode = *p.mode.lock().unwrap();
    // Damage only reads of cloud resources (not storage listings, not admin endpoints).
    let damage = mode != Corruption::None
        && method == axum::http::Method::GET
        && status.is_success()
        && !path_q.starts_with("/storage")
        && !path_q.starts_with("/emulator");
    let bytes = if damage {
        *p.damaged.lock().unwrap() += 1;
        corrupt(mode, &bytes)
    } else {
        bytes
    };
    Response::builder()
        .status(status)
        .header("content-type", ct)
        .body(Body::from(bytes))
        .unwrap()
}

fn corrupt(mode: Corruption, body: &Bytes) -> Bytes {
    let edit = |f: &dyn Fn(&mut Value)| -> Bytes {
        match serde_json::from_slice::<Value>(body) {
            Ok(mut v) => {
                f(&mut v);
                // Also inside list answers and operation responses.
                for key in ["nodes", "batches", "customJobs", "queuedResources"] {
                    if let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) {
                        items.iter_mut().for_each(f);
                    }
                }
                if let Some(r) = v.get_mut("response") {
                    f(r);
                }
                Bytes::from(v.to_string())
            }
            Err(_) => body.clone(),
        }
    };
    match mode {
        Corruption::None => body.clone(),
        Corruption::MissingFields => edit(&|v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("state");
                o.remove("name");
                o.remove("labels");
            }
        }),
        Corruption::UnknownEnum => edit(&|v| {
            if let Some(o) = v.as_object_mut()
                && o.contains_key("state")
            {
                let s = if o["state"].is_string() {
                    Value::from("STATE_FROM_THE_FUTURE")
                } else {
                    Value::from(999)
                };
                o.insert("state".into(), s);
            }
        }),
        Corruption::WrongTypes => edit(&|v| {
            if let Some(o) = v.as_object_mut() {
                if o.contains_key("state") {
                    o.insert("state".into(), serde_json::json!({"unexpected": true}));
                }
                if o.contains_key("labels") {
                    o.insert("labels".into(), Value::from("not-a-map"));
                }
            }
        }),
        Corruption::Truncated => body.slice(..body.len() / 2),
        Corruption::NotJson => Bytes::from_static(b"<html><body>502 Bad Gateway</body></html>"),
    }
}
