//! `kube-emulator`: serves the emulated Kubernetes API on a socket and writes a kubeconfig for it.

use clap::Parser;
use kube_emulator::{Config, KubeEmulator, kubeconfig_with_ca, tls};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "kube-emulator",
    version,
    about = "A local, in-memory Kubernetes API server (plain HTTP or TLS, no authentication)"
)]
struct Args {
    /// Address to listen on (keep it on loopback: there is no authentication, TLS or not).
    #[arg(long, default_value = "127.0.0.1:6443", env = "KUBE_EMULATOR_LISTEN")]
    listen: String,
    /// Write a kubeconfig for the listening address here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Install the CustomResourceDefinitions in the YAML files of this directory at start.
    #[arg(long)]
    crds: Vec<PathBuf>,
    /// Load state from this file at start (if it exists) and save it there on changes and at exit.
    #[arg(long)]
    snapshot: Option<PathBuf>,
    /// Serve TLS with this PEM certificate (chain); needs --tls-key. The kubeconfig written by
    /// --kubeconfig-out then trusts this file as its certificate authority (a self-signed
    /// certificate, e.g. `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost
    /// -addext subjectAltName=IP:127.0.0.1 -keyout key.pem -out cert.pem`).
    #[arg(long, requires = "tls_key", value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Watch events kept for resuming watches.
    #[arg(long, default_value_t = 50_000)]
    watch_history: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let emulator = KubeEmulator::with_config(Config {
        history_limit: args.watch_history,
        ..Config::default()
    });
    load_start_state(&emulator, &args)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((tls::server_config(cert, key)?, std::path::absolute(cert)?)),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("binding {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    if let Some(path) = &args.kubeconfig_out {
        let ca = tls.as_ref().map(|(_, cert)| cert.as_path());
        std::fs::write(path, kubeconfig_with_ca(&url, ca))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(path) = args.snapshot.clone() {
        save_snapshot_on_changes(emulator.clone(), path);
    }
    // The readiness line tests and scripts wait for.
    println!("kube-emulator listening on {url}");
    // Open watches would hold a graceful shutdown forever: stop serving at once on a signal.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        served = async {
            match tls {
                Some((config, _)) => axum::serve(tls::TlsListener::new(listener, config), emulator.router()).await,
                None => emulator.serve(listener).await,
            }
        } => served?,
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    if let Some(path) = &args.snapshot {
        emulator.save_snapshot(path)?;
    }
    Ok(())
}

/// The state at start: the snapshot, when given and present, then the CRDs of `--crds`.
fn load_start_state(emulator: &KubeEmulator, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(path) = &args.snapshot
        && path.exists()
    {
        emulator
            .load_snapshot(path)
            .map_err(|e| format!("loading snapshot {}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), rv = emulator.resource_version(), "snapshot loaded");
    }
    for dir in &args.crds {
        let names = if dir.is_dir() {
            emulator.install_crds_from_dir(dir)?
        } else {
            emulator.install_crds_from_yaml(
                &std::fs::read_to_string(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?,
            )?
        };
        tracing::info!(source = %dir.display(), crds = ?names, "CRDs installed");
    }
    Ok(())
}

/// Every half second, saves the snapshot when the resourceVersion moved since the last save.
fn save_snapshot_on_changes(emulator: KubeEmulator, path: PathBuf) {
    tokio::spawn(async move {
        let mut saved = emulator.resource_version();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let rv = emulator.resource_version();
            if rv != saved {
                match emulator.save_snapshot(&path) {
                    Ok(()) => saved = rv,
                    Err(e) => tracing::warn!("saving snapshot {}: {e}", path.display()),
                }
            }
        }
    });
}
