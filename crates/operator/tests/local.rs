//! `tpu-operator local` as a process: the quickstart converges and cleans up, a bad manifest is
//! rejected naming the field (and nothing is applied), `--keep` serves a kubeconfig kubectl uses.
//! Bad input gets kubectl's one-line error and a non-zero exit at once (YAML syntax, unknown
//! field, unknown kind, `--time-scale 0`); manifests come from stdin and directories as with
//! `kubectl apply -f`.

use std::{
    io::{BufRead, BufReader, Write as _},
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
    let run = local_with(args, None, limit);
    (run.output, run.took)
}

/// A finished `local` process.
struct Run {
    output: Output,
    took: Duration,
    /// Peak resident memory (VmHWM) seen while it ran, in KiB.
    peak_rss_kib: u64,
}

/// Killed when it holds more than this: a runaway allocation must fail the test, not the machine.
const RSS_LIMIT_KIB: u64 = 2 * 1024 * 1024;

/// Runs `tpu-operator local ARGS` with `stdin` (or none) to completion, killing it after `limit`
/// or when its memory passes [`RSS_LIMIT_KIB`].
fn local_with(args: &[&str], stdin: Option<&str>, limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .arg("local")
        .args(args)
        .current_dir(workspace())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tpu-operator local");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_owned();
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let pid = child.id();
    // A watchdog, so a hang or a runaway allocation fails the test instead of blocking it forever.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + limit;
        let mut peak = 0;
        loop {
            peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
            if done_rx.recv_timeout(Duration::from_millis(20)).is_ok() {
                return peak;
            }
            if Instant::now() >= deadline || peak > RSS_LIMIT_KIB {
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
                let _ = done_rx.recv();
                return peak;
            }
        }
    });
    let output = child.wait_with_output().expect("wait for tpu-operator local");
    let _ = done_tx.send(());
    let peak_rss_kib = watchdog.join().unwrap();
    Run {
        output,
        took: started.elapsed(),
        peak_rss_kib,
    }
}

/// `VmHWM` of a running process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A failed run that printed nothing but one `error: ...` line on stderr; returns that line.
fn one_line_error(run: &Run) -> String {
    let (stdout, stderr) = (text(&run.output.stdout), text(&run.output.stderr));
    assert!(
        !run.output.status.success(),
        "bad input must fail ({:?} after {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        run.output.status,
        run.took
    );
    assert!(stdout.is_empty(), "nothing may be applied or printed: {stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("error: "),
        "want one `error: ...` line, got:\n{stderr}"
    );
    lines[0].to_string()
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
    // Issue 36: the summary shows where the run's page and logs would be, and the command.
    for line in [
        "    console: https://console.cloud.google.com/ai/platform/locations/us-east5/training/",
        "    logs: https://console.cloud.google.com/logs/query;query=resource.type%20%3D%20%22ml_job%22",
        "    tpu-operator logs trainingpipeline/quickstart -n default",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(line)),
            "{line:?} missing:\n{stdout}"
        );
    }
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
    let mut kept = Kept::start(&["examples/quickstart.yaml"]);
    let kubeconfig = kept.kubeconfig.clone();
    let deadline = Instant::now() + Duration::from_secs(60);

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
        .args(["-TERM", &kept.child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(code) = kept.child.0.try_wait().unwrap() {
            break code;
        }
        assert!(Instant::now() < deadline, "local --keep did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "local --keep exited with {code:?}");
}

/// A quickstart whose `old` line reads `new` (asserting the example still has `old`).
fn quickstart_with(old: &str, new: &str) -> String {
    let text = std::fs::read_to_string(workspace().join("examples/quickstart.yaml")).unwrap();
    assert!(text.contains(old), "the example changed; adjust the test");
    text.replacen(old, new, 1)
}

#[test]
fn a_yaml_syntax_error_fails_at_once_with_the_line_and_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(workspace().join("examples/preprocess-batch.yaml")).unwrap();
    // A stray indentation: "mapping values are not allowed in this context".
    let bad = quickstart_with("  region: us-east5\n", "  region: us-east5\n   bad: [unclosed\n");
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, format!("{good}---\n{bad}")).unwrap();
    let line = 1 + good.lines().count() + 1 + bad.lines().position(|l| l.contains("bad:")).unwrap();

    let run = local_with(&[path.to_str().unwrap()], None, Duration::from_secs(30));
    let error = one_line_error(&run);
    assert_eq!(
        error,
        format!(
            "error: error parsing {}: error converting YAML to JSON: yaml: line {line}: \
             mapping values are not allowed in this context",
            path.display()
        )
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    assert!(
        run.peak_rss_kib < 256 * 1024,
        "peak RSS {} MiB reading a small file",
        run.peak_rss_kib / 1024
    );
}

#[test]
fn an_unknown_field_is_refused_naming_it_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.yaml");
    std::fs::write(&path, quickstart_with("  maxRetries: 2", "  maxRetrys: 3")).unwrap();

    let run = local_with(&[path.to_str().unwrap()], None, Duration::from_secs(60));
    let error = one_line_error(&run);
    assert_eq!(
        error,
        format!(
            "error: error when creating \"{}\": TrainingPipeline in version \"v1beta1\" cannot be \
             handled as a TrainingPipeline: strict decoding error: unknown field \"spec.maxRetrys\"",
            path.display()
        )
    );
}

