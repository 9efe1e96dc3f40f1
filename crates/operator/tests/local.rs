//! `tpu-operator local` as a process: the quickstart converges and cleans up, a bad manifest is
//! rejected naming the field (and nothing is applied), `--keep` serves a kubeconfig kubectl uses.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Kills the child when a test fails half-way.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `tpu-operator local ARGS` to completion, killing it after `limit`.
fn local(args: &[&str], limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let child = Command::new(BIN)
        .arg("local")
        .args(args)
        .current_dir(workspace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tpu-operator local");
    let pid = child.id();
    // A watchdog, so a hang fails the test instead of blocking it forever.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
    });
    let output = child.wait_with_output().expect("wait for tpu-operator local");
    let _ = done_tx.send(());
    watchdog.join().unwrap();
    (output, started.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn quickstart_succeeds_and_leaves_no_cloud_resources() {
    let (out, took) = local(
        &["examples/quickstart.yaml", "--timeout", "90s"],
        Duration::from_secs(150),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "local quickstart failed ({:?}) after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary_row = stdout
        .lines()
        .skip_while(|l| !l.starts_with("OBJECT "))
        .find(|l| l.starts_with("TrainingPipeline/quickstart") && l.contains("Succeeded"))
        .unwrap_or_else(|| panic!("no summary row with Succeeded:\n{stdout}"));
    assert!(
        summary_row.contains("Train "),
        "stage durations missing: {summary_row}"
    );
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
    assert!(stdout.contains("cloud API calls: "), "{stdout}");
    println!("local quickstart took {took:?}\n{stdout}");
}

#[test]
fn every_example_converges_together_and_cleans_up() {
    let mut examples: Vec<String> = std::fs::read_dir(workspace().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| format!("examples/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    examples.sort();
    let mut args: Vec<&str> = examples.iter().map(String::as_str).collect();
    args.extend(["--timeout", "90s"]);
    let (out, took) = local(&args, Duration::from_secs(150));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "local {examples:?} failed after {took:?}\nstdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
    // Every applied object (not indented in the progress lines) has a Succeeded/Ready summary row.
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("OBJECT ")).collect();
    for kind_name in ["TrainingPipeline/quickstart", "TrainingPipeline/tpu-vm-pipeline"] {
        assert!(
            summary
                .iter()
                .any(|l| l.starts_with(kind_name) && l.contains(" Succeeded ")),
            "{kind_name} did not succeed:\n{stdout}"
        );
    }
    assert!(
        summary
            .iter()
            .any(|l| l.starts_with("TpuSlice/spot-v5e") && l.contains(" Ready ")),
        "the spot slice did not become Ready:\n{stdout}"
    );
}

#[test]
fn invalid_manifest_is_rejected_naming_the_field_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(workspace().join("examples/preprocess-batch.yaml")).unwrap();
    let bad = std::fs::read_to_string(workspace().join("examples/quickstart.yaml"))
        .unwrap()
        .replace("region: us-east5", "region: \"Not A Region\"");
    assert!(
        bad.contains("Not A Region"),
        "the example changed; adjust the test"
    );
    // The valid document comes first: it must not be created either.
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, format!("{good}\n---\n{bad}")).unwrap();

    let (out, _) = local(&[path.to_str().unwrap()], Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "a bad manifest must fail\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("spec.region") && stderr.contains("Not A Region"),
        "the error must name the field and value: {stderr}"
    );
    assert!(
        stderr.contains("bad.yaml#2"),
        "the error must name the document: {stderr}"
    );
    assert!(!stdout.contains("applied"), "nothing may be applied: {stdout}");
}

#[test]
fn a_stalled_object_fails_the_run_with_its_reason() {
    // Without seeded inputs the batch's declared input is missing: the controller stalls it.
    let (out, _) = local(
        &[
            "examples/preprocess-batch.yaml",
            "--seed-inputs=false",
            "--timeout",
            "60s",
        ],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(
        !out.status.success(),
        "a stalled object must fail the run:\n{stdout}"
    );
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("OBJECT ")).collect();
    assert!(
        summary
            .iter()
            .any(|l| l.starts_with("PreprocessBatch/tokenize-corpus") && l.contains("Stalled")),
        "{stdout}"
    );
    assert!(
        summary
            .iter()
            .any(|l| l.contains("gs://demo-project-tpu-data/raw/corpus/")),
        "the reason (the missing input) must be shown:\n{stdout}"
    );
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
}

fn kubectl_binary() -> PathBuf {
    test_tools::kubectl()
}

#[test]
fn keep_serves_a_kubeconfig_that_kubectl_uses() {
    let kubectl = kubectl_binary();
    let mut child = Killed(
        Command::new(BIN)
            .args(["local", "--keep", "examples/quickstart.yaml"])
            .current_dir(workspace())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tpu-operator local --keep"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let kubeconfig = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("local --keep printed no kubeconfig path in time");
        if let Some(path) = line.strip_prefix("kubeconfig: ") {
            break PathBuf::from(path);
        }
    };

    // The manifest is applied right after the kubeconfig is written; poll until kubectl sees it.
    loop {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "trainingpipelines", "-o", "name"])
            .output()
            .expect("run kubectl");
        let last = format!("{}{}", text(&out.stdout), text(&out.stderr));
        if out.status.success() && last.contains("trainingpipeline.tpu-operator.dev/quickstart") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl never listed the pipeline: {last}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // SIGTERM (like Ctrl-C) ends it cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(code) = child.0.try_wait().unwrap() {
            break code;
        }
        assert!(Instant::now() < deadline, "local --keep did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "local --keep exited with {code:?}");
}
