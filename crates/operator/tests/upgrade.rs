//! An upgrade from the previous release to this one with work in every phase, then a rollback,
//! on the real kube-apiserver, the way docs/install.md ("Upgrade") and docs/api-versions.md
//! ("Upgrading and rolling back") tell a user to do it:
//! - the previous release (scripts/previous-release.sh: its chart and binary, built from this
//!   repository's history) installed with `helm install`, its binary leading;
//! - work applied from Git as that release's users wrote it (`v1alpha1`, server-side, as Argo CD
//!   or Flux apply): slices ready, creating and queued, a batch running, pipelines preprocessing,
//!   training, suspended and failed;
//! - this release's CRDs (`helm show crds | kubectl apply --server-side --force-conflicts`),
//!   `helm upgrade`, this binary started beside the old one, the old one sent SIGTERM as a
//!   rolling update does, and the Lease handed over;
//! - `helm rollback` to the previous release the same way, with work still in flight; then
//!   every run finishes, and every object is deleted.
//!
//! The cloud's clock stands still across each hand-over, so nothing may change there: each
//! object's phase and every cloud resource are the same after it as before, no create, delete or
//! cancel is made, and Argo CD / Flux see no diff (`kubectl diff --server-side` of the Git
//! manifests). Then every run finishes as it would have, with exactly one create per cloud
//! resource, and nothing is left once the objects are deleted. Figures (objects per phase, calls
//! per minute steady and during each hand-over, the hand-over gap) are printed for
//! docs/api-versions.md.
//!
//! Against kube-emulator (no Deployments, no RBAC, no Helm) it prints a NOTICE and passes;
//! scripts/ci-control-plane.sh runs it with TPU_OPERATOR_KUBE=real.

mod support;

// Shared with tests/install_paths.rs, which uses parts this suite does not.
#[allow(dead_code)]
#[path = "install_paths/cluster.rs"]
mod cluster;
#[path = "upgrade/handover.rs"]
mod handover;
#[path = "upgrade/previous.rs"]
mod previous;
#[path = "upgrade/workload.rs"]
mod workload;

use std::time::Duration;

use cluster::{Cli, Operator};
use handover::{Calls, HandOver};
use previous::Release;
use support::chart_dir;
use workload::{
    ALL, CREATING, FAILED, NS, PREPROCESSING, QUEUED, QUEUED_ZONE, READY, RUNNING, SUSPENDED, TRAINING,
    cloud_state, phases,
};

