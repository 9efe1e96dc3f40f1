//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`, `/readyz`.
//!
//! `/readyz` is ready once start-up is done and while every added check passes (the GCP
//! credentials' health: unready while no token arrives, so a missing Workload Identity binding
//! shows in `kubectl get pods` and in the readiness alert, without a restart, which would not
//! help). The default address, `[::]:8080`, takes IPv4 and IPv6 connections (dual-stack; on a
//! node without IPv6 it falls back to `0.0.0.0:8080`).

use std::{
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::{Arc, Mutex},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, registry::Registry};

/// A health check `/readyz` consults: `Some(reason)` while unhealthy.
pub type Check = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// What `/readyz` reports; starts "not ready" with a reason, updated as `run` progresses, and
/// unready too while any added [`Check`] fails.
#[derive(Clone)]
pub struct Readiness {
    state: Arc<Mutex<Result<(), String>>>,
    checks: Arc<Mutex<Vec<Check>>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Readiness").field(&self.get()).finish()
    }
}

impl Readiness {
    pub fn new(reason: &str) -> Self {
        Self {
            state: Arc::new(Mutex::new(Err(reason.to_string()))),
            checks: Arc::default(),
        }
    }

    pub fn set_ready(&self) {
        *self.state.lock().expect("readiness poisoned") = Ok(());
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.state.lock().expect("readiness poisoned") = Err(reason.into());
    }

    /// Adds a check that keeps `/readyz` unready while it returns a reason.
    pub fn add_check(&self, check: Check) {
        self.checks.lock().expect("readiness poisoned").push(check);
    }

    fn get(&self) -> Result<(), String> {
        self.state.lock().expect("readiness poisoned").clone()?;
        let checks = self.checks.lock().expect("readiness poisoned").clone();
        match checks.iter().find_map(|check| check()) {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

/// The default address of the server: every address, IPv6 and IPv4, port 8080.
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 8080);

/// Listens on `addr`. The IPv6 unspecified address (`[::]`) is bound dual-stack (IPV6_V6ONLY
/// off, whatever the node's `net.ipv6.bindv6only`), so IPv4 clients connect too; where the node
/// has no IPv6 at all, `[::]:port` falls back to `0.0.0.0:port`.
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    if addr.ip() != IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        return finish_listen(socket, addr);
    }
    let socket = match Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)) {
        Ok(socket) => socket,
        Err(err) => {
            tracing::info!(error = %err, "no IPv6 on this node; listening on IPv4 only");
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            return finish_listen(socket, v4);
        }
    };
    socket.set_only_v6(false)?;
    finish_listen(socket, addr)
}

fn finish_listen(socket: socket2::Socket, addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
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
    let listener = listen(addr).map_err(|e| anyhow::anyhow!("metrics-addr: cannot listen on {addr}: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The default address takes both families: a client connects over IPv4 and over IPv6.
    #[tokio::test]
    async fn default_address_is_dual_stack() {
        let any_port = SocketAddr::new(DEFAULT_ADDR.ip(), 0);
        let (never_tx, never) = tokio::sync::oneshot::channel::<()>();
        let (bound, task) = start(any_port, Registry::default(), Readiness::new("starting"), async {
            let _ = never.await;
        })
        .await
        .expect("listen on the default address");
        for host in ["127.0.0.1", "[::1]"] {
            let url = format!("http://{host}:{}/healthz", bound.port());
            let body = reqwest::get(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(body.status(), 200, "{url}");
        }
        drop(never_tx);
        task.await.unwrap();
    }

    #[test]
    fn readiness_is_unready_while_a_check_fails() {
        let readiness = Readiness::new("starting");
        assert_eq!(readiness.get(), Err("starting".into()));
        readiness.set_ready();
        assert_eq!(readiness.get(), Ok(()));
        let failing = Arc::new(Mutex::new(Some("GCP credentials failing".to_string())));
        let check = failing.clone();
        readiness.add_check(Arc::new(move || check.lock().unwrap().clone()));
        assert_eq!(readiness.get(), Err("GCP credentials failing".into()));
        *failing.lock().unwrap() = None;
        assert_eq!(readiness.get(), Ok(()));
    }
}
