//! `tpu-operator run` as a child process, for the suites that start the real binary against
//! kube-emulator on a socket (run.rs, leader.rs, metadata_server.rs): the command with the fast
//! poll intervals they share, the process with its metrics / health endpoints, and waiting.
#![allow(dead_code)]

use std::{
    net::{SocketAddr, TcpListener},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use kube::{
    Api,
    api::{DynamicObject, PostParams},
    discovery::ApiResource,
};
use tpu_operator_api::TpuSlice;

pub const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");

/// `BIN run` against `kubeconfig`, serving metrics on `metrics`, with fast polls, as cluster
/// `cluster_id` in project `demo-project`; callers add the flags their test is about.
pub fn run_command(bin: &str, kubeconfig: &Path, metrics: SocketAddr, cluster_id: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-addr", &metrics.to_string()])
        .args([
            "--poll-active",
            "100ms",
            "--poll-stable",
            "1s",
            "--poll-capacity",
            "200ms",
        ])
        .args(["--cluster-id", cluster_id, "--project", "demo-project"])
        .env("RUST_LOG", "warn,tpu_operator=info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

/// A running `tpu-operator run`, killed when dropped.
pub struct OperatorProcess {
    child: Child,
    base: String,
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OperatorProcess {
    /// Spawns `cmd`, whose metrics server listens on `metrics`.
    pub fn spawn(mut cmd: Command, metrics: SocketAddr) -> Self {
        Self {
            child: cmd.spawn().expect("spawn tpu-operator run"),
            base: format!("http://{metrics}"),
        }
    }

    /// Status and body of a GET on the metrics server.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let resp = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.text().await.ok()?))
    }

    pub async fn wait_ready(&self) {
        wait_until("a replica to be ready", Duration::from_secs(60), async || {
            self.get("/readyz").await.map(|(s, _)| s) == Some(200)
        })
        .await;
    }

    /// Whether its metrics say it holds the lease.
    pub async fn leading(&self) -> bool {
        self.get("/metrics")
            .await
            .is_some_and(|(_, body)| body.lines().any(|l| l == "tpu_operator_leader 1"))
    }

    /// Sends `signal` (`-TERM`, `-KILL`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// The exit status once exited: `Some(true)` for 0, `None` while running.
    pub fn exited(&mut self) -> Option<bool> {
        self.child.try_wait().unwrap().map(|s| s.success())
    }

    /// Waits for the process to exit: `Some(success)`, or `None` if it still runs after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<bool> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(exited) = self.exited() {
                return Some(exited);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Polls `cond` every 10 ms until it holds; the time it took. Panics after `limit`.
pub async fn wait_until<F: AsyncFnMut() -> bool>(what: &str, limit: Duration, mut cond: F) -> Duration {
    let started = Instant::now();
    while !cond().await {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

/// Creates the TpuSlice of examples/spot-queued-slice.yaml in `default` under `name`.
pub async fn create_slice(client: &kube::Client, name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/spot-queued-slice.yaml");
    let mut obj: DynamicObject = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    obj.metadata.name = Some(name.into());
    obj.metadata.namespace = Some("default".into());
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::erase::<TpuSlice>(&()));
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create TpuSlice");
}

/// Waits until the TpuSlice `name` in `default` is `Ready=True`.
pub async fn wait_slice_ready(client: &kube::Client, name: &str) {
    let api: Api<TpuSlice> = Api::namespaced(client.clone(), "default");
    wait_until(
        &format!("TpuSlice {name} Ready"),
        Duration::from_secs(60),
        async || {
            api.get(name).await.unwrap().status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        },
    )
    .await;
}