#[test]
fn an_unknown_kind_is_one_line_naming_the_served_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kind.yaml");
    std::fs::write(
        &path,
        quickstart_with("kind: TrainingPipeline", "kind: TrainingPipelin"),
    )
    .unwrap();

    let run = local_with(&[path.to_str().unwrap()], None, Duration::from_secs(60));
    let error = one_line_error(&run);
    assert!(
        error.starts_with(&format!(
            "error: resource mapping not found for name: \"quickstart\" namespace: \"default\" from \
             \"{}\": no matches for kind \"TrainingPipelin\" in version \"tpu-operator.dev/v1beta1\"",
            path.display()
        )),
        "{error}"
    );
    assert!(
        error.contains("TrainingPipeline (tpu-operator.dev/v1beta1)"),
        "the served kinds help spot the typo: {error}"
    );
    assert!(!error.contains('{'), "no Rust debug dump: {error}");
}

#[test]
fn a_time_scale_that_is_not_positive_and_finite_is_refused_by_the_flag() {
    for scale in ["0", "nan", "inf", "1e12"] {
        let run = local_with(
            &["--time-scale", scale, "--timeout", "5s"],
            None,
            Duration::from_secs(30),
        );
        let stderr = text(&run.output.stderr);
        assert_eq!(
            run.output.status.code(),
            Some(2),
            "--time-scale {scale} must be a usage error:\n{stderr}"
        );
        assert!(
            stderr.starts_with(&format!(
                "error: invalid value '{scale}' for '--time-scale <TIME_SCALE>': must be greater than 0"
            )),
            "{stderr}"
        );
        assert!(text(&run.output.stdout).is_empty());
    }
}

