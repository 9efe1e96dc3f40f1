//! A local, in-memory Kubernetes API server for kube-rs controllers and kubectl.
//!
//! In-process (no socket):
//! ```no_run
//! # async fn demo() {
//! let emulator = kube_emulator::KubeEmulator::new();
//! // kube::Client::new(emulator.router(), "default") talks to it directly.
//! let _router = emulator.router();
//! # }
//! ```
//! On a socket: [`KubeEmulator::serve`] or [`KubeEmulator::start`], plus [`kubeconfig`] for
//! kubectl. The validation module is usable on its own ([`validation::CrdValidator`]).
#![recursion_limit = "256"]

pub mod cluster;
pub mod crd;
pub mod discovery;
pub mod errors;
pub mod events;
pub mod fieldset;
pub mod handlers;
pub mod jsonpath;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod resources;
pub mod selectors;
pub mod snapshot;
pub mod ssa;
pub mod store;
pub mod table;
pub mod tls;
pub mod validation;
pub mod watch;

pub use cluster::{Cluster, Config};
pub use errors::ApiError;

use cluster::WriteOptions;
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// Errors of the library entry points (the HTTP API reports `metav1.Status` instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("parsing YAML document {index} of {origin}: {source}")]
    Yaml {
        origin: String,
        index: usize,
        source: serde_yaml::Error,
    },
    #[error("{origin}: {source}")]
    Api { origin: String, source: ApiError },
}

/// A running emulator: the state plus ways to serve it.
#[derive(Clone)]
pub struct KubeEmulator {
    cluster: Arc<Cluster>,
}

impl Default for KubeEmulator {
    fn default() -> Self {
        Self::new()
    }
}

/// An emulator served on a socket by [`KubeEmulator::start`]. [`Server::shutdown`] (or dropping
/// it) stops accepting connections, ends the open watches and lets in-flight requests finish.
pub struct Server {
    pub addr: SocketAddr,
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    cluster: Arc<Cluster>,
}

impl Server {
    pub fn shutdown(mut self) {
        self.stop_serving();
    }

    fn stop_serving(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
            // Watches would otherwise hold the graceful shutdown open until they time out.
            self.cluster.end_watches();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_serving();
    }
}

impl KubeEmulator {
    /// An empty cluster with the built-in kinds and namespaces `default`, `kube-system`,
    /// `kube-public`, `kube-node-lease`.
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    pub fn with_config(config: Config) -> Self {
        Self {
            cluster: Arc::new(Cluster::new(config)),
        }
    }

    /// The emulated cluster's state and semantics (for direct inspection in tests).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The axum router serving the API; it is a tower `Service`, so
    /// `kube::Client::new(emulator.router(), "default")` needs no socket.
    pub fn router(&self) -> axum::Router {
        handlers::router(self.cluster.clone())
    }

    /// Serves the API on `listener` until the future is dropped.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// Serves until `shutdown` resolves.
    pub async fn serve_with_shutdown(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }

    /// Binds `addr` (e.g. `127.0.0.1:0`) and serves in a background task.
    pub async fn start(&self, addr: &str) -> std::io::Result<Server> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(self.spawn_server(listener, addr, format!("http://{addr}")))
    }

    /// Like [`Self::start`], over TLS with `config` (see [`tls::server_config`]); the URL is
    /// `https://`.
    pub async fn start_tls(&self, addr: &str, config: Arc<rustls::ServerConfig>) -> std::io::Result<Server> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let listener = tls::TlsListener::new(listener, config);
        Ok(self.spawn_server(listener, addr, format!("https://{addr}")))
    }

    fn spawn_server<L>(&self, listener: L, addr: SocketAddr, url: String) -> Server
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let router = self.router();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!("kube-emulator server on {addr} failed: {e}");
            }
        });
        Server {
            addr,
            url,
            stop: Some(stop),
            cluster: self.cluster.clone(),
        }
    }

    /// Creates (or updates) every CustomResourceDefinition in a multi-document YAML string;
    /// other documents are ignored. Returns the CRD names.
    pub fn install_crds_from_yaml(&self, yaml: &str) -> Result<Vec<String>, Error> {
        let mut names = Vec::new();
        for (index, doc) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
            let value: Value = serde::Deserialize::deserialize(doc).map_err(|source| Error::Yaml {
                origin: "CRD YAML".into(),
                index,
                source,
            })?;
            if value.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = meta::name(&value).to_string();
            self.upsert_crd(value).map_err(|source| Error::Api {
                origin: format!("CRD {name}"),
                source,
            })?;
            names.push(name);
        }
        Ok(names)
    }

    /// Installs the CRDs of every `*.yaml` / `*.yml` file in `dir` (sorted by file name).
    pub fn install_crds_from_dir(&self, dir: &Path) -> Result<Vec<String>, Error> {
        let io = |source| Error::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        let mut names = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| Error::Io {
                path: file.display().to_string(),
                source,
            })?;
            names.extend(self.install_crds_from_yaml(&text)?);
        }
        Ok(names)
    }

    fn upsert_crd(&self, crd: Value) -> Result<(), ApiError> {
        let rt = self
            .cluster
            .resolve("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("built in");
        let name = meta::name(&crd).to_string();
        let opts = WriteOptions::internal();
        self.cluster.write(|s| match s.get(&rt, "", &name) {
            Err(_) => s.create(&rt, "", crd, &opts).map(|_| ()),
            Ok(existing) => {
                let mut next = crd;
                next["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
                s.update(&rt, "", &name, next, ssa::Scope::Main, &opts)
                    .map(|_| ())
            }
        })
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.cluster.lock().store.resource_version()
    }

    /// Forgets the watch history, like a restarted apiserver: watches from older
    /// resourceVersions get 410 Gone and clients must relist.
    pub fn compact_watch_history(&self) {
        self.cluster.lock().store.compact();
    }

    /// Ends every open watch (clients re-watch from their last resourceVersion).
    pub fn end_watches(&self) {
        self.cluster.end_watches();
    }

    pub fn save_snapshot(&self, path: &Path) -> std::io::Result<()> {
        snapshot::save(&self.cluster, path)
    }

    /// Replaces the state with a snapshot written by [`KubeEmulator::save_snapshot`].
    pub fn load_snapshot(&self, path: &Path) -> std::io::Result<()> {
        snapshot::load(&self.cluster, path)
    }
}

/// A kubeconfig (YAML) for a server at `url`, context `kube-emulator`, namespace `default`.
/// The emulator does no authentication, so the user entry is empty.
pub fn kubeconfig(url: &str) -> String {
    kubeconfig_with_ca(url, None)
}

/// A kubeconfig for a TLS server whose certificate (or its issuer) is the PEM file `ca`.
pub fn kubeconfig_with_ca(url: &str, ca: Option<&std::path::Path>) -> String {
    let ca = ca.map_or(String::new(), |path| {
        format!("    certificate-authority: {}\n", path.display())
    });
    // Over https kubectl prompts for a username when the user has no credentials at all; the
    // emulator ignores the token, it only keeps kubectl non-interactive.
    let user = if ca.is_empty() {
        "{}"
    } else {
        "\n    token: kube-emulator"
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-emulator\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: kube-emulator\n  context:\n    cluster: kube-emulator\n    user: kube-emulator\n    namespace: default\ncurrent-context: kube-emulator\nusers:\n- name: kube-emulator\n  user: {user}\n"
    )
}
pub mod protobuf;
