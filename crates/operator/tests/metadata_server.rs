//! `tpu-operator run` as GKE runs it, as far as Google credentials go: Application Default
//! Credentials (no `--gcp-emulator`), served by a fake GKE metadata server named by
//! `GCE_METADATA_HOST` (set on the child process only), with the API endpoints pointed at
//! gcp-emulator through the endpoint settings (as with Private Service Connect). The fake is
//! scripted to answer, refuse with 403 (Workload Identity binding missing), or accept
//! connections and never answer.

mod process;

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{Path as UrlPath, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
};
use process::{BIN, OperatorProcess as Operator, create_slice, free_port, run_command, wait_until};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Answer,
    Forbidden,
    Hang,
}

struct Fake {
    mode: Mutex<Mode>,
    token_requests: AtomicU64,
    /// Metadata requests received (any path).
    requests: AtomicU64,
}

impl Fake {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

async fn metadata(
    State(fake): State<Arc<Fake>>,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
        return (StatusCode::FORBIDDEN, "Missing required header: Metadata-Flavor").into_response();
    }
    fake.requests.fetch_add(1, Ordering::SeqCst);
    let is_token = path == "instance/service-accounts/default/token";
    if is_token {
        fake.token_requests.fetch_add(1, Ordering::SeqCst);
    }
    let mode = *fake.mode.lock().unwrap();
    match (mode, path.as_str()) {
        (Mode::Hang, _) => std::future::pending::<Response>().await,
        (Mode::Forbidden, _) if is_token => (
            StatusCode::FORBIDDEN,
            "Workload Identity: no IAM binding for default/tpu-operator",
        )
            .into_response(),
        (_, "instance/service-accounts/default/token") => {
            let body =
                serde_json::json!({"access_token": "token-1", "expires_in": 3599, "token_type": "Bearer"});
            (
                [
                    ("metadata-flavor", "Google"),
                    ("content-type", "application/json"),
                ],
                body.to_string(),
            )
                .into_response()
        }
        (_, "project/project-id") => ([("metadata-flavor", "Google")], "demo-project").into_response(),
        (_, "universe/universe-domain") => {
            ([("metadata-flavor", "Google")], "googleapis.com").into_response()
        }
        _ => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

async fn start_fake(mode: Mode) -> (Arc<Fake>, SocketAddr) {
    let fake = Arc::new(Fake {
        mode: Mutex::new(mode),
        token_requests: AtomicU64::new(0),
        requests: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/computeMetadata/v1/{*path}", get(metadata))
        .with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, addr)
}

struct Env {
    cluster: test_kit::TestCluster,
    client: kube::Client,
    gcp: gcp_emulator::Emulator,
    home: tempfile::TempDir,
}

impl Env {
    async fn start() -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let cluster = test_kit::TestCluster::emulator()
            .await
            .expect("kube-emulator on a socket");
        let kube = cluster.emulator_handle().expect("an emulated cluster");
        test_kit::emulators::install_crds(kube).expect("install CRDs");
        let gcp = gcp_emulator::Emulator::builder()
            .time_scale(600.0)
            .start()
            .await
            .expect("gcp-emulator");
        Self {
            client: cluster.client.clone(),
            cluster,
            gcp,
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn operator(&self, metadata: SocketAddr, call_timeout: &str) -> Operator {
        let metrics = free_port();
        let emu = self.gcp.url();
        let emu = emu.trim_end_matches('/');
        let mut cmd = run_command(BIN, self.cluster.kubeconfig(), metrics, "metadata-test");
        cmd.args(["--tpu-endpoint", &format!("{emu}/tpu")])
            .args(["--dataproc-endpoint", &format!("{emu}/dataproc")])
            .args(["--vertex-endpoint", &format!("{emu}/vertex")])
            .args(["--storage-endpoint", emu])
            .args(["--compute-endpoint", emu])
            .args(["--gcp-call-timeout", call_timeout])
            .args(["--leader-elect=false"])
            .env("GCE_METADATA_HOST", metadata.to_string())
            .env("HOME", self.home.path())
            .env("CLOUDSDK_CONFIG", self.home.path().join("gcloud"))
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env_remove("TPU_OPERATOR_GCP_EMULATOR")
            .env("RUST_LOG", "warn,tpu_operator=info,tpu_operator_gcp=info");
        Operator::spawn(cmd, metrics)
    }

    async fn create_slice(&self, name: &str) {
        create_slice(&self.client, name).await;
    }
}

/// Item 3: SIGTERM while start-up waits on a metadata server that never answers ends the
/// process at once (exit 0), instead of being ignored until the kubelet's SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_start_up_with_a_hanging_metadata_server_exits_promptly() {
    let env = Env::start().await;
    let (fake, metadata) = start_fake(Mode::Hang).await;
    // A long call timeout: start-up would wait on the metadata server for 30 s.
    let mut operator = env.operator(metadata, "60s");
    wait_until(
        "the operator asks the metadata server",
        Duration::from_secs(60),
        async || fake.requests.load(Ordering::SeqCst) > 0,
    )
    .await;
    let (status, body) = operator.get("/readyz").await.expect("health server up");
    assert_eq!(status, 503, "{body}");
    operator.signal("-TERM");
    let started = Instant::now();
    let exited = operator.wait_exit(Duration::from_secs(10));
    println!(
        "exited {exited:?} {:?} after SIGTERM during start-up",
        started.elapsed()
    );
    assert_eq!(exited, Some(true), "exit 0 within 10 s of SIGTERM");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// Item 3: with a metadata server that never answers, start-up still completes within its
/// bound (the universe-domain question is bounded and defaulted), and the operator is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_with_a_hanging_metadata_server_completes_within_its_bound() {
    let env = Env::start().await;
    let (_fake, metadata) = start_fake(Mode::Hang).await;
    let operator = env.operator(metadata, "2s");
    let took = wait_until("ready", Duration::from_secs(60), async || {
        operator
            .get("/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
    })
    .await;
    println!("ready {took:?} after start with a hanging metadata server (call timeout 2 s)");
}

/// The reason of the `Stalled=True` condition of TpuSlice `name` in `default`, if stalled.
async fn stalled_reason(client: &kube::Client, name: &str) -> Option<String> {
    use tpu_operator_api::conditions::{find_condition, types};
    let api: kube::Api<tpu_operator_api::tpu_slice::TpuSlice> =
        kube::Api::namespaced(client.clone(), "default");
    let slice = api.get(name).await.expect("get TpuSlice");
    let status = slice.status?;
    find_condition(&status.conditions, types::STALLED)
        .filter(|c| c.status == "True")
        .map(|c| c.reason.clone())
}

/// Item 1: a 403 from the metadata server makes `/readyz` unready with the reason and counts it;
/// once the binding is fixed, tokens are fetched again, `/readyz` is ready again, without a
/// restart. The slice whose calls got no token says `CredentialsUnavailable` (not
/// `PermissionDenied`), and runs its next pass within 10 s of the fix instead of after its
/// 5-minute retry: google-cloud-auth's own metadata-server credentials, rebuilt and probed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_failing_credentials_and_recovers_without_restart() {
    let env = Env::start().await;
    let (fake, metadata) = start_fake(Mode::Forbidden).await;
    let operator = env.operator(metadata, "5s");
    wait_until("ready", Duration::from_secs(60), async || {
        operator
            .get("/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
    })
    .await;
    env.create_slice("refused").await;
    wait_until(
        "/readyz reports the failing credentials",
        Duration::from_secs(60),
        async || {
            operator
                .get("/readyz")
                .await
                .is_some_and(|(status, body)| status == 503 && body.contains("GCP credentials failing"))
        },
    )
    .await;
    let (_, metrics) = operator.get("/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"gcp_credentials_errors_total{kind="permanent"}"#)
            && metrics.contains("gcp_credentials_failing 1"),
        "{metrics}"
    );
    wait_until(
        "the slice stalled with CredentialsUnavailable",
        Duration::from_secs(60),
        async || stalled_reason(&env.client, "refused").await.as_deref() == Some("CredentialsUnavailable"),
    )
    .await;
    // Parked on its backoff (or probing), as after any failed pass.
    tokio::time::sleep(Duration::from_secs(1)).await;

    fake.set(Mode::Answer);
    let fixed = Instant::now();
    let before = fake.token_requests.load(Ordering::SeqCst);
    let took = wait_until("ready again", Duration::from_secs(30), async || {
        operator
            .get("/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
    })
    .await;
    println!("ready again {took:?} after the metadata server answers");
    assert!(
        fake.token_requests.load(Ordering::SeqCst) > before,
        "token fetches resumed"
    );
    let (_, metrics) = operator.get("/metrics").await.unwrap();
    assert!(metrics.contains("gcp_credentials_failing 0"), "{metrics}");
    wait_until("the slice's next pass", Duration::from_secs(60), async || {
        stalled_reason(&env.client, "refused").await.is_none()
    })
    .await;
    let next_pass = fixed.elapsed();
    println!("the stalled slice ran again {next_pass:?} after the metadata server answers");
    assert!(next_pass <= Duration::from_secs(10), "{next_pass:?}");
}
