//! Real kubectl 1.37 against the `kube-emulator` binary: apply (client- and server-side) of the
//! project's CRDs and examples, printer columns, `get -w`, `wait`, `patch`, `delete --wait`,
//! `explain`, and rejected manifests naming the field.
//!
//! With `TPU_OPERATOR_KUBE=real` and `KUBECONFIG` (as `tests/control-plane/up.sh run` sets them) the
//! same checks run against the real control plane instead, to hold the expectations themselves to
//! upstream: each test then works in a namespace of its own (the kubeconfig copy's context
//! namespace), and applies the test CRD itself.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

fn helm_binary() -> PathBuf {
    test_tools::helm()
}

fn kubectl_binary() -> PathBuf {
    test_tools::kubectl()
}

/// A spawned `kube-emulator` (or the real control plane) plus a kubectl pointed at it.
struct Cluster {
    server: Option<Child>,
    dir: tempfile::TempDir,
    kubectl: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(server) = self.server.as_mut() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

/// The real control plane's kubeconfig when the harness switch selects it.
fn real_kubeconfig() -> Option<PathBuf> {
    match std::env::var("TPU_OPERATOR_KUBE").as_deref() {
        Ok("real") => Some(PathBuf::from(
            std::env::var_os("KUBECONFIG").expect("TPU_OPERATOR_KUBE=real needs KUBECONFIG"),
        )),
        Ok("") | Ok("emulator") | Err(_) => None,
        Ok(other) => panic!("TPU_OPERATOR_KUBE={other:?}: expected emulator or real"),
    }
}

/// A name no other test run on a shared server uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

impl Cluster {
    fn start() -> Self {
        match real_kubeconfig() {
            Some(real) => Self::on_real_server(&real),
            None => Self::start_emulator(),
        }
    }

