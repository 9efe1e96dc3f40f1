//! What `tests/install_paths.rs` drives: kubectl and helm against the admin kubeconfig (as a user
//! runs them), the CRDs, and `tpu-operator run` as the installed ServiceAccount.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::support::{documents, repo_root};

pub const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");
/// How long any one wait may take: the real control plane shares two cores with the rest of CI.
pub const WAIT: Duration = Duration::from_secs(180);

/// The names of every CRD the api crate generates (`tpu-operator crds`): the one CRD list.
pub fn crd_names() -> Vec<String> {
    tpu_operator_api::crds::all()
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect()
}

/// kubectl and helm with the admin kubeconfig; helm's homes and kubectl's cache under `dir`.
pub struct Cli {
    pub kubeconfig: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Cli {
    pub fn new(kubeconfig: &Path) -> Self {
        Self {
            kubeconfig: kubeconfig.to_owned(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(test_tools::kubectl());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    pub fn helm_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(test_tools::helm());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.path().join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.path().join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.path().join("helm/data"))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        ok(self.kubectl_cmd(args))
    }

    pub fn helm(&self, args: &[&str]) -> String {
        ok(self.helm_cmd(args))
    }

    /// Writes `yaml` to a file under `dir` and returns its path.
    pub fn file(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        path
    }

    /// Waits until every CRD of the api crate is Established.
    pub async fn wait_crds_established(&self) {
        for name in crd_names() {
            wait(&format!("CRD {name} Established"), async || {
                let out = self
                    .kubectl_cmd(&["get", "crd", &name, "-o", "json"])
                    .output()
                    .ok()?;
                let crd: Value = serde_json::from_slice(&out.stdout).ok()?;
                crd["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
                    .then_some(())
            })
            .await;
        }
    }

    /// The api crate's CRDs that exist on the server.
    pub fn crds_present(&self) -> Vec<String> {
        crd_names()
            .into_iter()
            .filter(|n| {
                let out = self.kubectl_cmd(&["get", "crd", n, "--ignore-not-found", "-o", "name"]);
                !ok(out).trim().is_empty()
            })
            .collect()
    }

    /// Deletes the project's CRDs (left by an earlier suite or path) and waits until they are
    /// gone, so each path proves that it installs every one of them.
    pub async fn remove_crds(&self) {
        let names = crd_names();
        let mut args = vec!["delete", "crd", "--ignore-not-found", "--wait=false"];
        args.extend(names.iter().map(String::as_str));
        self.kubectl(&args);
        wait("the project's CRDs gone", async || {
            self.crds_present().is_empty().then_some(())
        })
        .await;
    }

    /// Waits until none of the objects of `manifest` (a YAML stream) exists any more.
    pub async fn wait_all_gone(&self, what: &str, manifest: &str) {
        let file = self.file("left.yaml", manifest);
        let file = file.to_str().unwrap();
        let mut left = String::new();
        let started = Instant::now();
        while started.elapsed() < WAIT {
            left = self.kubectl(&["get", "-f", file, "--ignore-not-found", "-o", "name"]);
            if left.trim().is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("{what}: left behind after {WAIT:?}:\n{left}");
    }
}

/// The documents of `manifest` that are not CRDs, as one YAML stream.
pub fn without_crds(manifest: &str) -> String {
    documents(manifest)
        .into_iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .map(|d| format!("---\n{}", serde_yaml::to_string(&d).unwrap()))
        .collect()
}

/// The CRD names of `manifest`, sorted.
pub fn crds_in(manifest: &str) -> Vec<String> {
    let mut names: Vec<String> = documents(manifest)
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Runs `cmd`, which must succeed; returns its stdout.
pub fn ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(out.status.success(), "{cmd:?} failed:\n{}", both(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `cmd`, which must fail; returns its stdout and stderr.
pub fn fails(mut cmd: Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(!out.status.success(), "{cmd:?} succeeded:\n{}", both(&out));
    both(&out)
}

fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub async fn wait<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `tpu-operator run` as the installed Deployment starts it (args `run --config` with the
/// ConfigMap's config.yaml, env POD_NAME / POD_NAMESPACE), authenticated as the installed
/// ServiceAccount with a TokenRequest token. Only what a pod gets from the cluster is a flag: the
/// metrics address, gcp-emulator's URL, faster polls. Killed when dropped.
pub struct Operator {
    child: Child,
    pub readyz: String,
    log: PathBuf,
}

impl Operator {
    pub fn start(cli: &Cli, namespace: &str, name: &str, gcp: &str) -> Self {
        Self::start_binary(Path::new(BIN), &format!("{name}-0"), cli, namespace, name, gcp)
    }

    /// [`Operator::start`] with another release's binary, as pod `pod` (the Lease holder's
    /// identity, so two releases can run side by side during a rolling update).
    pub fn start_binary(bin: &Path, pod: &str, cli: &Cli, namespace: &str, name: &str, gcp: &str) -> Self {
        let cm = cli.kubectl(&["get", "configmap", name, "-n", namespace, "-o", "json"]);
        let cm: Value = serde_json::from_str(&cm).unwrap();
        let config = cli.file("config.yaml", cm["data"]["config.yaml"].as_str().unwrap());
        let token = cli.kubectl(&["create", "token", name, "-n", namespace, "--duration=1h"]);
        let sa = cli.file("sa.kubeconfig", &token_kubeconfig(&cli.kubeconfig, token.trim()));
        let metrics = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let log = cli.dir.path().join(format!("{pod}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(&config)
            .arg("--kubeconfig")
            .arg(&sa)
            .args(["--gcp-emulator", gcp, "--metrics-addr", &metrics.to_string()])
            .args([
                "--poll-active",
                "200ms",
                "--poll-stable",
                "2s",
                "--poll-capacity",
                "500ms",
            ])
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", namespace)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn tpu-operator run");
        Self {
            child,
            readyz: format!("http://{metrics}/readyz"),
            log,
        }
    }

    /// The operator's `/metrics` (Prometheus text).
    pub async fn metrics(&self) -> Option<String> {
        let url = self.readyz.replace("/readyz", "/metrics");
        reqwest::get(url).await.ok()?.text().await.ok()
    }

    pub async fn wait_ready(&self) {
        wait("the operator's /readyz 200", async || {
            let status = reqwest::get(&self.readyz).await.ok()?.status();
            (status == 200).then_some(())
        })
        .await;
    }

    /// SIGTERM, as a rolling update stops the old pod, and the exit: the leader releases its
    /// Lease on the way out.
    pub async fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        ok({
            let mut kill = Command::new("kill");
            kill.args(["-TERM", &pid]);
            kill
        });
        wait("the operator to exit after SIGTERM", async || {
            self.child.try_wait().unwrap().map(|_| ())
        })
        .await;
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- last lines of the operator's log ---\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// A kubeconfig for the admin kubeconfig's cluster that authenticates with `token` only.
fn token_kubeconfig(admin_kubeconfig: &Path, token: &str) -> String {
    let admin: Value = serde_yaml::from_str(&std::fs::read_to_string(admin_kubeconfig).unwrap()).unwrap();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    })
    .to_string()
}

/// The README's TpuPolicy (its `kubectl apply -f - <<'EOF'` block) and `kubectl apply -f
/// examples/quickstart.yaml`; the pipeline Succeeded; its deletion leaves no cloud resource.
pub async fn readme_policy_and_quickstart_succeed(cli: &Cli, gcp: &gcp_emulator::Emulator, path: &str) {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let policy = readme
        .split("kubectl apply -f - <<'EOF'\n")
        .nth(1)
        .and_then(|rest| rest.split("\nEOF").next())
        .expect("the README's TpuPolicy heredoc");
    let policy_file = cli.file("policy.yaml", policy);
    let name: Value = serde_yaml::from_str(policy).unwrap();
    let name = name["metadata"]["name"].as_str().unwrap().to_string();
    cli.kubectl(&["apply", "-f", policy_file.to_str().unwrap()]);
    let quickstart = repo_root().join("examples/quickstart.yaml");
    cli.kubectl(&["apply", "-f", quickstart.to_str().unwrap()]);
    wait(&format!("{path}: quickstart Succeeded"), async || {
        let phase = cli.kubectl(&[
            "get",
            "tpl",
            "quickstart",
            "-n",
            "default",
            "-o",
            "jsonpath={.status.phase}",
        ]);
        (phase == "Succeeded").then_some(())
    })
    .await;
    let selected = wait(&format!("{path}: TpuPolicy/{name} status"), async || {
        let n = cli.kubectl(&[
            "get",
            "tpupolicy",
            &name,
            "-o",
            "jsonpath={.status.selectedNamespaces}",
        ]);
        n.parse::<u32>().ok().filter(|n| *n >= 1)
    })
    .await;
    println!(
        "install[{path}]: TpuPolicy/{name} selects {selected} namespace; TrainingPipeline/quickstart Succeeded"
    );
    cli.kubectl(&["delete", "-f", quickstart.to_str().unwrap(), "--wait"]);
    wait(&format!("{path}: no cloud resource left"), async || {
        gcp.billable_resources().is_empty().then_some(())
    })
    .await;
}
