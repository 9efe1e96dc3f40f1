//! `tpu-operator run` as a process against kube-emulator (served on a loopback socket, with a
//! kubeconfig) and gcp-emulator (accelerated clock), both in the test process: it reconciles an
//! example to Ready, serves /metrics /healthz /readyz, exits 0 on SIGTERM releasing its lease, and
//! of two replicas only the lease holder acts until it is killed, then the other takes over.

mod process;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use process::{
    BIN, OperatorProcess as Replica, create_slice, free_port, run_command, wait_slice_ready, wait_until,
};

const LEASE: &str = "tpu-operator";
/// Short, so the takeover test is fast.
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
        let mut cmd = run_command(BIN, self.cluster.kubeconfig(), metrics, "run-test");
        cmd.args(["--gcp-emulator", &self.gcp.url()])
            .args(["--identity", identity])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")]);
        Replica::spawn(cmd, metrics)
    }

    async fn holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "default");
        leases.get_opt(LEASE).await.unwrap()?.spec?.holder_identity
    }

    async fn create_slice(&self, name: &str) {
        create_slice(&self.client, name).await;
    }

    async fn wait_ready(&self, name: &str) {
        wait_slice_ready(&self.client, name).await;
    }
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
    assert_eq!(
        a.wait_exit(Duration::from_secs(30)),
        Some(true),
        "SIGTERM must exit 0"
    );
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
    assert_eq!(
        b.wait_exit(Duration::from_secs(30)),
        Some(true),
        "SIGTERM must exit 0"
    );
}