    /// The shared real server: a copy of its kubeconfig whose context namespace is a fresh one,
    /// and the test CRD the emulator gets from `--crds`.
    fn on_real_server(real: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(real).expect("read KUBECONFIG")).unwrap();
        let ns = unique("kubectl");
        for context in config["contexts"].as_sequence_mut().expect("kubeconfig contexts") {
            context["context"]["namespace"] = serde_yaml::Value::String(ns.clone());
        }
        std::fs::write(
            dir.path().join("kubeconfig"),
            serde_yaml::to_string(&config).unwrap(),
        )
        .unwrap();
        let k = Cluster {
            server: None,
            dir,
            kubectl: kubectl_binary(),
        };
        k.ok(&["create", "namespace", &ns]);
        k.ok(&[
            "apply",
            "--server-side",
            "-f",
            &path_arg(&fixture("widgets.yaml")),
        ]);
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.dev",
            "--timeout=60s",
        ]);
        k
    }

    fn is_real(&self) -> bool {
        self.server.is_none()
    }

    fn start_emulator() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let crds = [std::ffi::OsString::from("--crds"), fixture("widgets.yaml").into()];
        Self::spawn_emulator(dir, &crds, "http")
    }

    /// Starts the kube-emulator binary with `extra` arguments, writing its kubeconfig into `dir`,
    /// and checks that it announces a `scheme` listener.
    fn spawn_emulator(dir: tempfile::TempDir, extra: &[std::ffi::OsString], scheme: &str) -> Self {
        let mut server = Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(dir.path().join("kubeconfig"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kube-emulator");
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains(&format!("listening on {scheme}://127.0.0.1:")),
            "unexpected first line {line:?}"
        );
        Cluster {
            server: Some(server),
            dir,
            kubectl: kubectl_binary(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig").arg(self.dir.path().join("kubeconfig"));
        c.arg("--cache-dir").arg(self.dir.path().join("cache"));
        c.args(args);
        c
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.command(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn kubectl");
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl and returns stdout, failing with stderr if it did not succeed.
    fn ok(&self, args: &[&str]) -> String {
        self.ok_stdin(args, None)
    }

    fn ok_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(!out.status.success(), "kubectl {args:?} unexpectedly succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

fn path_arg(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn project_crds_and_examples_apply_client_side_and_server_side() {
    let k = Cluster::start();
    let crds = path_arg(&repo_root().join("crds"));
    let examples = path_arg(&repo_root().join("examples"));
    let out = k.ok(&["apply", "-f", &crds]);
    // A shared real server may have them from an earlier suite already.
    let applied = ["created", "configured", "unchanged"]
        .iter()
        .any(|verb| out.contains(&format!("tpuslices.tpu-operator.dev {verb}")));
    assert!(applied, "{out}");
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=20s",
    ]);
    let out = k.ok(&["apply", "-f", &examples]);
    assert!(out.contains(" created"), "{out}");
    let again = k.ok(&["apply", "-f", &examples]);
    assert!(
        again.lines().all(|l| l.ends_with(" unchanged")),
        "re-applying must change nothing:\n{again}"
    );
    let out = k.ok(&["apply", "--server-side", "-f", &examples]);
    assert!(out.contains("serverside-applied"), "{out}");
    let out = k.ok(&["apply", "--server-side", "-f", &crds]);
    assert!(out.contains("serverside-applied"), "{out}");
    let listed = k.ok(&[
        "get",
        "tpuslices,preprocessbatches,trainingpipelines",
        "-o",
        "name",
    ]);
    assert!(!listed.trim().is_empty());
    let explained = k.ok(&["explain", "tpuslice.spec"]);
    assert!(
        explained.contains("KIND:       TpuSlice") && explained.contains("zone"),
        "{explained}"
    );
    let out = k.ok(&["delete", "-f", &examples, "--wait=true"]);
    assert!(out.contains("deleted"), "{out}");
    assert!(
        k.ok(&[
            "get",
            "tpuslices,preprocessbatches,trainingpipelines",
            "-o",
            "name"
        ])
        .trim()
        .is_empty()
    );
}

const WIDGET: &str = "apiVersion: example.dev/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  zone: us-central2-b\n  replicas: 2\n";

#[test]
fn printer_columns_watch_wait_patch_and_delete() {
    let k = Cluster::start();
    printer_columns(&k);
    get_watch_shows_a_patch(&k);
    wait_for_a_condition(&k);
    delete_waits_for_the_finalizer(&k);
    server_side_apply_conflicts_and_force(&k);
    let explained = k.ok(&["explain", "widget.spec.zone"]);
    assert!(explained.contains("The zone the widget runs in."), "{explained}");
}

/// `apply` creates w1 and `get` prints it with the CRD's printer columns.
fn printer_columns(k: &Cluster) {
    k.ok_stdin(&["apply", "-f", "-"], Some(WIDGET));
    let table = k.ok(&["get", "widgets"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "ZONE", "REPLICAS", "READY", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["w1", "us-central2-b", "2"]);
}

/// `get -w`: a change made after the watch starts shows up as a new row.
fn get_watch_shows_a_patch(k: &Cluster) {
    let mut watch = k
        .command(&["get", "wd", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(DEADLINE).expect("watch prints the header");
    assert!(first.contains("EVENT") && first.contains("ZONE"), "{first}");
    let initial = rx.recv_timeout(DEADLINE).expect("watch lists w1");
    assert!(initial.contains("ADDED") && initial.contains("w1"), "{initial}");
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":5}}"#,
    ]);
    let start = Instant::now();
    loop {
        let line = rx.recv_timeout(DEADLINE).expect("watch shows the patch");
        if line.contains("MODIFIED") && line.contains(" 5 ") {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "no MODIFIED row with 5 replicas");
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

/// `wait --for=condition=Ready` after a status patch.
fn wait_for_a_condition(k: &Cluster) {
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    let waited = k.ok(&["wait", "--for=condition=Ready", "wd/w1", "--timeout=20s"]);
    assert!(waited.contains("condition met"), "{waited}");
    assert!(
        k.ok(&["get", "wd", "w1"])
            .lines()
            .nth(1)
            .unwrap()
            .contains("True")
    );
}

/// `delete --wait` blocks on the finalizer; a JSON patch removing it lets the delete finish.
fn delete_waits_for_the_finalizer(k: &Cluster) {
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/finalizers","value":["example.dev/hold"]}]"#,
    ]);
    k.ok(&["delete", "wd", "w1", "--wait=false"]);
    let ts = k.ok(&["get", "wd", "w1", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
    assert!(
        !ts.trim().is_empty(),
        "a finalizer keeps the object with a deletionTimestamp"
    );
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    k.ok(&["delete", "wd", "w1", "--wait=true", "--ignore-not-found"]);
    let err = k.fails(&["get", "wd", "w1"], None);
    assert!(
        err.contains("NotFound") && err.contains("\"w1\" not found"),
        "{err}"
    );
}

/// Server-side apply conflicts with the manager of a patched field, and `--force-conflicts` takes it.
fn server_side_apply_conflicts_and_force(k: &Cluster) {
    k.ok_stdin(&["apply", "--server-side", "-f", "-"], Some(WIDGET));
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":7}}"#,
    ]);
    let err = k.fails(&["apply", "--server-side", "-f", "-"], Some(WIDGET));
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"kubectl-patch\" using example.dev/v1: .spec.replicas"),
        "{err}"
    );
    k.ok_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(WIDGET),
    );
    assert_eq!(
        k.ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.replicas}"])
            .trim(),
        "2"
    );
}

#[test]
fn invalid_manifests_are_rejected_with_the_field_named() {
    let k = Cluster::start();
    let bad_zone = WIDGET.replace("us-central2-b", "Mars");
    let err = k.fails(&["apply", "-f", "-"], Some(&bad_zone));
    assert!(
        err.contains("spec.zone: Invalid value: \"Mars\": spec.zone in body should match"),
        "{err}"
    );
    let err = k.fails(&["apply", "--server-side", "-f", "-"], Some(&bad_zone));
    assert!(err.contains("spec.zone"), "{err}");

    let unknown = format!("{WIDGET}  colour: blue\n");
    let err = k.fails(&["apply", "-f", "-"], Some(&unknown));
    assert!(err.contains("unknown field \"spec.colour\""), "{err}");

    let not_tpu = format!("{WIDGET}  machineType: n2-standard-8\n");
    let err = k.fails(&["create", "-f", "-"], Some(&not_tpu));
    // kube-apiserver also prints the value (`Invalid value: "n2-standard-8": ...`) for a rule
    // declared on a scalar field; the emulator does not (docs/testing.md lists it).
    assert!(
        err.contains("spec.machineType: Invalid value: ")
            && err.contains("machine type n2-standard-8 is not a TPU machine type"),
        "{err}"
    );

    k.ok_stdin(&["apply", "-f", "-"], Some(WIDGET));
    let moved = WIDGET.replace("us-central2-b", "us-east1-c");
    let err = k.fails(&["apply", "-f", "-"], Some(&moved));
    assert!(
        err.contains("spec.zone: Invalid value: ") && err.contains("zone is immutable"),
        "{err}"
    );

    // The project's own CRDs reject a bad TpuSlice zone the same way.
    k.ok(&["apply", "-f", &path_arg(&repo_root().join("crds"))]);
    let slice = std::fs::read_to_string(repo_root().join("examples/spot-queued-slice.yaml")).unwrap();
    let bad_slice = slice.replace("zone: europe-west4-b", "zone: Europe_West4");
    let err = k.fails(&["apply", "-f", "-"], Some(&bad_slice));
    assert!(
        err.contains("spec.zone: Invalid value: \"Europe_West4\""),
        "{err}"
    );
}

#[test]
fn generator_commands_labels_and_namespace_lifecycle() {
    let k = Cluster::start();
    // A name of its own on a shared real server (namespace deletion there is asynchronous).
    let team = if k.is_real() {
        unique("team")
    } else {
        "team".to_owned()
    };
    let team = team.as_str();
    // kubectl's generators send protobuf bodies.
    assert_eq!(
        k.ok(&["create", "namespace", team, "-o", "name"]).trim(),
        format!("namespace/{team}")
    );
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        team,
        "--from-literal=mode=fast",
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "token",
        "-n",
        team,
        "--from-literal=key=s3cr3t",
    ]);
    let secret = k.ok(&[
        "get",
        "secret",
        "token",
        "-n",
        team,
        "-o",
        "jsonpath={.type} {.data.key}",
    ]);
    assert_eq!(secret.trim(), "Opaque czNjcjN0");
    k.ok(&["label", "configmap", "settings", "-n", team, "tier=web"]);
    k.ok(&["annotate", "configmap", "settings", "-n", team, "note=kept"]);
    let selected = k.ok(&[
        "get",
        "configmaps",
        "-n",
        team,
        "-l",
        "tier in (web,db)",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "configmap/settings");
    let listed = k.ok(&[
        "get",
        "configmaps",
        "-A",
        // The real controller-manager adds kube-root-ca.crt to every namespace.
        "-l",
        "tier=web",
        "--field-selector",
        &format!("metadata.namespace={team}"),
        "-o",
        "name",
    ]);
    assert_eq!(listed.trim(), "configmap/settings");
    let table = k.ok(&["get", "namespace", team]);
    assert!(table.lines().nth(1).unwrap().contains("Active"), "{table}");
    k.ok(&["delete", "namespace", team, "--wait=true"]);
    let err = k.fails(&["get", "configmap", "settings", "-n", team], None);
    assert!(err.contains("not found"), "{err}");
    let err = k.fails(&["get", "namespace", team], None);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn helm_installs_upgrades_and_uninstalls_a_release() {
    let k = Cluster::start();
    let chart = k.dir.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: demo\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/widget.yaml"),
        "apiVersion: example.dev/v1\nkind: Widget\nmetadata:\n  name: {{ .Release.Name }}-w\nspec:\n  zone: us-east1-c\n  replicas: {{ .Values.replicas | default 1 }}\n",
    )
    .unwrap();
    let helm = |args: &[&str]| {
        let out = Command::new(helm_binary())
            .args(args)
            .env("KUBECONFIG", k.dir.path().join("kubeconfig"))
            .env("HELM_CACHE_HOME", k.dir.path().join("helm-cache"))
            .env("HELM_CONFIG_HOME", k.dir.path().join("helm-config"))
            .env("HELM_DATA_HOME", k.dir.path().join("helm-data"))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "helm {args:?} failed:\n{text}");
        text
    };
    let chart_path = path_arg(&chart);
    assert!(helm(&["install", "rel", &chart_path]).contains("STATUS: deployed"));
    helm(&["upgrade", "rel", &chart_path, "--set", "replicas=3"]);
    let replicas = k.ok(&["get", "wd", "rel-w", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas.trim(), "3");
    // Release records are Secrets found by label selector; uninstall deletes with protobuf options.
    assert!(helm(&["list"]).contains("rel"));
    helm(&["uninstall", "rel"]);
    assert!(k.ok(&["get", "widgets,secrets", "-o", "name"]).trim().is_empty());
}

/// `--tls-cert`/`--tls-key`: kubectl verifies the server against the certificate the written
/// kubeconfig names, and talks to it over HTTPS.
#[test]
fn serves_tls_with_a_kubeconfig_that_trusts_the_certificate() {
    if real_kubeconfig().is_some() {
        eprintln!("SKIPPED on the real control plane: this test starts a TLS kube-emulator");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (Debian's openssl package) makes the test certificate");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let kubeconfig = dir.path().join("kubeconfig");
    let tls = ["--tls-cert".into(), cert.into(), "--tls-key".into(), key.into()];
    let k = Cluster::spawn_emulator(dir, &tls, "https");
    let out = k.ok(&["get", "namespaces", "-o", "name"]);
    assert!(out.contains("namespace/default"), "{out}");
    k.ok(&["create", "configmap", "over-tls", "--from-literal=a=b"]);
    assert_eq!(
        k.ok(&["get", "configmap", "over-tls", "-o", "jsonpath={.data.a}"])
            .trim(),
        "b"
    );
    // A client that does not trust the certificate is refused by its own TLS check.
    let untrusted = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("certificate-authority"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&kubeconfig, untrusted).unwrap();
    let err = k.fails(&["get", "namespaces"], None);
    assert!(err.contains("certificate"), "{err}");
}