#[test]
fn a_directory_is_read_in_name_order_and_only_its_manifest_files() {
    let dir = tempfile::tempdir().unwrap();
    // Written in the reverse of name order; both broken: the first by name is reported.
    std::fs::write(dir.path().join("b.yaml"), "a: [\n").unwrap();
    std::fs::write(dir.path().join("a.yml"), "x: 1\n\ty: 2\n").unwrap();
    std::fs::write(dir.path().join("README.md"), "not: [yaml\n").unwrap();
    let run = local_with(&[dir.path().to_str().unwrap()], None, Duration::from_secs(30));
    let error = one_line_error(&run);
    let want = format!(
        "error: error parsing {}: error converting YAML to JSON: yaml: line 2: ",
        dir.path().join("a.yml").display()
    );
    assert!(error.starts_with(&want), "want {want}...; got {error}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("notes.txt"), "apiVersion: v1\n").unwrap();
    let run = local_with(&[empty.path().to_str().unwrap()], None, Duration::from_secs(30));
    assert_eq!(
        one_line_error(&run),
        format!(
            "error: error reading [{}]: recognized file extensions are [.json .yaml .yml]",
            empty.path().display()
        )
    );
}

#[test]
fn manifests_from_stdin_and_a_directory_converge_together() {
    let examples = workspace().join("examples");
    let read = |name: &str| std::fs::read_to_string(examples.join(name)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("1-quickstart.yml"), read("quickstart.yaml")).unwrap();
    let slice: serde_json::Value = serde_yaml::from_str(&read("spot-queued-slice.yaml")).unwrap();
    std::fs::write(dir.path().join("2-slice.json"), slice.to_string()).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest: [").unwrap();

    let run = local_with(
        &["-", "-f", dir.path().to_str().unwrap(), "--timeout", "90s"],
        Some(&read("preprocess-batch.yaml")),
        Duration::from_secs(150),
    );
    let stdout = text(&run.output.stdout);
    assert!(
        run.output.status.success(),
        "local - -f DIR failed after {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        run.took,
        text(&run.output.stderr)
    );
    assert!(stdout.contains("applied 3 object(s)"), "{stdout}");
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("OBJECT ")).collect();
    for (kind_name, result) in [
        ("PreprocessBatch/tokenize-corpus", " Succeeded "),
        ("TrainingPipeline/quickstart", " Succeeded "),
        ("TpuSlice/spot-v5e", " Ready "),
    ] {
        assert!(
            summary
                .iter()
                .any(|l| l.starts_with(kind_name) && l.contains(result)),
            "{kind_name} is not{result}:\n{stdout}"
        );
    }
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
}

/// A sweep as users write it: five documents with `generateName` and
/// `modelDir: .../models/$(PIPELINE_NAME)/` read from stdin. Each variant is created under the
/// name the server gives it and succeeds with its own model directory (before, `local` refused
/// `generateName`, and the variants would have shared one literal directory).
#[test]
fn a_generate_name_sweep_from_stdin_succeeds_variant_by_variant() {
    let quickstart = std::fs::read_to_string(workspace().join("examples/quickstart.yaml")).unwrap();
    let mut tp: serde_json::Value = serde_yaml::from_str(&quickstart).unwrap();
    tp["metadata"] = serde_json::json!({"generateName": "sweep-", "namespace": "default"});
    let spec = tp["spec"].as_object_mut().unwrap();
    spec.remove("preprocess");
    spec["artifacts"] =
        serde_json::json!({"modelDir": "gs://demo-project-tpu-data/models/$(PIPELINE_NAME)/"});
    let doc = serde_yaml::to_string(&tp).unwrap();
    let sweep = vec![doc; 5].join("---\n");

    let run = local_with(
        &["-f", "-", "--timeout", "120s"],
        Some(&sweep),
        Duration::from_secs(180),
    );
    let stdout = text(&run.output.stdout);
    assert!(
        run.output.status.success(),
        "local -f - failed after {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        run.took,
        text(&run.output.stderr)
    );
    assert!(stdout.contains("applied 5 object(s)"), "{stdout}");
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("OBJECT ")).collect();
    let succeeded: std::collections::BTreeSet<&str> = summary
        .iter()
        .filter(|l| l.starts_with("TrainingPipeline/sweep-") && l.contains(" Succeeded "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(succeeded.len(), 5, "five variants, five names:\n{stdout}");
    assert!(
        !stdout.contains("ArtifactsInUse"),
        "no variant waited on another:\n{stdout}"
    );
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
}

/// `tpu-operator local --keep` running: what it printed so far, line by line as it comes, and
/// where its emulators are.
struct Kept {
    /// The run, killed when the test ends.
    child: Killed,
    lines: mpsc::Receiver<(Instant, String)>,
    kubeconfig: PathBuf,
    gcp: String,
}

impl Kept {
    fn start(args: &[&str]) -> Self {
        let mut child = Killed(
            Command::new(BIN)
                .args(["local", "--keep"])
                .args(args)
                .current_dir(workspace())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn tpu-operator local --keep"),
        );
        let stdout = child.0.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let mut kept = Self {
            child,
            lines,
            kubeconfig: PathBuf::new(),
            gcp: String::new(),
        };
        kept.kubeconfig = PathBuf::from(kept.wait_for("kubeconfig: ").1);
        kept.gcp = kept.wait_for("gcp-emulator: ").1;
        kept
    }

    /// Waits for a line starting with `prefix`: when it came and the rest of it.
    fn wait_for(&self, prefix: &str) -> (Instant, String) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (at, line) = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("local --keep printed no {prefix:?} line in time"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return (at, rest.to_string());
            }
        }
    }

    /// `tpu-operator logs ARGS` against this run's emulators.
    fn logs(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("logs")
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--gcp-emulator", &self.gcp])
            .current_dir(workspace());
        cmd
    }
}

