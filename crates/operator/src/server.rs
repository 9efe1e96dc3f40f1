//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`, `/readyz`.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, registry::Registry};

/// What `/readyz` reports; starts "not ready" with a reason, updated as `run` progresses.
#[derive(Clone, Debug)]
pub struct Readiness(Arc<Mutex<Result<(), String>>>);

impl Readiness {
    pub fn new(reason: &str) -> Self {
        Self(Arc::new(Mutex::new(Err(reason.to_string()))))
    }

    pub fn set_ready(&self) {
        *self.0.lock().expect("readiness poisoned") = Ok(());
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.0.lock().expect("readiness poisoned") = Err(reason.into());
    }

    fn get(&self) -> Result<(), String> {
        self.0.lock().expect("readiness poisoned").clone()
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// Binds `addr` and serves until `shutdown` resolves. Returns the bound address (useful with
/// port 0) once listening.
pub async fn start(
    addr: SocketAddr,
    registry: Registry,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("metrics-addr: cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            registry: Arc::new(registry),
            readiness,
        });
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    Ok((bound, task))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}"),
        )
            .into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.readiness.get() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}")),
    }
}
