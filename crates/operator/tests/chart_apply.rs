//! The rendered chart against a live API server and the real binary: kubectl applies what
//! kube-emulator serves (the Namespace, the CRDs, the ConfigMaps) and it is accepted; then
//! `tpu-operator` is started exactly as the rendered Deployment starts it (its args, its env, the
//! ConfigMap's config file at the mounted path), becomes ready, takes the Lease in the pod's
//! namespace under the pod's name, reconciles an example, and serves every metric the dashboard and
//! alerts query.
//!
//! kube-emulator serves no ServiceAccount, RBAC, Service, Deployment, PodDisruptionBudget or
//! NetworkPolicy (crates/kube-emulator/README.md); `tests/chart.rs` checks those objects against
//! the Kubernetes API types instead, and CI's real control plane is the place to apply them.

mod support;

use std::{
    collections::BTreeSet,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::Value;
use support::{Helm, chart_dir, documents, find, repo_root};

/// Kinds kube-emulator serves (besides Namespace, which comes from deploy/namespace.yaml).
const SERVED: &[&str] = &[
    "CustomResourceDefinition",
    "ConfigMap",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];
const POD_NAME: &str = "tpu-operator-5d8f7c9b6-x2x7q";

async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = tokio::process::Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("kube-cache"))
        .args(args)
        .output()
        .await
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// kubectl with `input` on its stdin (the right-hand side of a shell pipe).
async fn kubectl_stdin(kubeconfig: &std::path::Path, args: &[&str], input: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("kube-cache"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?} < input failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scope_rendering_is_accepted_and_the_binary_runs_from_it() {
    rendered_chart_runs(&format!(
        "gcpEmulator.enabled=true,metrics.grafanaDashboard.enabled=true,metrics.kubeStateMetrics.enabled=true,{SWEEP}"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scope_rendering_is_accepted_and_the_binary_runs_from_it() {
    // Watches only `default`, where the example goes; the Lease stays in the pod's namespace.
    rendered_chart_runs(&format!(
        "gcpEmulator.enabled=true,scope=Namespace,watchNamespace=default,{SWEEP}"
    ))
    .await;
}

/// An orphan sweeper that looks where the test's orphan is and deletes it within seconds, so the
/// orphan metrics the alerts and the dashboard query have samples (prometheus-client leaves out
/// families without any).
/// `namespacesWithoutPolicy=Allow`: the example runs in `default`, which no policy selects here (the
/// chart denies such namespaces by default; tenancy is not what this suite is about).
const SWEEP: &str = "config.namespacesWithoutPolicy=Allow,\
                     config.clusterId=chart-apply,config.orphans=delete,config.orphanGracePeriod=5s,\
                     config.orphanSweepInterval=2s,config.orphanProjects={demo-project},\
                     config.orphanZones={europe-west4-b}";

async fn rendered_chart_runs(values: &str) {
    let started = Instant::now();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rendered = Helm::new().template(&["--include-crds", "--set", values]);
    let docs = documents(&rendered);

    // An empty API server: the CRDs come from the chart.
    let kube = kube_emulator::KubeEmulator::new();
    let server = kube
        .start("127.0.0.1:0")
        .await
        .expect("kube-emulator on a socket");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kube_emulator::kubeconfig(&server.url)).unwrap();

    let served = apply_served(&kubeconfig, dir.path(), &docs).await;
    apply_crds_as_notes_say(&kubeconfig).await;
    let not_served: BTreeSet<&str> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .filter(|k| !SERVED.contains(k))
        .collect();
    eprintln!(
        "applied {} objects to kube-emulator; not served there (checked by tests/chart.rs): {not_served:?}",
        served + 1
    );
    let deploy = find(&docs, "Deployment", Some("tpu-operator"));
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    let (mount, config_dir) = config_as_mounted(&kubeconfig, dir.path(), container).await;
    let args = deployment_args(container, &mount, &config_dir);
    // 600x emulated time: the example's spot slice gets its node (and so a cost estimate for the
    // spend gauges) within about a second.
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(600.0)
        .start()
        .await
        .expect("gcp-emulator");
    let metrics = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut cmd = operator_command(&args, &kubeconfig, &metrics, &gcp.url(), dir.path(), container);
    let mut child = cmd.spawn().expect("spawn tpu-operator");
    let pid = child.id().unwrap();

    let http = reqwest::Client::new();
    let base = format!("http://{metrics}");
    wait_ready(&http, &base, &mut child, dir.path()).await;
    wait_for_the_lease(&kubeconfig).await;
    make_orphan(&gcp).await;
    reconcile_the_example(&gcp, &kubeconfig).await;
    let exposition = scrape_until_every_family(&http, &base).await;
    eprintln!(
        "tpu-operator (debug build) ready and leading; RSS {:?} KiB",
        rss_kib(pid)
    );
    terminate_gracefully(&mut child, pid).await;

    assert_monitoring_queries_use_real_metrics(&exposition);
    eprintln!("{values}: took {:?}", started.elapsed());
}

/// Applies the rendered objects kube-emulator serves (after the namespace) server-side and waits
/// for the CRDs to be established; returns how many were applied.
async fn apply_served(kubeconfig: &Path, dir: &Path, docs: &[Value]) -> usize {
    let mut stream = std::fs::read_to_string(repo_root().join("deploy/namespace.yaml")).unwrap();
    let served: Vec<&Value> = docs
        .iter()
        .filter(|d| SERVED.contains(&d["kind"].as_str().unwrap()))
        .collect();
    for doc in &served {
        stream.push_str("---\n");
        stream.push_str(&serde_yaml::to_string(doc).unwrap());
    }
    let applied = dir.join("applied.yaml");
    std::fs::write(&applied, stream).unwrap();
    let out = kubectl(
        kubeconfig,
        &["apply", "--server-side", "-f", applied.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.lines().count(), served.len() + 1, "{out}");
    kubectl(
        kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=10s",
        ],
    )
    .await;
    served.len()
}

/// The CRD upgrade NOTES.txt prints, over CRDs that exist already (as on an upgrade):
/// `helm show crds <chart> | kubectl apply --server-side --force-conflicts -f -`, with the
/// kubectl arguments taken from the rendered NOTES.
async fn apply_crds_as_notes_say(kubeconfig: &Path) {
    let install = Helm::new().ok(&[
        "install",
        "tpu-operator",
        chart_dir().to_str().unwrap(),
        "--namespace",
        "tpu-operator",
        "--dry-run=client",
    ]);
    let pipeline = install
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("helm show crds <chart> | kubectl "))
        .unwrap_or_else(|| panic!("NOTES.txt has no `helm show crds` upgrade command:\n{install}"));
    let kubectl_args: Vec<&str> = pipeline
        .split_once(" | kubectl ")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let crds = Helm::new().ok(&["show", "crds", chart_dir().to_str().unwrap()]);
    let out = kubectl_stdin(kubeconfig, &kubectl_args, &crds).await;
    assert_eq!(out.lines().count(), 4, "{out}");
}

/// The config file as the pod sees it, read back from the API server and written under `dir` at
/// the Deployment's mount path; returns the mount path and that directory.
async fn config_as_mounted(kubeconfig: &Path, dir: &Path, container: &Value) -> (String, PathBuf) {
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let config_dir = dir.join(mount.trim_start_matches('/'));
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = kubectl(
        kubeconfig,
        &[
            "-n",
            "tpu-operator",
            "get",
            "configmap",
            "tpu-operator",
            "-o",
            "jsonpath={.data.config\\.yaml}",
        ],
    )
    .await;
    assert!(
        config.contains("gcpEmulator: http://tpu-operator-gcp-emulator.tpu-operator.svc:8085"),
        "{config}"
    );
    std::fs::write(config_dir.join("config.yaml"), &config).unwrap();

    (mount.to_string(), config_dir)
}

/// The Deployment's args with the mount path mapped into the temp dir.
fn deployment_args(container: &Value, mount: &str, config_dir: &Path) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            match a.strip_prefix(mount) {
                Some(rest) => format!("{}{rest}", config_dir.display()),
                None => a.to_string(),
            }
        })
        .collect()
}

