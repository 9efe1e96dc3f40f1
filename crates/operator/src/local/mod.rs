//! `tpu-operator local`: the whole operator with no cluster and no cloud account.
//!
//! One process runs kube-emulator (on a loopback socket, so `--keep` can hand out a kubeconfig),
//! gcp-emulator with an accelerated clock, and the three controllers (whose clock reads the
//! emulator's, so TTLs and timeouts run at the same pace as the cloud). It installs the CRDs,
//! applies the manifests all-or-nothing, shows progress until every applied object is Ready or
//! failed, then deletes them, waits until the cloud side is empty and prints a summary.

mod apply;
mod clock;
mod controllers;
mod display;
mod kube_side;
mod progress;
mod rehearse;
mod seed;
mod summary;
mod watch;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{ArgAction, Args};

use self::clock::by_events;
pub use self::clock::runtime;
use self::controllers::{publish_capacity, start_controllers};
use self::kube_side::start_kube;
use self::progress::{Key, Outcome, Tracker};
use self::watch::{Watch, clean_up};
use crate::{config::LogFormat, telemetry};

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
    /// Emulated cloud seconds per second of the controllers' clock (600: a poll every 100 ms
    /// looks at the cloud once an emulated minute; greater than 0, at most 1000000).
    #[arg(long, default_value_t = 600.0, value_parser = time_scale)]
    pub time_scale: f64,
    /// Run emulated time on the wall clock (times `--time-scale`) instead of advancing it by
    /// events. By default the clock moves only when the controllers and the emulators all wait
    /// on a timer, so a run prints the same times and costs on any machine, however busy, and
    /// takes no longer than the work itself; `--keep` implies this flag, since you then watch
    /// the objects in real time.
    #[arg(long)]
    pub wall_clock: bool,
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
    /// Rehearse a failure (repeatable): `preempt:AFTER` reclaims the first Spot training
    /// resource after it has run AFTER of emulated time; `stockout:ZONE:ACCELERATOR[:FOR]` leaves
    /// a zone without that TPU (family or type) for FOR or the whole run; `fail:preprocess[:N]`
    /// and `fail:train[:N]` fail the first N attempts of a stage;
    /// `full-reservation:projects/P/locations/ZONE/reservations/NAME` makes a reservation whose
    /// capacity is all in use. See docs/training.md and docs/capacity.md.
    #[arg(long, value_name = "WHAT", value_parser = rehearse::parse)]
    pub inject: Vec<rehearse::Injection>,
    /// After the summary, print the capacity view as `tpu-operator capacity` prints a cluster's:
    /// this run's stockout memory and the slices that were waiting, taken when the objects had
    /// finished (before the clean-up deletes them).
    #[arg(long)]
    pub capacity: bool,
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
    let manifests = apply::load(&manifest_paths(&args))?;
    // The emulator and its server are held to the end of the run.
    let (_kube, kube_server, client) = start_kube(&args).await?;
    let gcp = start_gcp(&args).await?;

    // Held to the end: the kubeconfig lives in it.
    let _kubeconfig_dir = announce_endpoints(&args, &kube_server, &gcp)?;

    let (applied, applied_keys) = apply_and_seed(&args, &client, &gcp, &manifests).await?;

    let (rehearsal, said) = rehearse::Rehearsal::start(&args.inject, &gcp, gcp.clock().now());
    for line in said {
        println!("{line}");
    }
    let (stop_controllers, controllers, ctx) =
        start_controllers(&client, &gcp, by_events(&args), args.time_scale).await?;
    if args.keep {
        publish_capacity(&ctx);
    }
    let mut watch = Watch::new(&client, &gcp, &applied_keys, rehearsal);
    let (finished_in_time, interrupted) = watch.until_done(args.timeout, &stop).await?;
    let converged_after = started.elapsed();
    let at_end = Tracker {
        objects: watch.tracker.objects.clone(),
    };
    report_unfinished(interrupted, finished_in_time, args.timeout);
    let capacity_view = capacity_view(&args, &ctx, &client).await;

    if args.keep {
        if !interrupted {
            watch.finish();
            summary::print(&at_end, &at_end, &gcp, None, converged_after);
            print_capacity(capacity_view.as_ref());
            println!("everything keeps running; press Ctrl-C to stop");
            stop.await;
        }
        let _ = stop_controllers.send(());
        return Ok(ExitCode::SUCCESS);
    }

    let (cleanup_ok, left) = if args.cleanup {
        let (gone, left) = clean_up(&mut watch, &applied, &gcp, args.timeout).await?;
        (gone, Some(left))
    } else {
        (true, None)
    };
    let _ = stop_controllers.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), controllers).await;

    watch.finish();
    summary::print(&at_end, &watch.tracker, &gcp, left.as_deref(), started.elapsed());
    print_capacity(capacity_view.as_ref());
    Ok(exit_code(&at_end, &applied_keys, left.as_deref(), cleanup_ok))
}

