//! The differential suite: one request sequence (`kube_conformance::scenario`) sent to kube-emulator
//! and to a real kube-apiserver; the normalised transcripts must agree except for the accepted
//! differences in `kube_conformance::known`.
//!
//! Without `TPU_OPERATOR_KUBE=real` only the emulator side runs (its answers are checked against the
//! statuses Kubernetes' semantics call for) and the comparison is reported as SKIPPED: CI runs
//! `scripts/ci-control-plane.sh`, which starts the real control plane and sets the switch.

use kube_conformance::{
    Transcript, compare,
    report::{markdown, unexpected, verdict},
    scenario,
};
use test_kit::{Target, target};

/// Both tests use the same namespace and CRD on the real server, so they take turns.
static REAL_SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The emulator side: a fresh in-process kube-emulator, reached without a socket.
async fn emulator_transcript() -> Transcript {
    let emulator = kube_emulator::KubeEmulator::new();
    let client = kube::Client::new(emulator.router(), "default");
    scenario::run(client)
        .await
        .expect("scenario against the in-process kube-emulator")
}

async fn real_transcript(kubeconfig: &std::path::Path) -> Transcript {
    let client = test_kit::real_client(kubeconfig)
        .await
        .expect("client for the real control plane");
    scenario::run(client)
        .await
        .expect("scenario against the real kube-apiserver")
}

fn write_report(name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    match std::fs::write(&path, text) {
        Ok(()) => println!("report written to {}", path.display()),
        Err(e) => println!("could not write {}: {e}", path.display()),
    }
}

/// The reference itself must be reproducible: two runs against the real server normalise to the
/// same transcript, and every answer is the one the scenario expects. This checks the scenario and
/// the normaliser, so that a difference against the emulator is the emulator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_apiserver_agrees_with_itself() {
    let kubeconfig = match target().expect("TPU_OPERATOR_KUBE / KUBECONFIG") {
        Target::Real { kubeconfig } => kubeconfig,
        Target::Emulator => {
            println!(
                "SKIPPED real_apiserver_agrees_with_itself: TPU_OPERATOR_KUBE is not `real` (CI runs it via scripts/ci-control-plane.sh)"
            );
            return;
        }
    };
    let _turn = REAL_SERVER.lock().await;
    let first = real_transcript(&kubeconfig).await;
    let wrong = unexpected("kube-apiserver", &first);
    assert!(
        wrong.is_empty(),
        "the scenario expects statuses the real server does not give:\n{}",
        wrong.join("\n")
    );
    let second = real_transcript(&kubeconfig).await;
    let comparison = compare(&first, &second);
    let v = kube_conformance::report::verdict_with(&comparison, &[]);
    assert!(
        comparison.differences.is_empty(),
        "two runs against the real server differ after normalisation:\n{}",
        markdown(&v)
    );
    println!(
        "real kube-apiserver: {} exchanges, reproducible",
        comparison.compared
    );
}

/// The differential comparison proper. Fails on any difference not accepted in
/// `kube_conformance::known` and prints the full report (also written to the target directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_matches_real_apiserver() {
    let target = target().expect("TPU_OPERATOR_KUBE / KUBECONFIG");
    let emulator = emulator_transcript().await;
    let Target::Real { kubeconfig } = target else {
        // No reference here: run the emulator side alone and check its answers against the
        // statuses Kubernetes' semantics call for, minus the accepted differences.
        println!(
            "NOTICE: real-server comparison SKIPPED (TPU_OPERATOR_KUBE is not `real`); ran the {} emulator \
             exchanges alone. scripts/ci-control-plane.sh runs the comparison in CI.",
            emulator.exchanges.len()
        );
        let known = kube_conformance::known::KNOWN;
        let wrong: Vec<String> = unexpected("kube-emulator", &emulator)
            .into_iter()
            .zip(emulator.unexpected())
            .filter(|(_, e)| !known.iter().any(|k| k.covers_status(&e.step)))
            .map(|(line, _)| line)
            .collect();
        assert!(
            wrong.is_empty(),
            "kube-emulator answers differ from Kubernetes semantics:\n{}",
            wrong.join("\n")
        );
        return;
    };
    let _turn = REAL_SERVER.lock().await;
    let real = real_transcript(&kubeconfig).await;
    let comparison = compare(&emulator, &real);
    let v = verdict(&comparison);
    let report = markdown(&v);
    println!("{report}");
    write_report("differential-report.md", &report);
    // The real server is the reference: where it refuses what the scenario expects (e.g. one of
    // the project's committed CRDs), the project is wrong, and that is reported first.
    let wrong = unexpected("kube-apiserver", &real);
    assert!(
        wrong.is_empty(),
        "the real kube-apiserver does not give the statuses the scenario expects (a project file \
         the real server refuses, or a wrong expectation):\n{}",
        wrong.join("\n")
    );
    assert!(
        v.new.is_empty(),
        "{} new difference(s) between kube-emulator and kube-apiserver (table above)",
        v.new.len()
    );
}