/// The binary as the Deployment runs it, plus what only a test must change: the kubeconfig, a
/// free metrics port, and the gcp-emulator's local URL (the rendered one is the in-cluster
/// Service name).
fn operator_command(
    args: &[String],
    kubeconfig: &Path,
    metrics: &SocketAddr,
    gcp_url: &str,
    dir: &Path,
    container: &Value,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tpu-operator"));
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--metrics-addr", &metrics.to_string(), "--gcp-emulator", gcp_url])
        .env_remove("TPU_OPERATOR_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("operator.log")).unwrap())
        .kill_on_drop(true);
    for env in container["env"].as_array().unwrap() {
        let value = match env["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.name") => POD_NAME.to_string(),
            Some("metadata.namespace") => "tpu-operator".to_string(),
            Some(other) => panic!("unexpected fieldRef {other}"),
            None => env["value"].as_str().unwrap().to_string(),
        };
        cmd.env(env["name"].as_str().unwrap(), value);
    }
    cmd
}

/// Waits for `/readyz`, failing with the operator's log if it exits first.
async fn wait_ready(http: &reqwest::Client, base: &str, child: &mut tokio::process::Child, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let log = std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();
            panic!(
                "tpu-operator exited with {status} before becoming ready (the rendered config or args are wrong):\n{log}"
            );
        }
        assert!(Instant::now() < deadline, "not ready within 30s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Lease lives in the pod's namespace, held under the pod's name.
async fn wait_for_the_lease(kubeconfig: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = tokio::process::Command::new(support::kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "-n",
                "tpu-operator",
                "get",
                "lease",
                "tpu-operator",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .output()
            .await
            .unwrap();
        if String::from_utf8_lossy(&out.stdout) == POD_NAME {
            break;
        }
        assert!(Instant::now() < deadline, "the Lease was not taken by {POD_NAME}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An orphan, made while the operator leads and the metrics are about to be watched: a node
/// with this cluster's labels whose owner UID no object has. The next sweep (every 2 s) reports
/// it; one at least orphanGracePeriod (5 s) later deletes it.
async fn make_orphan(gcp: &gcp_emulator::Emulator) {
    let created = reqwest::Client::new()
        .post(format!(
            "{}/tpu/v2/projects/demo-project/locations/europe-west4-b/nodes?nodeId=orphaned-node",
            gcp.url()
        ))
        .json(&serde_json::json!({
            "acceleratorType": "v5litepod-8",
            "runtimeVersion": "v2-alpha-tpuv5-lite",
            "labels": {
                "managed-by": "tpu-operator",
                "tpu-operator-cluster": "chart-apply",
                "tpu-operator-namespace": "default",
                "tpu-operator-name": "gone",
                "tpu-operator-uid": "6f1c2a7e-0000-4000-8000-000000000000"
            }
        }))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());
}

/// Reconciles one example (through one injected transient TPU error) so that every metric
/// family has samples: prometheus-client does not describe families that have none.
async fn reconcile_the_example(gcp: &gcp_emulator::Emulator, kubeconfig: &Path) {
    gcp.inject(gcp_emulator::Fault::FailCalls {
        service: "tpu".into(),
        method: "*".into(),
        count: 1,
        code: gcp_emulator::Code::Unavailable,
        message: None,
    })
    .unwrap();
    let example = repo_root().join("examples/spot-queued-slice.yaml");
    kubectl(
        kubeconfig,
        &["apply", "-n", "default", "-f", example.to_str().unwrap()],
    )
    .await;
}

/// Scrapes `/metrics` until every family the monitoring queries need was described; returns the
/// `# TYPE` lines seen over all scrapes.
async fn scrape_until_every_family(http: &reqwest::Client, base: &str) -> String {
    let families = [
        "tpu_operator_reconciles",
        "tpu_operator_reconcile_failures",
        "tpu_operator_reconcile_duration_seconds",
        "gcp_calls",
        "gcp_call_duration_seconds",
        "tpu_operator_estimated_spend_usd",
        "tpu_operator_estimated_spend_per_hour_usd",
        "tpu_operator_orphans",
        "tpu_operator_orphans_deleted",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    // The family descriptions seen over all scrapes: the orphan gauge has samples only while the
    // orphan exists (one sweep reports it, the next deletes it), the others from some point on.
    let mut exposition = String::new();
    loop {
        let text = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            if !exposition.lines().any(|seen| seen == line) {
                exposition.push_str(line);
                exposition.push('\n');
            }
        }
        if families
            .iter()
            .all(|f| exposition.contains(&format!("# TYPE {f} ")))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metric families missing after 30s; seen:\n{exposition}\nlast scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    exposition
}

/// The process's resident set, in KiB, as `/proc` reports it.
fn rss_kib(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        })
}

/// SIGTERM: graceful exit 0, like a pod deletion.
async fn terminate_gracefully(child: &mut tokio::process::Child, pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
}

/// Every metric the dashboard and the alert rules query is served by the operator (its
/// /metrics, just scraped) or by kube-state-metrics with the chart's custom-resource-state config.
fn assert_monitoring_queries_use_real_metrics(exposition: &str) {
    let mut known: BTreeSet<String> = BTreeSet::from(["up".to_string()]);
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (name, ty) = (parts.next().unwrap(), parts.next().unwrap());
        match ty {
            "counter" => {
                known.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    known.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                known.insert(name.to_string());
            }
        }
    }
    let ksm: Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart_dir().join("files/kube-state-metrics.yaml")).unwrap(),
    )
    .unwrap();
    for resource in ksm["spec"]["resources"].as_array().unwrap() {
        let prefix = resource["metricNamePrefix"].as_str().unwrap();
        for metric in resource["metrics"].as_array().unwrap() {
            known.insert(format!("{prefix}_{}", metric["name"].as_str().unwrap()));
        }
    }

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("files/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut queries: Vec<(String, String)> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push((
                format!("dashboard panel {:?}", panel["title"]),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["definition"].as_str() {
            queries.push((format!("dashboard variable {}", var["name"]), q.to_string()));
        }
    }
    let alerts: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("files/alerts.yaml")).unwrap())
            .unwrap();
    for group in alerts["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            queries.push((
                format!("alert {}", rule["alert"]),
                rule["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    let mut used = 0;
    for (what, expr) in &queries {
        for token in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if token.starts_with("tpu_operator_") || token.starts_with("gcp_") || token == "up" {
                assert!(
                    known.contains(token),
                    "{what} queries {token}, which nothing exposes; known: {known:?}"
                );
                used += 1;
            }
        }
    }
    assert!(used > 20, "only {used} metric references found");
}
