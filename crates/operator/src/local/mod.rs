//! `tpu-operator local`: the whole operator with no cluster and no cloud account.
//!
//! One process runs kube-emulator (on a loopback socket, so `--keep` can hand out a kubeconfig),
//! gcp-emulator with an accelerated clock, and the three controllers (whose clock reads the
//! emulator's, so TTLs and timeouts run at the same pace as the cloud). It installs the CRDs,
//! applies the manifests all-or-nothing, shows progress until every applied object is Ready or
//! failed, then deletes them, waits until the cloud side is empty and prints a summary.

mod apply;
mod progress;
mod seed;
mod summary;

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{ArgAction, Args};
use kube::api::DeleteParams;
use test_kit::{ContextSpec, Polls};
use tpu_operator_controller::{Context, Shutdown, governance::tenancy::WithoutPolicy, shutdown_on};

use self::progress::{Display, Key, Outcome, Tracker};
use crate::{config::LogFormat, run::run_controllers, telemetry};

/// Flags of `tpu-operator local`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Manifests to apply (multi-document YAML or JSON), as `kubectl apply -f` takes them: a
    /// file, a directory (its *.yaml, *.yml and *.json files in name order) or `-` for stdin
    /// [default: examples/quickstart.yaml].
    pub manifests: Vec<PathBuf>,
    /// More manifests, kubectl's way (`-f FILE`, `-f DIR`, `-f -`); applied after the positional ones.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filenames: Vec<PathBuf>,
    /// How much faster emulated cloud time runs than real time (600: a 10-minute TPU job takes 1 s;
    /// greater than 0, at most 1000000).
    #[arg(long, default_value_t = 600.0, value_parser = time_scale)]
    pub time_scale: f64,
    /// Give up waiting for the objects after this much real time.
    #[arg(long, default_value = "3m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Delete the objects at the end and check that the cloud side is empty (`--cleanup=false`
    /// leaves them, and the emulators stop with the process anyway).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub cleanup: bool,
    /// Write a small sample object under every input the manifests declare, as if the raw data
    /// were already uploaded (`--seed-inputs=false` shows what happens when it is not).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub seed_inputs: bool,
    /// Keep the emulators and controllers running after the objects finished, print a kubeconfig
    /// path for kubectl, and wait for Ctrl-C.
    #[arg(long, conflicts_with = "cleanup")]
    pub keep: bool,
    /// Where `--keep` writes the kubeconfig (default: a new temporary directory).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Address of the emulated Kubernetes API.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub kube_listen: String,
    /// Log format of the (quiet by default, `RUST_LOG` to change) logs on stderr.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// `--time-scale`: a positive, finite factor. 0 would stop emulated time (nothing would ever
/// finish) and a huge one overflows the emulated calendar within seconds.
fn time_scale(value: &str) -> Result<f64, String> {
    const MAX: f64 = 1_000_000.0;
    let scale: f64 = value
        .parse()
        .map_err(|_| format!("`{value}` is not a number (e.g. 600)"))?;
    if scale.is_finite() && scale > 0.0 && scale <= MAX {
        Ok(scale)
    } else {
        Err(format!(
            "must be greater than 0 and at most {MAX} (1 is real time; the default 600 runs a 10-minute job in 1 s)"
        ))
    }
}

