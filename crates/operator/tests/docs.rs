//! Docs that run (issue 46 item 1). Every fenced command block of README.md, docs/*.md, the
//! chart's README and the crates' READMEs is classified by the `<!-- docs-test: ... -->` comment
//! right above it, and an unclassified one fails `every_command_block_is_classified`:
//!
//! * `run ID`: a test here runs the block as written (`bash -euo pipefail` in the repository root,
//!   `tpu-operator` being this build's binary, kubectl and helm the pinned real tools) and checks
//!   the output the doc shows (`output ID`);
//! * `real ID`: the same, in CI's real-control-plane stage (`TPU_OPERATOR_KUBE=real`);
//! * `not-run REASON: why`: gcloud, docker, a real GKE, Argo CD, a long benchmark, or one of the
//!   repository's own suites; the names such a block uses (paths, cargo packages and targets) are
//!   still checked to exist.
//!
//! The `statements` tests check what the docs say about behaviour (fields, phases, reasons,
//! counts), each naming the doc line it checks.

mod docs_kit;
#[path = "docs_kit/statements.rs"]
mod statements;
mod support;

use std::{
    collections::BTreeSet,
    io::Read as _,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use docs_kit::{Block, Mark, Reason, all_blocks, block, output_id, run_id, shell::Shell};
use regex::Regex;

const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");

/// Every `run` id a test below implements, every `real` id, and every `output` id a runner checks.
const RUN_IDS: &[&str] = &[
    "readme-quickstart",
    "readme-logs",
    "training-rerun",
    "training-inject",
    "capacity-keep",
    "capacity-plan",
];
const REAL_IDS: &[&str] = &[];
const OUTPUT_IDS: &[&str] = &["readme-quickstart", "capacity-keep", "capacity-plan"];

fn root() -> PathBuf {
    support::repo_root()
}

#[test]
fn every_command_block_is_classified() {
    let blocks = all_blocks(&root());
    assert!(blocks.len() > 50, "the docs' fenced blocks were not found");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for b in &blocks {
        match &b.mark {
            Mark::None if b.is_command() => problems.push(format!(
                "{}: a command block without a `<!-- docs-test: run ID | real ID | not-run REASON: why -->` comment above it",
                b.at()
            )),
            Mark::Bad(line) => problems.push(format!(
                "{}: {line} is not `run ID`, `real ID`, `output ID` or `not-run REASON: why` (REASON one of {:?})",
                b.at(),
                Reason::ALL.map(Reason::key)
            )),
            Mark::Run(id) | Mark::Real(id) | Mark::Output(id) => {
                let (known, kind) = match &b.mark {
                    Mark::Run(_) => (RUN_IDS, "run"),
                    Mark::Real(_) => (REAL_IDS, "real"),
                    _ => (OUTPUT_IDS, "output"),
                };
                if !known.contains(&id.as_str()) {
                    problems.push(format!(
                        "{}: no runner implements `{kind} {id}` (tests/docs.rs)",
                        b.at()
                    ));
                }
                if !seen.insert((kind, id.clone())) {
                    problems.push(format!("{}: `{kind} {id}` is used twice", b.at()));
                }
            }
            Mark::NotRun { .. } if !b.is_command() => problems.push(format!(
                "{}: `not-run` on a block that is not a command block",
                b.at()
            )),
            _ => {}
        }
    }
    for (kind, ids) in [("run", RUN_IDS), ("real", REAL_IDS), ("output", OUTPUT_IDS)] {
        for id in ids {
            if !seen.contains(&(kind, (*id).to_string())) {
                problems.push(format!("runner `{kind} {id}` has no doc block"));
            }
        }
    }
    let c = docs_kit::counts(&blocks);
    println!(
        "docs-test: {} fenced blocks, {} command blocks: {} run in `cargo test`, {} in the real-control-plane stage, {} not run; {} output blocks checked",
        blocks.len(),
        c.command_blocks,
        c.run,
        c.real,
        c.not_run.values().map(Vec::len).sum::<usize>(),
        c.output
    );
    for (reason, at) in &c.not_run {
        println!("  not-run {}: {} {:?}", reason.key(), at.len(), at);
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    assert_eq!(
        c.command_blocks,
        c.run + c.real + c.not_run.values().map(Vec::len).sum::<usize>(),
        "every command block is run or marked not-run"
    );
}

/// Workspace packages by name, with their directory.
fn packages() -> Vec<(String, PathBuf)> {
    let name = Regex::new(r#"(?m)^name = "([^"]+)""#).unwrap();
    std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|dir| {
            let toml = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
            Some((name.captures(&toml)?[1].to_string(), dir))
        })
        .collect()
}

/// `--test NAME` / `--bin NAME` of a package: its auto-discovered targets and its `[[test]]` /
/// `[[bin]]` sections.
fn has_target(dir: &Path, section: &str, name: &str) -> bool {
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let declared = Regex::new(&format!(
        r#"(?s)\[\[{section}\]\]\s*name = "{}""#,
        regex::escape(name)
    ))
    .unwrap()
    .is_match(&toml);
    let auto = match section {
        "test" => [format!("tests/{name}.rs"), format!("tests/{name}/main.rs")],
        _ => [format!("src/bin/{name}.rs"), format!("src/bin/{name}/main.rs")],
    };
    declared || auto.iter().any(|p| dir.join(p).exists())
}

/// Every command block, run or not, names only things that exist: repository paths, cargo
/// packages, and their `--test` / `--bin` targets. A not-run block can still rot this way.
#[test]
fn names_in_every_command_block_exist() {
    let root = root();
    let path = Regex::new(
        r#"(?:^|[\s"'=(])((?:crates|docs|deploy|charts|examples|tests|scripts|crds)/[A-Za-z0-9_./*-]*)"#,
    )
    .unwrap();
    let cargo = Regex::new(r"cargo\s+(?:run|test|build|bench)\b[^\n|;&]*").unwrap();
    let packages = packages();
    let mut problems = Vec::new();
    let mut checked = 0;
    for b in all_blocks(&root).iter().filter(|b| b.is_command()) {
        for cap in path.captures_iter(&b.text) {
            let p = cap[1].trim_end_matches(['.', ',', ':', ')']);
            // `deploy/NAME` alone is kubectl's Deployment NAME, not a path.
            if p.strip_prefix("deploy/")
                .is_some_and(|n| !n.contains(['/', '.']) && !n.is_empty())
            {
                continue;
            }
            let exists = if let Some(dir) = p.split('*').next().filter(|_| p.contains('*')) {
                root.join(dir.rsplit_once('/').map_or(dir, |(d, _)| d)).is_dir()
            } else {
                root.join(p).exists()
            };
            checked += 1;
            if !exists {
                problems.push(format!("{}: {p} does not exist", b.at()));
            }
        }
        for m in cargo.find_iter(&b.text) {
            let words: Vec<&str> = m.as_str().split_whitespace().collect();
            let after = |flag: &str| {
                words
                    .iter()
                    .position(|w| *w == flag)
                    .and_then(|i| words.get(i + 1).copied())
            };
            let Some(pkg) = after("-p") else { continue };
            checked += 1;
            let Some((_, dir)) = packages.iter().find(|(n, _)| n == pkg) else {
                problems.push(format!("{}: no workspace package {pkg}", b.at()));
                continue;
            };
            for (flag, section) in [("--test", "test"), ("--bin", "bin")] {
                if let Some(target) = after(flag)
                    && !has_target(dir, section, target)
                {
                    problems.push(format!("{}: {pkg} has no {section} {target}", b.at()));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} names found");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// Kills a child (and what it started in its process group) when a test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let pid = self.0.id();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Runs a script to completion within `limit`; returns (success, stdout, stderr).
fn run_script(shell: &Shell, script: &str, limit: Duration) -> (bool, String, String) {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = shell.command(script);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = Running(cmd.spawn().expect("bash"));
    let mut out = child.0.stdout.take().unwrap();
    let mut err = child.0.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let stdout = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{script:?} ran longer than {limit:?}"));
    let status = child.0.wait().unwrap();
    (status.success(), stdout, stderr.join().unwrap())
}

/// docs/capacity.md "Reading the capacity view": `capacity` reads a kept `local` run as it reads
/// a cluster (through its kubeconfig and the ConfigMap the run publishes) and prints the table the
/// doc shows, word for word outside the times, the strikes and the wait (`--keep` runs on the wall
/// clock, so how many windows passed depends on the machine).
#[test]
fn capacity_reads_a_kept_local_run_as_documented() {
    let root = root();
    let b = block(&root, "capacity-keep", run_id);
    let commands: Vec<&str> = b.text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(commands.len(), 2, "{}: local --keep, then capacity", b.at());
    let shell = Shell::new(&root, BIN, &[]);
    let kept = Kept::start(&shell, commands[0]);
    let capacity = commands[1].replace("KUBECONFIG", &kept.kubeconfig);
    let (ok, stdout, stderr) = run_script(&shell, &capacity, Duration::from_secs(60));
    assert!(ok, "{}: {capacity} failed:\n{stdout}\n{stderr}", b.at());
    let out = block(&root, "capacity-keep", output_id);
    let volatile = [
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
        r"\((in )?\d[0-9hms]*( ago)?\)",
        r"… …\s+\d+\s+… …",
        r"\b\d+[hms][0-9hms]*\b",
    ]
    .map(|r| Regex::new(r).unwrap());
    let lines =
        |text: &str| -> Vec<Vec<String>> { text.lines().map(|l| docs_kit::words(l, &volatile)).collect() };
    assert_eq!(
        lines(&stdout),
        lines(&out.text),
        "{}: printed\n{stdout}",
        out.at()
    );
}

/// The part of `local`'s summary that differs between runs: the wall time. Emulated time advances
/// by events (issue 46 item 4), so stage times, costs, cloud-call counts and the emulated cloud's
/// ids are the same on every run and are compared exactly.
fn volatile() -> Vec<Regex> {
    vec![Regex::new(r"^wall time: \d+(\.\d+)?s$").unwrap()]
}

/// Checks the doc's output block against what ran: its first line (a header) found in the output,
/// then every line of the block in order, each equal word for word outside the volatile parts.
fn assert_output_matches(expected: &Block, actual: &str) {
    let volatile = volatile();
    let want: Vec<Vec<String>> = expected
        .text
        .lines()
        .map(|l| docs_kit::words(l, &volatile))
        .collect();
    let got: Vec<(&str, Vec<String>)> = actual
        .lines()
        .map(|l| (l, docs_kit::words(l, &volatile)))
        .collect();
    let start = got.iter().position(|(_, w)| *w == want[0]).unwrap_or_else(|| {
        panic!(
            "{}: its first line {:?} is not in the output:\n{actual}",
            expected.at(),
            expected.text.lines().next()
        )
    });
    let mut at = start;
    for (i, w) in want.iter().enumerate().skip(1) {
        let found = got[at + 1..].iter().position(|(_, g)| g == w);
        let Some(offset) = found else {
            panic!(
                "{}: line {} {:?} is not in the output after line {:?}:\n{actual}",
                expected.at(),
                i + 1,
                expected.text.lines().nth(i).unwrap(),
                got[at].0
            );
        };
        at += 1 + offset;
    }
    // Nothing the doc does not show may sit between its lines: the summary is one table.
    assert_eq!(
        at - start + 1,
        want.len(),
        "{}: the output has lines the doc does not show between its lines:\n{}",
        expected.at(),
        got[start..=at]
            .iter()
            .map(|(l, _)| *l)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// README.md "The two commands": `local examples/quickstart.yaml` prints the summary the README
/// shows (stable parts exact, see [`volatile`]); `cargo test --workspace` is this run, and is
/// what CI's `.ci/run` runs, as the README says.
#[test]
fn readme_quickstart_prints_the_documented_summary() {
    let root = root();
    let b = block(&root, "readme-quickstart", run_id);
    let shell = Shell::new(&root, BIN, &[]);
    let (ok, stdout, stderr) = run_script(&shell, &b.text, Duration::from_secs(300));
    assert!(ok, "{} failed:\n{stdout}\n{stderr}", b.at());
    assert!(stdout.contains(docs_kit::shell::IN_SUITE), "{stdout}");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.lines()
            .any(|l| l.trim_start().starts_with("cargo test --workspace")),
        "README: CI (.ci/run) runs `cargo test --workspace`"
    );
    let out = block(&root, "readme-quickstart", output_id);
    assert_output_matches(&out, &stdout);
}

/// docs/capacity.md's capacity plan rehearsal: a full reservation and a Spot stockout, the slice
/// landing on its third rung, prints the summary the doc shows (the same on every run: emulated
/// time advances by events).
#[test]
fn capacity_plan_rehearsal_prints_the_documented_landing() {
    let root = root();
    let b = block(&root, "capacity-plan", run_id);
    let shell = Shell::new(&root, BIN, &[]);
    let (ok, stdout, stderr) = run_script(&shell, &b.text, Duration::from_secs(300));
    assert!(ok, "{} failed:\n{stdout}\n{stderr}", b.at());
    let out = block(&root, "capacity-plan", output_id);
    assert_output_matches(&out, &stdout);
    assert!(stdout.contains("cloud resources left: 0"), "{stdout}");
}

/// `tpu-operator local --keep` started from a doc block's first line (through the `cargo` shim):
/// the kubeconfig and gcp-emulator URL it prints, once everything converged.
struct Kept {
    _child: Running,
    kubeconfig: String,
    gcp: String,
}

impl Kept {
    fn start(shell: &Shell, command: &str) -> Self {
        use std::io::BufRead as _;
        use std::os::unix::process::CommandExt as _;
        let mut cmd = shell.command(command);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let mut child = Running(cmd.spawn().expect("bash"));
        let stdout = child.0.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(180);
        let (mut kubeconfig, mut gcp) = (None, None);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("{command:?}: no `everything keeps running` in time"));
            if let Some(k) = line.strip_prefix("kubeconfig: ") {
                kubeconfig = Some(k.to_string());
            } else if let Some(g) = line.strip_prefix("gcp-emulator: ") {
                gcp = Some(g.to_string());
            } else if line.starts_with("everything keeps running") {
                break;
            }
        }
        Self {
            _child: child,
            kubeconfig: kubeconfig.expect("local --keep printed its kubeconfig"),
            gcp: gcp.expect("local --keep printed its gcp-emulator URL"),
        }
    }
}

/// The `# ` lines under a command: the output the doc shows for it.
fn commented_output(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# "))
        .map(str::to_string)
        .collect()
}

/// README.md: `local --keep` then `tpu-operator logs tpl/quickstart --kubeconfig KUBECONFIG
/// --gcp-emulator URL` with what `--keep` printed; the lines shown under it are printed, in that
/// order (the batch's id is the run's own: its UID part is compared by shape).
#[test]
fn readme_logs_print_the_documented_lines() {
    let root = root();
    let b = block(&root, "readme-logs", run_id);
    let commands: Vec<&str> = b
        .text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 2, "{}: local --keep, then logs", b.at());
    let shell = Shell::new(&root, BIN, &[]);
    let kept = Kept::start(&shell, commands[0]);
    let logs = commands[1]
        .replace("KUBECONFIG", &kept.kubeconfig)
        .replace("URL", &kept.gcp);
    let (ok, stdout, stderr) = run_script(&shell, &logs, Duration::from_secs(60));
    assert!(ok, "{}: {logs} failed:\n{stdout}\n{stderr}", b.at());
    let id = Regex::new(r"-[0-9a-f]{8}-a\d+").unwrap();
    let shape = |l: &str| id.replace_all(l, "-<uid8>-a<n>").into_owned();
    let got: Vec<String> = stdout.lines().map(shape).collect();
    let mut at = 0;
    for want in commented_output(&b.text) {
        let want = shape(&want);
        match got[at..].iter().position(|g| *g == want) {
            Some(i) => at += i + 1,
            None => panic!("{}: {want:?} not printed (in order):\n{stdout}", b.at()),
        }
    }
}

/// docs/training.md "Re-run": the annotate command, with NAME a finished pipeline (the
/// quickstart under `local --keep`), starts a new run: `status.rerun.value` takes the new value
/// and the pipeline succeeds again.
#[test]
fn training_rerun_annotation_starts_a_new_run() {
    let root = root();
    let b = block(&root, "training-rerun", run_id);
    let shell = Shell::new(&root, BIN, &["kubectl"]);
    let kept = Kept::start(&shell, "tpu-operator local --keep examples/quickstart.yaml");
    let kubectl = |args: &str| {
        let (ok, out, err) = run_script(
            &shell,
            &format!("KUBECONFIG={} kubectl {args}", kept.kubeconfig),
            Duration::from_secs(60),
        );
        assert!(ok, "kubectl {args}: {err}");
        out
    };
    let script = format!(
        "export KUBECONFIG={}\n{}",
        kept.kubeconfig,
        b.text.replace("NAME", "quickstart")
    );
    let (ok, out, err) = run_script(&shell, &script, Duration::from_secs(60));
    assert!(ok, "{}: {out}\n{err}", b.at());
    let value = kubectl("get tpl quickstart -o 'jsonpath={.metadata.annotations.tpu-operator\\.dev/rerun}'");
    assert!(
        value.trim().parse::<u64>().is_ok(),
        "{}: the annotation is a timestamp: {value:?}",
        b.at()
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = kubectl(
            "get tpl quickstart -o 'jsonpath={.status.rerun.value}/{.status.phase}/{.status.rerun.startTime}'",
        );
        let parts: Vec<&str> = status.trim().split('/').collect();
        if parts.len() == 3 && parts[0] == value.trim() && parts[1] == "Succeeded" && !parts[2].is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the pipeline did not run again: {status}",
            b.at()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// docs/training.md "Rehearse failures": each command runs as written and exits as its comment
/// says (`# exits N`), 0 otherwise, and prints `local`'s summary with nothing left in the cloud.
#[test]
fn training_inject_rehearsals_run_and_exit_as_documented() {
    let root = root();
    let b = block(&root, "training-inject", run_id);
    let shell = Shell::new(&root, BIN, &[]);
    let exits = Regex::new(r"#\s*exits (\d+)").unwrap();
    let commands: Vec<&str> = b.text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!commands.is_empty(), "{}", b.at());
    for command in commands {
        let want: i32 = exits.captures(command).map_or(0, |c| c[1].parse().unwrap());
        let (_, stdout, stderr) = run_script(
            &shell,
            &format!("set +e; {command}\necho \"exit=$?\""),
            Duration::from_secs(300),
        );
        assert!(
            stdout.ends_with(&format!("exit={want}\n")),
            "{}: {command}: want exit {want}\n{stdout}\n{stderr}",
            b.at()
        );
        assert!(
            stdout.contains("cloud resources left: 0"),
            "{}: {command}:\n{stdout}",
            b.at()
        );
    }
}