/// Issue 36 item 2: after the quickstart ran, `tpu-operator logs tpl/quickstart` prints what its
/// Dataproc batch and Vertex AI job logged (read from Cloud Logging with Google's client),
/// preprocessing first, each line saying its stage; `--stage`, `--tail` and `--timestamps`
/// narrow it as with `kubectl logs`; bad input is one clear error.
#[test]
fn logs_print_the_quickstarts_preprocess_then_training_lines() {
    let kept = Kept::start(&["examples/quickstart.yaml"]);
    kept.wait_for("everything keeps running");

    let out = kept.logs(&["tpl/quickstart"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{stdout}"))
    };
    let spark = at("[preprocess] Starting the Spark driver of batch");
    let batch_done = at("[preprocess] Batch ");
    let training = at(
        "[train] Starting training on replica workerpool0-0 (us-docker.pkg.dev/demo-project/trainers/jax-trainer:1.0)",
    );
    let trained = at("[train] Training finished: the model was saved");
    assert!(
        spark < batch_done && batch_done < training && training < trained,
        "{stdout}"
    );

    let out = kept
        .logs(&[
            "tpl/quickstart",
            "--stage",
            "train",
            "--tail",
            "1",
            "--timestamps",
        ])
        .output()
        .unwrap();
    let last = text(&out.stdout);
    assert_eq!(last.lines().count(), 1, "{last}");
    assert!(
        last.ends_with("Training finished: the model was saved\n"),
        "{last}"
    );
    assert!(last.starts_with("20"), "an RFC 3339 time first: {last}");

    for (args, says) in [
        (
            &["pod/x"][..],
            "use trainingpipeline (tpl), tpuslice (tpus) or preprocessbatch (ppb)",
        ),
        // Issue 46: kubectl's one line, not a debug dump of the API's answer.
        (
            &["tpl/nope"][..],
            "error: Error from server (NotFound): trainingpipelines.tpu-operator.dev \"nope\" not found in namespace \"default\" (another: -n NAMESPACE)\n",
        ),
        (
            &["tpus/x", "--stage", "train"][..],
            "--stage: only a TrainingPipeline has stages",
        ),
        (
            &["tpl/quickstart", "--attempt", "0"][..],
            "--attempt: attempts count from 1",
        ),
    ] {
        let out = kept.logs(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.len() < 160, "a short line, not a dump: {err}");
    }
}

/// Issue 36 item 2: `logs -f` started before anything ran streams the lines as the batch and
/// the job write them (its first line arrives long before the run ends) and ends by itself,
/// successfully, when the pipeline has succeeded.
#[test]
fn logs_follow_streams_a_running_pipeline_and_ends_when_it_ends() {
    let kept = Kept::start(&["--time-scale", "40", "examples/quickstart.yaml"]);
    kept.wait_for("applied ");
    let mut follow = Killed(
        kept.logs(&["tpl/quickstart", "-f", "--interval", "200ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = follow.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), line));
        }
    });
    let (first_at, first) = rx.recv_timeout(Duration::from_secs(60)).expect("a first line");
    assert!(
        first.starts_with("[preprocess] Starting the Spark driver"),
        "{first}"
    );
    let (converged_at, _) = kept.wait_for("everything keeps running");
    assert!(
        converged_at.duration_since(first_at) > Duration::from_secs(2),
        "the first line came only {:?} before the run ended: not streamed",
        converged_at.duration_since(first_at)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = follow.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "logs -f did not end after the pipeline succeeded"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "logs -f exited with {status:?}");
    let rest: Vec<String> = rx.try_iter().map(|(_, l)| l).collect();
    assert_eq!(
        rest.last().map(String::as_str),
        Some("[train] Training finished: the model was saved"),
        "{rest:?}"
    );
    drop(kept);
}

/// Issue 36, bad input: before anything logged, `logs` says which streams have nothing yet
/// (and exits 0, as `kubectl logs` of a new pod does); a `--follow` whose pipeline is deleted
/// under it ends by itself, saying so.
#[test]
fn logs_say_when_there_are_none_yet_and_a_follow_ends_when_its_object_is_deleted() {
    let kept = Kept::start(&["--time-scale", "5", "examples/quickstart.yaml"]);
    kept.wait_for("applied ");
    let out = kept.logs(&["tpl/quickstart"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("train: training has not started"), "{err}");
    assert!(
        err.contains("preprocess: no Dataproc batch yet")
            || err.contains("no log entries yet for the Dataproc batch"),
        "{err}"
    );
    assert_eq!(text(&out.stdout), "", "no lines yet");

    let mut follow = Killed(
        kept.logs(&["tpl/quickstart", "-f", "--interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let deleted = Command::new(kubectl_binary())
        .arg("--kubeconfig")
        .arg(&kept.kubeconfig)
        .args(["delete", "trainingpipeline", "quickstart", "--wait=false"])
        .output()
        .unwrap();
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = follow.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "logs -f outlived its pipeline");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(follow.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("TrainingPipeline default/quickstart was deleted; no more lines"),
        "{stderr}"
    );
}

impl Kept {
    /// `tpu-operator describe ARGS` against this run's cluster.
    fn describe(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("describe")
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .current_dir(workspace())
            .output()
            .unwrap()
    }

    /// `kubectl ARGS` against this run's cluster; its stdout.
    fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(kubectl_binary())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }
}

/// The cell of column `header` in the first row of a kubectl table (columns are aligned).
fn cell(table: &str, header: &str) -> String {
    let mut lines = table.lines();
    let head = lines.next().unwrap_or_default();
    // The header as a whole column name (`AGE`, not the end of `STAGE`).
    let at = head
        .match_indices(header)
        .map(|(at, _)| at)
        .find(|&at| at == 0 || head[..at].ends_with(' '))
        .unwrap_or_else(|| panic!("no {header} in {table}"));
    let row = lines.next().unwrap_or_default();
    row[at..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Seconds of a kubectl age (`45s`, `3m10s`, `2h`, `3d4h`).
fn age_seconds(age: &str) -> u64 {
    let (mut total, mut n) = (0, 0);
    for c in age.chars() {
        match c {
            '0'..='9' => n = n * 10 + u64::from(c.to_digit(10).unwrap()),
            's' | 'm' | 'h' | 'd' | 'y' => {
                let unit = match c {
                    's' => 1,
                    'm' => 60,
                    'h' => 3600,
                    'd' => 86_400,
                    _ => 365 * 86_400,
                };
                total += n * unit;
                n = 0;
            }
            _ => panic!("{age:?} is not an age"),
        }
    }
    total
}

/// Issue 46, items 7c and 6d: `tpu-operator describe tpl/NAME` is one screen (phase, what it
/// waits for, attempts, stages with times, cost, checkpoint, links, last Events), also for the
/// pipeline's PreprocessBatch; a missing object is kubectl's one line. `kubectl get tpl`'s
/// `LAST CKPT` is an age on the emulated clock the checkpoint was written on, not a future `0s`.
#[test]
fn describe_is_one_screen_and_last_ckpt_is_an_age() {
    let kept = Kept::start(&["examples/quickstart.yaml"]);
    kept.wait_for("everything keeps running");

    let out = kept.describe(&["tpl/quickstart"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.lines().count() <= 40, "one screen:\n{shown}");
    for row in [
        "Kind:        TrainingPipeline (tpl)",
        "Phase:       Succeeded (Ready=True, ",
        "Waiting for: nothing (finished)",
        "Attempts:    1 (maxRetries 2)",
        "Stages:\n  preprocess Succeeded  ",
        "\n  train      Succeeded  ",
        "Cost:        $",
        "Checkpoint:  step ",
        "  logs cmd    tpu-operator logs tpl/quickstart -n default",
        "Events (last ",
    ] {
        assert!(shown.contains(row), "{row:?} not in:\n{shown}");
    }

    // Events are stamped on the clock status times come from: the newest one (the pipeline's
    // `Succeeded` or `Reaped`) is not older than the run's start.
    let started = kept.kubectl(&["get", "tpl", "quickstart", "-o", "jsonpath={.status.startTime}"]);
    let times = kept.kubectl(&[
        "get",
        "events.v1.events.k8s.io",
        "-o",
        "jsonpath={.items[*].eventTime}",
    ]);
    let newest = times
        .split_whitespace()
        .map(|t| &t[..19])
        .max()
        .unwrap_or_default();
    assert!(
        newest >= &started[..19],
        "the newest Event ({newest}) precedes the run's start ({started}): two clocks"
    );

    let batch = kept.kubectl(&["get", "ppb", "-o", "jsonpath={.items[0].metadata.name}"]);
    let out = kept.describe(&[&format!("ppb/{batch}"), "-n", "default"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(shown.contains("Kind:        PreprocessBatch (ppb)"), "{shown}");
    assert!(shown.contains("Phase:       Succeeded"), "{shown}");

    let out = kept.describe(&["tpl/nope"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: Error from server (NotFound): trainingpipelines.tpu-operator.dev \"nope\" not found \
         in namespace \"default\" (another: -n NAMESPACE)\n"
    );

    let table = kept.kubectl(&["get", "tpl", "quickstart"]);
    let (ckpt, age) = (cell(&table, "LAST CKPT"), cell(&table, "AGE"));
    assert!(
        ckpt != "0s" && age_seconds(&ckpt) > 0 && age_seconds(&ckpt) <= age_seconds(&age),
        "LAST CKPT {ckpt:?} must be an age within AGE {age:?}:\n{table}"
    );
}

/// Issue 46, items 6e and 6c: a multi-host TPU VM run's training lines say which host wrote
/// them (`[train w1]`), each host's lines once; `--host N` prints host N's alone, untagged.
/// A slice's status names its node id, which `describe` puts into the gcloud command.
#[test]
fn multi_host_logs_name_the_host_and_describe_gives_the_node_id() {
    let kept = Kept::start(&["examples/tpu-vm-pipeline.yaml", "examples/spot-queued-slice.yaml"]);
    kept.wait_for("everything keeps running");

    let out = kept
        .logs(&["tpl/tpu-vm-pipeline", "--stage", "train"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let of_host = |h: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[w{h}] ")))
            .map(str::to_owned)
            .collect()
    };
    let (w0, w1) = (of_host("0"), of_host("1"));
    assert!(!w0.is_empty(), "no [w0] lines:\n{stdout}");
    assert_eq!(w0, w1, "both hosts run the same program:\n{stdout}");
    assert_eq!(
        w0.len() + w1.len(),
        stdout.lines().count(),
        "every line tagged:\n{stdout}"
    );

    let both = text(&kept.logs(&["tpl/tpu-vm-pipeline"]).output().unwrap().stdout);
    assert!(both.contains("\n[train w1] "), "{both}");
    assert!(both.starts_with("[preprocess] "), "{both}");

    let one = kept
        .logs(&["tpl/tpu-vm-pipeline", "--stage", "train", "--host", "1"])
        .output()
        .unwrap();
    let one: Vec<String> = text(&one.stdout).lines().map(str::to_owned).collect();
    assert_eq!(one, w1, "--host 1: host 1's lines, untagged");

    let id = kept.kubectl(&["get", "tpus", "spot-v5e", "-o", "jsonpath={.status.nodeId}"]);
    let name = kept.kubectl(&["get", "tpus", "spot-v5e", "-o", "jsonpath={.status.nodeName}"]);
    assert!(
        !id.is_empty() && name.ends_with(&format!("/nodes/{id}")),
        "{id} {name}"
    );
    let out = kept.describe(&["tpus/spot-v5e"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        shown.contains(&format!(
            "gcloud compute tpus tpu-vm ssh {id} --zone europe-west4-b"
        )),
        "{shown}"
    );
    assert!(shown.lines().count() <= 40, "{shown}");
}

/// `local`'s output without the one line that measures the machine, not the run.
fn without_wall_time(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| !l.starts_with("wall time: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Spins `threads` threads until dropped: a busy machine, as on a shared CI runner.
struct Hog(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
);

impl Hog {
    fn start(threads: usize) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Self(stop, spinners)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for spinner in self.1.drain(..) {
            let _ = spinner.join();
        }
    }
}

/// The same manifests print the same run, live lines, stage times, costs, calls and links,
/// on every run and however busy the machine: emulated time advances by events, not by the wall
/// clock. Three runs of two pipelines (Vertex and TPU VM), beside a CPU hog on every core.
#[test]
fn the_same_manifests_print_the_same_run_on_a_busy_machine() {
    let _hog = Hog::start(2);
    let args = [
        "examples/quickstart.yaml",
        "examples/tpu-vm-pipeline.yaml",
        "--timeout",
        "120s",
    ];
    let runs: Vec<String> = (0..3)
        .map(|_| {
            let (out, took) = local(&args, Duration::from_secs(180));
            let stdout = text(&out.stdout);
            assert!(
                out.status.success(),
                "failed after {took:?}:\n{stdout}\n{}",
                text(&out.stderr)
            );
            without_wall_time(&stdout)
        })
        .collect();
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert_eq!(run, &runs[0], "run {i} differs from run 0");
    }
    // The stage times are the emulator's durations plus the controllers' polls, nothing else.
    assert!(
        runs[0]
            .lines()
            .any(|l| l.starts_with("TrainingPipeline/quickstart ")
                && l.contains("Preprocess 3m00s, Train 6m00s")),
        "{}",
        runs[0]
    );
}

/// `--inject preempt:2m`: the quickstart's Spot Vertex job is reclaimed after 2 emulated minutes
/// of training; the pipeline goes back to Queued, runs again and succeeds, as docs/training.md
/// shows it.
#[test]
fn an_injected_preemption_sends_the_run_back_to_the_queue_and_it_still_succeeds() {
    let (out, _) = local(
        &["examples/quickstart.yaml", "--inject", "preempt:2m"],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let after: Vec<&str> = stdout
        .lines()
        .skip_while(|l| {
            !l.starts_with("inject: preempted projects/813766736138/locations/us-east5/customJobs/")
        })
        .collect();
    assert!(!after.is_empty(), "no preemption line:\n{stdout}");
    let queued = after
        .iter()
        .position(|l| l.starts_with("TrainingPipeline/quickstart") && l.contains("Train: Queued"));
    let succeeded = after
        .iter()
        .position(|l| l.starts_with("TrainingPipeline/quickstart") && l.contains("Succeeded"));
    assert!(
        matches!((queued, succeeded), (Some(q), Some(s)) if q < s),
        "want Queued, then Succeeded, after the preemption:\n{stdout}"
    );
}

/// `--inject fail:preprocess`: the batch's only attempt fails; the pipeline fails with the batch's
/// message, the run exits non-zero and nothing is left in the cloud.
#[test]
fn an_injected_failure_fails_the_run_with_its_message_and_leaves_nothing() {
    let (out, _) = local(
        &["examples/quickstart.yaml", "--inject", "fail:preprocess"],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "a failed run must fail `local`:\n{stdout}");
    assert!(
        stdout.contains("inject: failed projects/demo-project/locations/us-east5/batches/"),
        "{stdout}"
    );
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("OBJECT ")).collect();
    assert!(
        summary
            .iter()
            .any(|l| l.starts_with("TrainingPipeline/quickstart") && l.contains("Failed")),
        "{stdout}"
    );
    assert!(
        summary
            .iter()
            .any(|l| l.contains("rehearsal: the Spark job failed")),
        "the batch's message must reach the summary:\n{stdout}"
    );
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
}

/// `--inject stockout:us-central2-b:v4:10m`: the TPU VM pipeline's v4 slice waits for capacity
/// (and says so) until the stockout lifts, then trains and succeeds.
#[test]
fn an_injected_stockout_makes_the_slice_wait_until_it_lifts() {
    let (out, _) = local(
        &[
            "examples/tpu-vm-pipeline.yaml",
            "--inject",
            "stockout:us-central2-b:v4:10m",
        ],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let waiting = lines
        .iter()
        .position(|l| l.starts_with("  TpuSlice/tpu-vm-pipeline-train") && l.contains("Waiting"));
    let lifted = at("inject: v4 capacity is back in us-central2-b");
    let training = lines
        .iter()
        .position(|l| l.starts_with("TrainingPipeline/tpu-vm-pipeline") && l.contains("Train: Running"));
    assert!(
        at("inject: no v4 capacity in us-central2-b for 10m").is_some(),
        "{stdout}"
    );
    assert!(
        matches!((waiting, lifted, training), (Some(w), Some(l), Some(t)) if w < l && l < t),
        "want the slice Waiting, the stockout lifted, then training:\n{stdout}"
    );
}

/// A bad `--inject` is a usage error naming the accepted forms, before anything runs.
#[test]
fn a_bad_injection_is_refused_by_the_flag_naming_the_forms() {
    let run = local_with(
        &["examples/quickstart.yaml", "--inject", "reboot:1h"],
        None,
        Duration::from_secs(30),
    );
    let (stdout, stderr) = (text(&run.output.stdout), text(&run.output.stderr));
    assert_eq!(run.output.status.code(), Some(2), "a usage error:\n{stderr}");
    assert!(stdout.is_empty(), "nothing may run: {stdout}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: invalid value 'reboot:1h' for '--inject <WHAT>'")
            && first.contains("preempt:AFTER"),
        "{stderr}"
    );
}

/// `local --capacity`: a zone out of v4 for the whole run keeps the pipeline's training slice
/// waiting; after the summary the run prints its own stockout memory (the place blocked, until
/// when, how many stockouts in a row) and the training slice waiting there, as `tpu-operator
/// capacity` prints a cluster's.
#[test]
fn capacity_prints_the_runs_stockout_memory_and_the_training_slice_waiting() {
    let (out, _) = local(
        &[
            "examples/tpu-vm-pipeline.yaml",
            "--inject",
            "stockout:us-central2-b:v4",
            "--timeout",
            "5s",
            "--capacity",
        ],
        Duration::from_secs(240),
    );
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "the pipeline cannot finish:\n{stdout}");
    let view = stdout
        .split_once("\nStockout memory (taken at ")
        .unwrap_or_else(|| panic!("no capacity view after the summary:\n{stdout}"))
        .1;
    // Blocked, or between two windows with one create probing it (the run's timeout may end it
    // in either): either way not asked freely, until a time still to come.
    let blocked = view
        .lines()
        .find(|l| {
            l.starts_with("demo-project  us-central2-b  v4-16        spot  ")
                && (l.contains("  blocked  ") || l.contains("  probing  "))
        })
        .unwrap_or_else(|| panic!("the place is not shown blocked or probing:\n{view}"));
    assert!(blocked.contains("Z (in "), "an expiry in the future: {blocked}");
    let waiting = view
        .lines()
        .find(|l| l.contains("WaitingForCapacity (Stockout)"))
        .unwrap_or_else(|| panic!("no waiting slice:\n{view}"));
    assert!(
        waiting.contains("us-central2-b") && waiting.contains("default/tpu-vm-pipeline-train"),
        "{waiting}"
    );
    assert!(
        !view.contains("Not shown"),
        "everything is readable in-process:\n{view}"
    );
}