/// The manifests to apply: positional paths and `-f` files, else the quickstart example.
fn manifest_paths(args: &LocalArgs) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = args.manifests.iter().chain(&args.filenames).cloned().collect();
    if paths.is_empty() {
        paths.push("examples/quickstart.yaml".into());
    }
    paths
}

/// The cloud: gcp-emulator on a wall clock scaled by `--time-scale`.
async fn start_gcp(args: &LocalArgs) -> anyhow::Result<gcp_emulator::Emulator> {
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(args.time_scale)
        .start()
        .await
        .context("starting gcp-emulator")?;
    // One timeline (issue 46): kube-emulator stamps objects and shows ages on the emulated clock
    // the controllers write status times from, so `LAST CKPT` is an age, not a future `0s`.
    let clock = gcp.clock();
    kube_emulator::meta::set_process_clock(move || clock.now());
    Ok(gcp)
}

/// Applies the manifests, then (`--seed-inputs`) seeds the inputs they declare: after the apply
/// (nothing to say when it is refused), before the controllers start. Returns what was applied
/// and the namespaced objects among it, as the tracker names them.
async fn apply_and_seed(
    args: &LocalArgs,
    client: &kube::Client,
    gcp: &gcp_emulator::Emulator,
    manifests: &[apply::Manifest],
) -> anyhow::Result<(Vec<apply::Applied>, Vec<Key>)> {
    let applied = apply::apply_all(client, manifests).await?;
    let seeded = if args.seed_inputs {
        seed::seed_inputs(gcp, manifests)
    } else {
        0
    };
    if seeded > 0 {
        println!("seeded {seeded} declared input(s) in the emulated Cloud Storage");
    }
    let applied_keys = keys(&applied);
    println!(
        "applied {} object(s); {}",
        applied_keys.len(),
        if by_events(args) {
            "emulated time advances by events, not by the wall clock".to_owned()
        } else {
            format!("emulated cloud time runs {}x faster", args.time_scale)
        }
    );
    Ok((applied, applied_keys))
}

/// Says why the wait ended early: an interrupt, or the timeout.
fn report_unfinished(interrupted: bool, finished_in_time: bool, timeout: Duration) {
    if interrupted {
        println!("interrupted");
    } else if !finished_in_time {
        println!(
            "timeout: not every object finished within {}",
            humantime::format_duration(timeout)
        );
    }
}

/// Failure when an applied object did not end Ready, the cloud still holds something, or the
/// clean-up did not finish in time.
fn exit_code(
    at_end: &Tracker,
    applied_keys: &[Key],
    left: Option<&[gcp_emulator::ResourceSummary]>,
    cleanup_ok: bool,
) -> ExitCode {
    let failed = at_end
        .objects
        .iter()
        .filter(|(key, _)| applied_keys.contains(key))
        .any(|(_, seen)| seen.outcome() != Outcome::Ready);
    let leaked = left.is_some_and(|l| !l.is_empty());
    if failed || leaked || !cleanup_ok {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--keep`: writes the kubeconfig (into a temporary directory unless `--kubeconfig-out` names
/// one, returned so it lives as long as the run) and prints how to reach both emulators. Without
/// `--keep`, nothing.
fn announce_endpoints(
    args: &LocalArgs,
    kube_server: &kube_emulator::Server,
    gcp: &gcp_emulator::Emulator,
) -> anyhow::Result<Option<tempfile::TempDir>> {
    if !args.keep {
        return Ok(None);
    }
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
    println!(
        "  tpu-operator logs tpl/NAME --kubeconfig {} --gcp-emulator {}",
        path.display(),
        gcp.url()
    );
    println!(
        "  tpu-operator capacity --kubeconfig {} --operator-namespace default",
        path.display()
    );
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

/// `--capacity`: the stockout memory as the objects finished, in the view `tpu-operator capacity`
/// prints.
async fn capacity_view(
    args: &LocalArgs,
    ctx: &tpu_operator_controller::Context,
    client: &kube::Client,
) -> Option<crate::capacity::View> {
    if !args.capacity {
        return None;
    }
    let now = ctx.clock.now();
    Some(crate::capacity::view_of(ctx.capacity.snapshot(now), client, now).await)
}

/// `--capacity`: the view taken when the objects finished.
fn print_capacity(view: Option<&crate::capacity::View>) {
    if let Some(view) = view {
        println!();
        crate::capacity::print(view, crate::capacity::Output::Table);
    }
}
