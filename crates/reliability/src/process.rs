//! The real `tpu-operator` binary as a child process: spawn, SIGKILL, and read what the kernel
//! and its /metrics endpoint say about it (peak RSS, CPU seconds, reconciles).
//!
//! Which binary: [`OperatorBuild::Profile`] is the one next to the running test executable
//! (`target/<profile>/`, default features), what the reliability suites run;
//! [`OperatorBuild::Shipped`] is the image's build (release, `--no-default-features`, exactly the
//! Dockerfile's cargo command), what the benches measure. [`operator_binary`] first runs `cargo
//! build` for it so it is never stale (a no-op when it is fresh;
//! `TPU_OPERATOR_RELIABILITY_NO_BUILD=1` skips it).

use std::{
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

/// `target/<profile>` of the running executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current executable");
    let mut dir = exe.parent().expect("executable directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Which `tpu-operator` binary a suite or bench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorBuild {
    /// The running executable's profile with default features (the reliability suites).
    Profile,
    /// What the image ships: release, `--no-default-features` (the benches: their figures are
    /// the binary users run, issue 38).
    Shipped,
}

/// What a bench measures: the image's build of the operator (built once, then reused), or the
/// binary `TPU_OPERATOR_BINARY` names (see [`operator_binary`]).
pub fn bench_binary() -> PathBuf {
    operator_binary(OperatorBuild::Shipped)
}

/// Path to an up-to-date `tpu-operator` binary of `build`. For [`OperatorBuild::Shipped`], the
/// binary `TPU_OPERATOR_BINARY` names instead, when set (to measure another build, e.g. a debug
/// one while the release build would take too long).
pub fn operator_binary(build: OperatorBuild) -> PathBuf {
    if build == OperatorBuild::Shipped
        && let Some(bin) = std::env::var_os("TPU_OPERATOR_BINARY")
    {
        return PathBuf::from(bin);
    }
    let profile = profile_dir();
    let dir = match build {
        OperatorBuild::Profile => profile.clone(),
        OperatorBuild::Shipped => profile.with_file_name("release"),
    };
    let bin = dir.join("tpu-operator");
    if std::env::var_os("TPU_OPERATOR_RELIABILITY_NO_BUILD").is_none() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "tpu-operator", "--bin", "tpu-operator"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if build == OperatorBuild::Shipped {
            cmd.arg("--no-default-features");
        }
        if let Some(target) = dir.parent() {
            cmd.arg("--target-dir").arg(target);
        }
        cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")));
        match cmd.status() {
            Ok(s) if s.success() => {}
            other => eprintln!(
                "NOTICE: `cargo build -p tpu-operator` failed ({other:?}); using {} as it is",
                bin.display()
            ),
        }
    }
    assert!(
        bin.exists(),
        "{} not found: run `cargo build -p tpu-operator` first",
        bin.display()
    );
    bin
}

/// `bin`, or `bin` under the profiler or tracer named by `TPU_OPERATOR_RELIABILITY_WRAP`
/// (whitespace-separated, e.g. `heaptrack -o /tmp/operator`: the bench then measures the
/// wrapper's process, so its RSS and CPU figures are the wrapper's, not the operator's).
fn wrapped(bin: &Path) -> Command {
    let wrap = std::env::var("TPU_OPERATOR_RELIABILITY_WRAP").unwrap_or_default();
    let mut words = wrap.split_whitespace();
    match words.next() {
        None => Command::new(bin),
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(bin);
            cmd
        }
    }
}

pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
}

pub struct OperatorProcess {
    child: Child,
    pub metrics: SocketAddr,
}

impl OperatorProcess {
    /// `tpu-operator run` against the kubeconfig and gcp-emulator URL, leader election off,
    /// with extra flags (poll intervals, ...).
    pub fn spawn(bin: &Path, kubeconfig: &Path, gcp_url: &str, extra: &[&str]) -> Self {
        Self::spawn_in(bin, kubeconfig, gcp_url, Some(crate::world::NAMESPACE), extra)
    }

    /// [`Self::spawn`] watching `namespace`, or every namespace (`None`).
    pub fn spawn_in(
        bin: &Path,
        kubeconfig: &Path,
        gcp_url: &str,
        namespace: Option<&str>,
        extra: &[&str],
    ) -> Self {
        Self::spawn_as(bin, kubeconfig, gcp_url, namespace, None, extra)
    }

    /// [`Self::spawn_in`] as one of several replicas electing a leader through the Lease
    /// `tpu-operator` in `default`, as `identity`.
    pub fn spawn_replica(
        bin: &Path,
        kubeconfig: &Path,
        gcp_url: &str,
        namespace: Option<&str>,
        identity: &str,
        extra: &[&str],
    ) -> Self {
        Self::spawn_as(bin, kubeconfig, gcp_url, namespace, Some(identity), extra)
    }

    fn spawn_as(
        bin: &Path,
        kubeconfig: &Path,
        gcp_url: &str,
        namespace: Option<&str>,
        replica: Option<&str>,
        extra: &[&str],
    ) -> Self {
        let metrics = free_port();
        let namespace: Vec<&str> = namespace.map(|ns| vec!["--namespace", ns]).unwrap_or_default();
        let election: Vec<&str> = match replica {
            Some(identity) => vec![
                "--leader-elect=true",
                "--identity",
                identity,
                "--lease-namespace",
                "default",
            ],
            None => vec!["--leader-elect=false"],
        };
        let child = wrapped(bin)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--gcp-emulator", gcp_url])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(election)
            .args(["--cluster-id", "reliability", "--project", "demo-project"])
            .args(namespace)
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("TPU_OPERATOR_RELIABILITY_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tpu-operator run");
        Self { child, metrics }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap.
    pub fn sigkill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn proc_status_kib(&self, key: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// Peak resident set size (VmHWM), KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.proc_status_kib("VmHWM:")
    }

    /// Current resident set size (VmRSS), KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        self.proc_status_kib("VmRSS:")
    }

    /// Current anonymous (heap, stacks) and file-backed (the binary's code and data) resident
    /// memory, KiB.
    pub fn rss_split_kib(&self) -> (Option<u64>, Option<u64>) {
        (self.proc_status_kib("RssAnon:"), self.proc_status_kib("RssFile:"))
    }

    /// User + system CPU seconds so far (from /proc/PID/stat, 100 ticks per second).
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds_of(&self.pid().to_string())
    }

    pub async fn scrape(&self) -> Option<String> {
        let resp = reqwest::get(format!("http://{}/metrics", self.metrics))
            .await
            .ok()?;
        resp.text().await.ok()
    }

    /// The binary's `tpu_operator_build_info` labels as one line (`version=… profile=…
    /// features=… libc=…`), for a bench to print which build it measured.
    pub async fn build_info(&self) -> Option<String> {
        let text = self.scrape().await?;
        let line = text.lines().find(|l| l.starts_with("tpu_operator_build_info{"))?;
        let labels = line.split_once('{')?.1.rsplit_once('}')?.0;
        Some(labels.replace("\",", "\" ").replace('"', ""))
    }

    /// Waits until /readyz answers 200.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Ok(r) = reqwest::get(format!("http://{}/readyz", self.metrics)).await
                && r.status().is_success()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sum of a counter family in Prometheus text (e.g. `tpu_operator_reconciles_total`).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// User + system CPU seconds of the process `pid` (`"self"` for this one), from `/proc`.
pub fn cpu_seconds_of(pid: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}
