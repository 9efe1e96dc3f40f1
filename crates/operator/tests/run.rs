//! `tpu-operator run` as a process against kube-emulator (served on a loopback socket, with a
//! kubeconfig) and gcp-emulator (accelerated clock), both in the test process: it reconciles an
//! example to Ready, serves /metrics /healthz /readyz, exits 0 on SIGTERM releasing its lease, and
//! of two replicas only the lease holder acts until it is killed, then the other takes over.

use std::{
    net::{SocketAddr, TcpListener},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{DynamicObject, PostParams},
    discovery::ApiResource,
};
use tpu_operator_api::TpuSlice;

const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");
const LEASE: &str = "tpu-operator";
/// Short, so the takeover test is fast; the operator renews 1 s before expiry.
const LEASE_SECONDS: u64 = 3;

/// Both emulators and a kubeconfig for the Kubernetes one.
struct Env {
    /// Always the emulator (these checks need no real control plane): served on a socket with a
    /// kubeconfig for the processes, reached in-process by `client`.
    cluster: test_kit::TestCluster,
    client: kube::Client,
    gcp: gcp_emulator::Emulator,
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
        }
    }

    /// Starts a replica with its own metrics port.
    fn replica(&self, identity: &str) -> Replica {
        let metrics = free_port();
        let child = Command::new(BIN)
            .arg("run")
            .arg("--kubeconfig")
            .arg(self.cluster.kubeconfig())
            .args(["--gcp-emulator", &self.gcp.url()])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--identity", identity])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")])
            .args([
                "--poll-active",
                "100ms",
                "--poll-stable",
                "1s",
                "--poll-capacity",
                "200ms",
            ])
            .args(["--cluster-id", "run-test", "--project", "demo-project"])
            .env("RUST_LOG", "warn,tpu_operator=info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tpu-operator run");
        Replica {
            child,
            base: format!("http://{metrics}"),
        }
    }

    async fn holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "default");
        leases.get_opt(LEASE).await.unwrap()?.spec?.holder_identity
    }

    /// Creates the TpuSlice of examples/spot-queued-slice.yaml under `name`.
    async fn create_slice(&self, name: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/spot-queued-slice.yaml");
        let mut obj: DynamicObject = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        obj.metadata.name = Some(name.into());
        obj.metadata.namespace = Some("default".into());
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            "default",
            &ApiResource::erase::<TpuSlice>(&()),
        );
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create TpuSlice");
    }

    async fn wait_ready(&self, name: &str) {
        let api: Api<TpuSlice> = Api::namespaced(self.client.clone(), "default");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let slice = api.get(name).await.unwrap();
            let ready = slice.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "TpuSlice {name} never became Ready: {:#?}",
                slice.status
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

struct Replica {
    child: Child,
    base: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let resp = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.text().await.ok()?))
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.get("/readyz").await.map(|(s, _)| s) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "replica at {} never became ready",
                self.base
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn leading(&self) -> bool {
        self.get("/metrics")
            .await
            .is_some_and(|(_, body)| body.lines().any(|l| l == "tpu_operator_leader 1"))
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Waits for the process to exit and returns whether it exited 0.
    fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "tpu-operator did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

async fn wait_until<F: AsyncFnMut() -> bool>(what: &str, limit: Duration, mut cond: F) -> Duration {
    let started = Instant::now();
    while !cond().await {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_serves_metrics_and_health_and_exits_cleanly_on_sigterm() {
    let env = Env::start().await;
    let mut a = env.replica("replica-a");
    a.wait_ready().await;
    assert_eq!(a.get("/healthz").await, Some((200, "ok".into())));
    wait_until("replica-a to lead", Duration::from_secs(30), async || {
        a.leading().await
    })
    .await;

    env.create_slice("run-slice").await;
    env.wait_ready("run-slice").await;
    assert!(env.gcp.call_count("tpu", "queuedResources.create") >= 1);

    let (status, metrics) = a.get("/metrics").await.expect("/metrics answers");
    assert_eq!(status, 200);
    for needle in [
        "tpu_operator_reconciles_total{kind=\"TpuSlice\"}",
        "tpu_operator_reconcile_duration_seconds_count{kind=\"TpuSlice\"}",
        "gcp_calls_total{service=\"tpu\"",
        "tpu_operator_leader 1",
    ] {
        assert!(metrics.contains(needle), "/metrics lacks {needle}:\n{metrics}");
    }

    a.signal("-TERM");
    assert!(a.wait_exit(Duration::from_secs(30)), "SIGTERM must exit 0");
    assert_eq!(env.holder().await, None, "a clean shutdown releases the lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_replica_stays_passive_until_the_leader_is_killed_then_takes_over() {
    let env = Env::start().await;
    let a = env.replica("replica-a");
    a.wait_ready().await;
    wait_until(
        "replica-a to hold the lease",
        Duration::from_secs(30),
        async || env.holder().await.as_deref() == Some("replica-a"),
    )
    .await;

    let mut b = env.replica("replica-b");
    b.wait_ready().await;
    // Over more than a full lease period (so at least one renewal by A happened), B never leads.
    let passive_until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 1);
    while Instant::now() < passive_until {
        assert!(
            !b.leading().await,
            "the standby must not run controllers while A leads"
        );
        assert_eq!(env.holder().await.as_deref(), Some("replica-a"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // SIGKILL: A cannot release the lease; B must wait for it to expire, then take over.
    drop(a);
    let took = wait_until("replica-b to take over", Duration::from_secs(30), async || {
        env.holder().await.as_deref() == Some("replica-b") && b.leading().await
    })
    .await;
    println!("replica-b took over {took:?} after replica-a was killed");
    // Expiry is at most one lease duration after A's last renewal; allow one more for polling.
    assert!(
        took <= Duration::from_secs(2 * LEASE_SECONDS),
        "takeover took {took:?}, more than twice the {LEASE_SECONDS}s lease"
    );

    // The new leader acts.
    env.create_slice("after-takeover").await;
    env.wait_ready("after-takeover").await;

    b.signal("-TERM");
    assert!(b.wait_exit(Duration::from_secs(30)), "SIGTERM must exit 0");
}