/// Entry point of `tpu-operator local`.
pub async fn run(args: LocalArgs) -> anyhow::Result<ExitCode> {
    // Quiet by default: the progress lines are the output; `RUST_LOG=info` shows the controllers.
    telemetry::init(args.log_format, "error");
    // Ctrl-C / SIGTERM: stop waiting, then clean up as usual (or, with --keep, just exit).
    let stop = crate::run::termination_signal()?;
    let started = std::time::Instant::now();
    let mut paths: Vec<PathBuf> = args.manifests.iter().chain(&args.filenames).cloned().collect();
    if paths.is_empty() {
        paths.push("examples/quickstart.yaml".into());
    }
    let manifests = apply::load(&paths)?;

    // Kubernetes: CRDs from the binary itself, served on loopback; our own client skips the socket.
    let kube = test_kit::emulators::kube_with_crds().context("installing the CRDs into kube-emulator")?;
    let kube_server = kube
        .start(&args.kube_listen)
        .await
        .with_context(|| format!("kube-listen: cannot listen on {}", args.kube_listen))?;
    let client = kube::Client::new(kube.router(), "default");
    install_admission_policy(&client).await?;

    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(args.time_scale)
        .start()
        .await
        .context("starting gcp-emulator")?;

    // Held to the end: the kubeconfig lives in it.
    let _kubeconfig_dir = if args.keep {
        announce_endpoints(&args, &kube_server, &gcp)?
    } else {
        None
    };

    let applied = apply::apply_all(&client, &manifests).await?;
    // After the apply (nothing to say when it is refused), before the controllers start.
    let seeded = if args.seed_inputs {
        seed::seed_inputs(&gcp, &manifests)
    } else {
        0
    };
    if seeded > 0 {
        println!("seeded {seeded} declared input(s) in the emulated Cloud Storage");
    }
    let applied_keys = keys(&applied);
    println!(
        "applied {} object(s); emulated cloud time runs {}x faster",
        applied_keys.len(),
        args.time_scale
    );

    let ctx = Arc::new(context(&client, &gcp).await?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controllers = tokio::spawn(run_controllers(
        ctx,
        shutdown_on(async move {
            let _ = stop_rx.await;
        }),
    ));

    let mut watch = Watch {
        client: &client,
        clock: gcp.clock(),
        keys: &applied_keys,
        tracker: Tracker::default(),
        display: Display::new(),
    };
    let (finished_in_time, interrupted) = watch.until_done(args.timeout, &stop).await?;
    let converged_after = started.elapsed();
    let at_end = Tracker {
        objects: watch.tracker.objects.clone(),
    };
    if interrupted {
        println!("interrupted");
    } else if !finished_in_time {
        println!(
            "timeout: not every object finished within {}",
            humantime::format_duration(args.timeout)
        );
    }

    if args.keep {
        if !interrupted {
            print_summary(&at_end, &gcp, None, converged_after);
            println!("everything keeps running; press Ctrl-C to stop");
            stop.await;
        }
        let _ = stop_tx.send(());
        return Ok(ExitCode::SUCCESS);
    }

    let (cleanup_ok, left) = if args.cleanup {
        let (gone, left) = clean_up(&mut watch, &applied, &gcp, args.timeout).await?;
        (gone, Some(left))
    } else {
        (true, None)
    };
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), controllers).await;

    print_summary(&at_end, &gcp, left.as_deref(), started.elapsed());
    let failed = at_end
        .objects
        .iter()
        .filter(|(key, _)| applied_keys.contains(key))
        .any(|(_, seen)| seen.outcome() != Outcome::Ready);
    let leaked = left.as_ref().is_some_and(|l| !l.is_empty());
    Ok(if failed || leaked || !cleanup_ok {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Deletes the applied objects (newest first), waits until Kubernetes has none of them, then
/// until the emulated cloud is empty: (all gone from Kubernetes in time, what the cloud still
/// holds).
async fn clean_up(
    watch: &mut Watch<'_>,
    applied: &[apply::Applied],
    gcp: &gcp_emulator::Emulator,
    timeout: Duration,
) -> anyhow::Result<(bool, Vec<gcp_emulator::ResourceSummary>)> {
    println!("cleaning up");
    for a in applied.iter().rev() {
        if let Err(e) = a
            .api(watch.client)
            .delete(&a.name, &DeleteParams::background())
            .await
        {
            eprintln!("deleting {}/{}: {e}", a.kind, a.name);
        }
    }
    let gone = watch.until_gone(timeout).await?;
    Ok((gone, wait_cloud_empty(gcp).await))
}

/// `--keep`: writes the kubeconfig (into a temporary directory unless `--kubeconfig-out` names
/// one, returned so it lives as long as the run) and prints how to reach both emulators.
fn announce_endpoints(
    args: &LocalArgs,
    kube_server: &kube_emulator::Server,
    gcp: &gcp_emulator::Emulator,
) -> anyhow::Result<Option<tempfile::TempDir>> {
    let (path, dir) = match &args.kubeconfig_out {
        Some(path) => (path.clone(), None),
        None => {
            let dir = tempfile::Builder::new().prefix("tpu-operator-local-").tempdir()?;
            (dir.path().join("kubeconfig"), Some(dir))
        }
    };
    test_kit::emulators::write_kubeconfig(kube_server, &path)
        .with_context(|| format!("kubeconfig-out: writing {}", path.display()))?;
    println!("kubeconfig: {}", path.display());
    println!("  kubectl --kubeconfig {} get tpu-operator -w", path.display());
    println!("gcp-emulator: {}", gcp.url());
    Ok(dir)
}

/// The namespaced objects applied, as the tracker names them.
fn keys(applied: &[apply::Applied]) -> Vec<Key> {
    applied
        .iter()
        .filter(|a| a.namespace.is_some())
        .map(|a| Key {
            kind: a.kind.clone(),
            namespace: a.namespace.clone().unwrap_or_default(),
            name: a.name.clone(),
        })
        .collect()
}

/// Follows the applied objects, printing their progress every 100 ms.
struct Watch<'a> {
    client: &'a kube::Client,
    clock: gcp_emulator::Clock,
    keys: &'a [Key],
    tracker: Tracker,
    display: Display,
}

impl Watch<'_> {
    async fn poll(&mut self) -> anyhow::Result<()> {
        self.tracker
            .poll(self.client, self.clock.now(), self.keys)
            .await?;
        self.display.show(self.tracker.lines(self.clock.now()));
        Ok(())
    }

    /// Until every applied object is done, `timeout` passes or `stop` fires: (done in time,
    /// interrupted).
    async fn until_done(&mut self, timeout: Duration, stop: &Shutdown) -> anyhow::Result<(bool, bool)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut interrupted = false;
        loop {
            self.poll().await?;
            if self.tracker.all_applied_done(self.keys) {
                return Ok((true, interrupted));
            }
            if tokio::time::Instant::now() >= deadline || interrupted {
                return Ok((false, interrupted));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop.clone() => interrupted = true,
            }
        }
    }

    /// Until every object is gone from Kubernetes; `false` when `timeout` passed first.
    async fn until_gone(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.tracker.all_gone() {
            if tokio::time::Instant::now() >= deadline {
                println!(
                    "cleanup: objects still present after {}",
                    humantime::format_duration(timeout)
                );
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.poll().await?;
        }
        Ok(true)
    }
}

