//! Faults on the Kubernetes side: an axum middleware around kube-emulator's router that answers
//! chosen requests with an error instead of passing them on (the write never happens, as when
//! the API server refuses it). kube-emulator has hooks for watch expiry (`compact_watch_history`,
//! `end_watches`) but none for failing a write, hence this layer.

use std::sync::{Arc, Mutex};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use rand::{Rng, rngs::StdRng};

/// Fail the next `count` requests with `method` whose path contains `path_contains`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub method: &'static str,
    pub path_contains: String,
    pub count: u32,
    pub status: u16,
}

#[derive(Default)]
struct Inner {
    rules: Vec<Rule>,
    random: Option<(StdRng, f64, u16)>,
    injected: u64,
}

#[derive(Clone, Default)]
pub struct KubeFaults(Arc<Mutex<Inner>>);

impl KubeFaults {
    pub fn add(&self, rule: Rule) {
        self.0.lock().unwrap().rules.push(rule);
    }

    /// Every write (POST, PUT, PATCH, DELETE) fails with `status` with probability `rate`.
    pub fn random_writes(&self, seed: u64, rate: f64, status: u16) {
        self.0.lock().unwrap().random = Some((crate::rng(seed), rate, status));
    }

    pub fn clear(&self) {
        let mut g = self.0.lock().unwrap();
        g.rules.clear();
        g.random = None;
    }

    /// Requests answered with an injected error so far.
    pub fn injected(&self) -> u64 {
        self.0.lock().unwrap().injected
    }

    fn decide(&self, method: &str, path: &str) -> Option<u16> {
        let mut g = self.0.lock().unwrap();
        let g = &mut *g;
        if let Some(rule) = g
            .rules
            .iter_mut()
            .find(|r| r.count > 0 && r.method == method && path.contains(&r.path_contains))
        {
            rule.count -= 1;
            g.injected += 1;
            return Some(rule.status);
        }
        if let Some((rng, rate, status)) = &mut g.random
            && matches!(method, "POST" | "PUT" | "PATCH" | "DELETE")
            && rng.random_bool(*rate)
        {
            g.injected += 1;
            return Some(*status);
        }
        None
    }

    /// The router with this layer in front.
    pub fn wrap(&self, router: axum::Router) -> axum::Router {
        router.layer(axum::middleware::from_fn_with_state(self.clone(), layer))
    }
}

async fn layer(State(faults): State<KubeFaults>, req: Request, next: Next) -> Response {
    let Some(code) = faults.decide(req.method().as_str(), req.uri().path()) else {
        return next.run(req).await;
    };
    let (reason, message) = match code {
        409 => (
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
        ),
        429 => ("TooManyRequests", "too many requests, please try again later"),
        _ => (
            "InternalError",
            "Internal error occurred: injected by the reliability suite",
        ),
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code
    });
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}