const NAMESPACE: &str = "tpu-operator";
const RELEASE: &str = "tpu-operator";
/// One step of the cloud's clock while the test drives work forward.
const STEP: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_with_work_in_every_phase_then_roll_back() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let target = test_kit::target().expect("TPU_OPERATOR_KUBE / KUBECONFIG");
    let test_kit::Target::Real { kubeconfig } = target else {
        println!(
            "NOTICE: the upgrade suite needs Helm and the real control plane (scripts/ci-control-plane.sh)"
        );
        return;
    };
    let previous = Release::build();
    let cli = Cli::new(&kubeconfig);
    let gcp = gcp_emulator::Emulator::builder()
        .manual_clock(chrono::Utc::now())
        .start()
        .await
        .expect("gcp-emulator");

    // The previous release, installed as its own docs said.
    cli.remove_crds().await;
    helm(&cli, "install", &previous.chart());
    cli.wait_crds_established().await;
    let mut old = Operator::start_binary(&previous.binary(), "old", &cli, NAMESPACE, RELEASE, &gcp.url());
    old.wait_ready().await;
    let git = start_work(&cli, &gcp, &previous).await;
    let at_upgrade = phases(&cli);
    println!("upgrade: {} objects in flight: {at_upgrade:?}", at_upgrade.len());
    let steady = Calls::over(&gcp, handover::WINDOW).await;
    println!("upgrade: steady, previous release: {steady}");

    let mut new = upgrade(&cli, &gcp, &mut old).await;
    assert_eq!(phases(&cli), at_upgrade, "a phase changed across the upgrade");
    no_gitops_diff(&cli, &git, "after the upgrade");
    drop(old);

    // Work goes on under this release; the queued slice still waits, the preprocessing pipeline
    // reaches training.
    advance_until(
        &cli,
        &gcp,
        "the upgraded release finishes what was running",
        |p| {
            p[&RUNNING] == "Succeeded"
                && p[&TRAINING] == "Succeeded"
                && p[&CREATING] == "Ready"
                && cloud_state(&gcp, "jobs", PREPROCESSING.name).as_deref() == Some("JOB_STATE_RUNNING")
        },
    )
    .await;
    let at_rollback = phases(&cli);
    println!("rollback: objects: {at_rollback:?}");

    // Rollback: the previous chart and binary; this release's CRDs stay, as Helm leaves them.
    let mut back = HandOver::run(&cli, &gcp, &mut new.operator, "old-again", async || {
        cli.helm(&["rollback", RELEASE, "1", "-n", NAMESPACE, "--wait=false"]);
        Operator::start_binary(
            &previous.binary(),
            "old-again",
            &cli,
            NAMESPACE,
            RELEASE,
            &gcp.url(),
        )
    })
    .await;
    assert_eq!(phases(&cli), at_rollback, "a phase changed across the rollback");
    no_gitops_diff(&cli, &git, "after the rollback");

    // The previous release finishes the rest: the queued slice once capacity is back, the
    // pipeline in training, and the suspended one once Git resumes it.
    gcp.inject(gcp_emulator::Fault::LiftStockout {
        zone: QUEUED_ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    let resumed = git.replace("\"suspend\":true", "\"suspend\":false");
    workload::apply(&cli, "resumed.yaml", &resumed);
    advance_until(&cli, &gcp, "every run finishes after the rollback", |p| {
        p[&QUEUED] == "Ready" && p[&PREPROCESSING] == "Succeeded" && p[&SUSPENDED] == "Succeeded"
    })
    .await;
    let end = phases(&cli);
    assert_eq!(end[&READY], "Ready");
    assert_eq!(end[&FAILED], "Failed");
    println!("end: {end:?}");
    handover::one_create_each(&gcp);

    delete_everything(&cli, &gcp).await;
    back.operator.terminate().await;
    uninstall(&cli).await;
    println!(
        "upgrade: hand-over gaps {:.1?} (upgrade) and {:.1?} (rollback); during them: {} and {}",
        new.gap, back.gap, new.calls, back.calls
    );
}

/// This release, as docs/install.md's "Upgrade" says: the CRDs first, then the chart, then the
/// rolling update's hand-over to this binary.
async fn upgrade(cli: &Cli, gcp: &gcp_emulator::Emulator, old: &mut Operator) -> HandOver {
    HandOver::run(cli, gcp, old, "new", async || {
        apply_crds(cli);
        helm(cli, "upgrade", &chart_dir());
        Operator::start_binary(
            std::path::Path::new(cluster::BIN),
            "new",
            cli,
            NAMESPACE,
            RELEASE,
            &gcp.url(),
        )
    })
    .await
}

/// Every object deleted (the previous release leading): nothing left in the cloud.
async fn delete_everything(cli: &Cli, gcp: &gcp_emulator::Emulator) {
    cli.kubectl(&["delete", &workload::kinds(), "--all", "-n", NS, "--wait=false"]);
    advance_until(cli, gcp, "every object and cloud resource gone", |p| {
        p.values().all(String::is_empty) && gcp.billable_resources().is_empty()
    })
    .await;
}

/// `helm install` or `helm upgrade` of `chart`, with the install's values.
fn helm(cli: &Cli, verb: &str, chart: &std::path::Path) {
    let mut args = vec![verb, RELEASE, chart.to_str().unwrap(), "-n", NAMESPACE];
    if verb == "install" {
        args.push("--create-namespace");
    }
    args.extend([
        "--set",
        "image.repository=registry.example/tpu-operator",
        "--set",
        "image.tag=0.1.0",
    ]);
    cli.helm(&args);
}

/// The work in every phase, started under the previous release; returns the Git manifests.
async fn start_work(cli: &Cli, gcp: &gcp_emulator::Emulator, previous: &Release) -> String {
    cli.kubectl(&["create", "namespace", NS]);
    workload::apply(cli, "policy.yaml", &workload::policy());
    // The input the previous release's batch example reads.
    gcp.put_object(
        "demo-project-tpu-data",
        "raw/corpus/part-00000",
        "text",
        "text/plain",
    );
    gcp.inject(gcp_emulator::Fault::Stockout {
        zone: QUEUED_ZONE.into(),
        accelerator: "v6e".into(),
    })
    .unwrap();
    // First the runs that must be far along: a ready slice, a pipeline training, one failed.
    let first = [READY, TRAINING, FAILED, SUSPENDED];
    workload::apply(cli, "first.yaml", &workload::manifests(previous, &first));
    advance_until(cli, gcp, "the first objects ready, training and failed", |p| {
        // A pipeline's batch belongs to its PreprocessBatch, `<pipeline>-preprocess`.
        let failing = format!("{}-preprocess", FAILED.name);
        if let Some(batch) = workload::cloud(gcp, "batches", &failing)
            && batch["state"] == "RUNNING"
        {
            let name = batch["name"].as_str().unwrap().to_string();
            let _ = gcp.inject(gcp_emulator::Fault::FailBatch { name, message: None });
        }
        p[&READY] == "Ready"
            && p[&FAILED] == "Failed"
            && cloud_state(gcp, "jobs", TRAINING.name).as_deref() == Some("JOB_STATE_RUNNING")
    })
    .await;
    // Then the ones caught in the middle.
    let second = [CREATING, QUEUED, RUNNING, PREPROCESSING];
    workload::apply(cli, "second.yaml", &workload::manifests(previous, &second));
    advance_until(cli, gcp, "a slice creating, one queued, batches running", |_| {
        cloud_state(gcp, "nodes", CREATING.name).as_deref() == Some("CREATING")
            && cloud_state(gcp, "queued", QUEUED.name).as_deref() == Some("WAITING_FOR_RESOURCES")
            && cloud_state(gcp, "batches", RUNNING.name).as_deref() == Some("RUNNING")
            && cloud_state(gcp, "batches", &format!("{}-preprocess", PREPROCESSING.name)).as_deref()
                == Some("RUNNING")
    })
    .await;
    let all = workload::manifests(previous, &ALL);
    workload::apply(cli, "git.yaml", &all);
    all
}

/// Moves the cloud's clock a step at a time, giving the operator a moment after each, until
/// `done` holds for the objects' phases. On a hang: the phases and every object's conditions.
async fn advance_until(
    cli: &Cli,
    gcp: &gcp_emulator::Emulator,
    what: &str,
    mut done: impl FnMut(&std::collections::BTreeMap<workload::Obj, String>) -> bool,
) {
    let started = std::time::Instant::now();
    loop {
        let phases = phases(cli);
        if done(&phases) {
            return;
        }
        if started.elapsed() > cluster::WAIT {
            let conditions = cli.kubectl(&[
                "get",
                &workload::kinds(),
                "-n",
                NS,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}: {.status.conditions}{\"\\n\"}{end}",
            ]);
            let labelled: Vec<_> = [
                gcp.nodes(),
                gcp.batches(),
                gcp.custom_jobs(),
                gcp.queued_resources(),
            ]
            .concat()
            .into_iter()
            .map(|r| {
                (
                    r["name"].clone(),
                    r["state"].clone(),
                    r["labels"]["tpu-operator-name"].clone(),
                )
            })
            .collect();
            panic!("timed out waiting for {what}: phases {phases:?}\n{conditions}\ncloud: {labelled:?}");
        }
        gcp.clock().advance(STEP);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Argo CD's and Flux's view: a server-side dry-run of the Git manifests as their field manager
/// shows no difference.
fn no_gitops_diff(cli: &Cli, git: &str, when: &str) {
    let file = cli.file("diff.yaml", git);
    let out = cli
        .kubectl_cmd(&[
            "diff",
            "--server-side",
            "--field-manager",
            workload::MANAGER,
            "-f",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "GitOps diff {when}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("gitops: 0 diff {when}");
}

/// The release uninstalled, the namespaces gone, and this release's CRDs in place for the suites
/// that follow.
async fn uninstall(cli: &Cli) {
    cli.helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"]);
    cli.kubectl(&["delete", "namespace", NS, NAMESPACE, "--wait"]);
    cli.kubectl(&["delete", "tpupolicy", NS, "--ignore-not-found"]);
    apply_crds(cli);
    cli.wait_crds_established().await;
}

/// This release's CRDs, applied as docs/install.md's "Upgrade" step 1 does.
fn apply_crds(cli: &Cli) {
    let crds = cli.helm(&["show", "crds", chart_dir().to_str().unwrap()]);
    let crds = cli.file("crds.yaml", &crds);
    cli.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        crds.to_str().unwrap(),
    ]);
}