/// The chart's ValidatingAdmissionPolicy and its binding (every namespace), so TpuPolicy objects
/// applied here are enforced at apply as in a cluster installed with the chart.
async fn install_admission_policy(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::{Api, PostParams};
    const NAME: &str = "tpu-operator-tpupolicy";
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": tpu_operator_api::admission::policy_spec(),
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": tpu_operator_api::admission::binding_spec(NAME),
    }))?;
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .context("installing the ValidatingAdmissionPolicy into kube-emulator")?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .context("installing the ValidatingAdmissionPolicyBinding into kube-emulator")?;
    Ok(())
}

/// The controllers' context: the emulator's clock, fast requeues (real time), short backoff, and
/// TpuPolicy objects applied to the local cluster enforced as in a real one.
async fn context(client: &kube::Client, gcp: &gcp_emulator::Emulator) -> anyhow::Result<Context> {
    let spec = ContextSpec {
        cluster_id: "local".into(),
        default_project: "local-project".into(),
        namespace: None,
        concurrency: 4,
        polls: Polls {
            active: Duration::from_millis(100),
            stable: Duration::from_secs(1),
            capacity: Duration::from_millis(200),
            watched: Duration::from_secs(5),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
        },
        tenancy: Some(WithoutPolicy::Allow),
    };
    Ok(spec.build(client, gcp).await?)
}

/// Billable cloud resources still present, after giving in-flight deletions a moment (their
/// emulated duration is a fraction of a second of real time at the usual scales).
async fn wait_cloud_empty(gcp: &gcp_emulator::Emulator) -> Vec<gcp_emulator::ResourceSummary> {
    let billable = || {
        gcp.list_resources()
            .into_iter()
            .filter(|r| summary::BILLABLE_KINDS.contains(&r.kind.as_str()))
            .collect::<Vec<_>>()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = billable();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print_summary(
    at_end: &Tracker,
    gcp: &gcp_emulator::Emulator,
    left: Option<&[gcp_emulator::ResourceSummary]>,
    wall: Duration,
) {
    println!();
    print!("{}", summary::table(&summary::rows(at_end)));
    for failure in summary::failures(&at_end.objects) {
        println!("  {failure}");
    }
    println!("cloud API calls: {}", summary::calls_line(&gcp.call_counts()));
    println!("wall time: {:.1}s", wall.as_secs_f64());
    match left {
        Some(left) => println!("{}", summary::left_line(left)),
        None => println!(
            "cloud resources now: {} (not cleaned up)",
            gcp.list_resources()
                .iter()
                .filter(|r| summary::BILLABLE_KINDS.contains(&r.kind.as_str()))
                .count()
        ),
    }
}
