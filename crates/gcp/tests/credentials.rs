//! Application Default Credentials against a fake GKE metadata server, through the path the
//! operator takes on GKE: `Gcp::connect` with `CredentialsMode::Adc`, google-cloud-auth's ADC
//! finding no key file and falling back to the metadata server named by `GCE_METADATA_HOST`.
//!
//! The fake speaks the GCE metadata protocol (`Metadata-Flavor: Google` required,
//! `/computeMetadata/v1/instance/service-accounts/default/token`, `/project/project-id`,
//! `/universe/universe-domain`) and is scripted to answer, refuse with 403 (a Workload Identity
//! binding that is missing or still propagating), or accept connections and never answer. The
//! same server plays the TPU API (`/tpu/v2/...`) and records the `Authorization` header it gets.
//!
//! Environment variables are process-global: they are set once, before any test does anything
//! else (every test starts with [`fake`]), to one shared fake server, and the tests take turns
//! ([`TURN`]) because they script that server.

use std::{
    net::SocketAddr,
    sync::{
        Arc, LazyLock, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tpu_operator_gcp::{
    CredentialsMode, ErrorKind, Gcp, GcpConfig, GcpMetrics, Service, credentials::FailureKind,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Tokens (and the universe domain) are handed out.
    Answer,
    /// The token endpoint answers 403, as GKE's metadata server does without a Workload Identity
    /// binding.
    Forbidden,
    /// Every metadata request is accepted and never answered.
    Hang,
}

struct Fake {
    addr: SocketAddr,
    mode: Mutex<Mode>,
    /// Token requests received (any outcome).
    token_requests: AtomicU64,
    /// Tokens handed out.
    tokens: AtomicU64,
    /// `Authorization` header of the last TPU API request.
    last_authorization: Mutex<Option<String>>,
}

impl Fake {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }
}

/// One test at a time scripts the shared fake server.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shared fake server, on its own thread and runtime (it outlives every test's runtime), and
/// the environment that points ADC at it, set before any client exists.
static FAKE: LazyLock<Arc<Fake>> = LazyLock::new(|| {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fake metadata server");
    listener.set_nonblocking(true).unwrap();
    let fake = Arc::new(Fake {
        addr: listener.local_addr().unwrap(),
        mode: Mutex::new(Mode::Answer),
        token_requests: AtomicU64::new(0),
        tokens: AtomicU64::new(0),
        last_authorization: Mutex::new(None),
    });
    let home = std::env::temp_dir().join(format!("tpu-operator-credentials-test-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    // SAFETY: runs once, inside the LazyLock every test forces before it starts a client or a
    // runtime of its own, so no other thread of this process reads the environment meanwhile.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("GCE_METADATA_HOST", fake.addr.to_string());
        // ADC must find no key file and no gcloud credentials: the metadata server it is.
        std::env::remove_var("GOOGLE_APPLICATION_CREDENTIALS");
        std::env::set_var("HOME", &home);
        std::env::set_var("CLOUDSDK_CONFIG", home.join("gcloud"));
        std::env::remove_var("GOOGLE_CLOUD_UNIVERSE_DOMAIN");
    }
    let state = fake.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = Router::new()
                .route("/computeMetadata/v1/{*path}", get(metadata))
                .route("/tpu/v2/{*name}", get(tpu_get))
                .with_state(state);
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    fake
});

async fn metadata(State(fake): State<Arc<Fake>>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
        return (StatusCode::FORBIDDEN, "Missing required header: Metadata-Flavor").into_response();
    }
    let is_token = path == "instance/service-accounts/default/token";
    if is_token {
        fake.token_requests.fetch_add(1, Ordering::SeqCst);
    }
    match fake.mode() {
        Mode::Hang => std::future::pending::<Response>().await,
        Mode::Forbidden if is_token => (
            StatusCode::FORBIDDEN,
            "Your Kubernetes service account (default/tpu-operator) is not annotated with a target \
             Google service account, which is a requirement for using Workload Identity.",
        )
            .into_response(),
        _ => match path.as_str() {
            "instance/service-accounts/default/token" => {
                let n = fake.tokens.fetch_add(1, Ordering::SeqCst) + 1;
                let body = serde_json::json!({
                    "access_token": format!("token-{n}"),
                    "expires_in": 3599,
                    "token_type": "Bearer",
                });
                (
                    [
                        ("metadata-flavor", "Google"),
                        ("content-type", "application/json"),
                    ],
                    body.to_string(),
                )
                    .into_response()
            }
            "project/project-id" => ([("metadata-flavor", "Google")], "demo-project").into_response(),
            "universe/universe-domain" => ([("metadata-flavor", "Google")], "googleapis.com").into_response(),
            _ => (StatusCode::NOT_FOUND, "not found").into_response(),
        },
    }
}

async fn tpu_get(State(fake): State<Arc<Fake>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    *fake.last_authorization.lock().unwrap() = authorization.clone();
    if authorization.is_none_or(|a| !a.starts_with("Bearer token-")) {
        return (StatusCode::UNAUTHORIZED, "no bearer token").into_response();
    }
    let body = serde_json::json!({ "name": name, "state": "READY" });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

fn fake() -> Arc<Fake> {
    FAKE.clone()
}

const NODE: &str = "projects/demo-project/locations/us-central2-b/nodes/n1";

fn config(fake: &Fake, call_timeout: Duration) -> GcpConfig {
    let base = format!("http://{}", fake.addr);
    GcpConfig {
        tpu_endpoint: format!("{base}/tpu"),
        dataproc_endpoint: format!("{base}/dataproc"),
        vertex_endpoint: format!("{base}/vertex"),
        storage_endpoint: base.clone(),
        compute_endpoint: base.clone(),
        logging_endpoint: format!("{base}/logging"),
        iam_credentials_endpoint: format!("{base}/iamcredentials"),
        credentials: CredentialsMode::Adc,
        emulator: None,
        call_timeout,
    }
}

async fn connect(fake: &Fake, call_timeout: Duration) -> (Gcp, GcpMetrics, Registry) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut registry = Registry::default();
    let metrics = GcpMetrics::register(&mut registry);
    let gcp = tokio::time::timeout(
        Duration::from_secs(20),
        Gcp::connect(config(fake, call_timeout), metrics.clone()),
    )
    .await
    .expect("Gcp::connect returns")
    .expect("clients build");
    (gcp, metrics, registry)
}

/// Item 1: a 403 from the metadata server (Workload Identity binding missing on install day)
/// no longer stops token refresh for the life of the process: once the binding works, token
/// fetches resume and calls succeed, without a restart; meanwhile the failure is counted, and
/// reported as unhealthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_fetches_resume_after_a_metadata_server_403_without_restart() {
    let fake = fake();
    let _turn = TURN.lock().await;
    fake.set(Mode::Forbidden);
    let (gcp, metrics, registry) = connect(&fake, Duration::from_secs(5)).await;

    let refused = gcp
        .tpu
        .get_node(NODE)
        .await
        .expect_err("no token while the binding is missing");
    assert_eq!(refused.kind, ErrorKind::Unauthenticated, "{refused}");
    assert!(metrics.credential_errors(FailureKind::Permanent) >= 1);
    let unhealthy = metrics
        .credentials_failure()
        .expect("credentials reported as failing");
    assert!(unhealthy.contains("permanent"), "{unhealthy}");

    // The binding is fixed. Google's credentials alone would return the cached 403 forever.
    fake.set(Mode::Answer);
    let fixed = Instant::now();
    let before = fake.token_requests.load(Ordering::SeqCst);
    let node = loop {
        match gcp.tpu.get_node(NODE).await {
            Ok(node) => break node,
            Err(err) => {
                assert!(
                    fixed.elapsed() < Duration::from_secs(15),
                    "still failing 15 s after the fix: {err}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let recovered_in = fixed.elapsed();
    println!("calls succeed {recovered_in:?} after the metadata server answers again");
    assert_eq!(node.name, NODE);
    assert!(
        fake.token_requests.load(Ordering::SeqCst) > before,
        "token fetches resumed"
    );
    let authorization = fake
        .last_authorization
        .lock()
        .unwrap()
        .clone()
        .unwrap_or_default();
    assert!(authorization.starts_with("Bearer token-"), "{authorization}");
    assert!(metrics.credential_rebuilds() >= 1);
    assert_eq!(metrics.credentials_failure(), None, "healthy again");
    // Recovery is bounded by the first backoff step (1 s) plus a call, not by a restart.
    assert!(recovered_in < Duration::from_secs(5), "{recovered_in:?}");

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"gcp_credentials_errors_total{kind="permanent"}"#),
        "{text}"
    );
    assert!(text.contains("gcp_credentials_rebuilds_total"), "{text}");
    assert!(text.contains("gcp_credentials_failing 0"), "{text}");
}

/// Item 2: a metadata server that accepts connections and never answers makes every cloud call
/// fail within its deadline (`call_timeout`, the wait for a token included), counted as a failed
/// call and as a credentials timeout; calls succeed again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_metadata_server_fails_calls_within_the_deadline_and_counts_them() {
    let fake = fake();
    let _turn = TURN.lock().await;
    fake.set(Mode::Hang);
    let call_timeout = Duration::from_secs(2);
    let (gcp, metrics, _registry) = connect(&fake, call_timeout).await;

    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(30), gcp.tpu.get_node(NODE))
        .await
        .expect("the call ends by itself")
        .expect_err("no token, no call");
    let took = started.elapsed();
    println!("TPU call with a hanging metadata server failed after {took:?}: {err}");
    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert!(took <= call_timeout + Duration::from_millis(500), "{took:?}");
    assert_eq!(metrics.calls(Service::Tpu, "nodes.get", "transient"), 1);
    assert!(metrics.credential_errors(FailureKind::Timeout) >= 1);
    assert!(metrics.credentials_failure().is_some());

    // The storage client reads credentials by itself: bounded too.
    let started = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        gcp.storage.prefix_exists("gs://bucket/out/"),
    )
    .await
    .expect("the call ends by itself")
    .expect_err("no token, no call");
    assert!(
        started.elapsed() <= call_timeout + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert_eq!(metrics.calls(Service::Storage, "objects.list", "transient"), 1);

    // The metadata server answers again: the stuck token fetch is replaced, calls succeed.
    fake.set(Mode::Answer);
    let fixed = Instant::now();
    loop {
        match gcp.tpu.get_node(NODE).await {
            Ok(_) => break,
            Err(err) => {
                assert!(fixed.elapsed() < Duration::from_secs(15), "still failing: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    println!(
        "calls succeed {:?} after the metadata server answers again",
        fixed.elapsed()
    );
    assert_eq!(metrics.credentials_failure(), None);
}

/// Item 3: building the clients asks the metadata server (for the universe domain); with a
/// server that never answers, start-up still returns, within half the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_the_clients_returns_within_its_bound_when_the_metadata_server_hangs() {
    let fake = fake();
    let _turn = TURN.lock().await;
    fake.set(Mode::Hang);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let call_timeout = Duration::from_secs(2);
    let started = Instant::now();
    let built = tokio::time::timeout(
        Duration::from_secs(20),
        Gcp::connect(config(&fake, call_timeout), GcpMetrics::new()),
    )
    .await;
    let took = started.elapsed();
    println!("Gcp::connect with a hanging metadata server returned after {took:?}");
    built.expect("Gcp::connect returns").expect("clients build");
    assert!(took <= call_timeout, "{took:?}");
    fake.set(Mode::Answer);
}
