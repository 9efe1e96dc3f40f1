//! The long crash-consistency run: seeded runs of `crash::run` (in-process controllers, killed by
//! aborting their tasks) until at least `--points` kill points were exercised, plus `--binary N`
//! runs against the real `tpu-operator` binary killed with SIGKILL. Prints one line per failing
//! seed and a summary; exits 1 on any broken promise. `--budget N`: instead, N budgets crossed
//! under kills and refused writes (`budget_crossing`).
//!
//! cargo run --release -p tpu-operator-reliability --bin crash-bench -- --points 500 --binary 10
//!
//! Runs alternate between the two backends by seed parity (even: TPU API nodes and queued
//! resources, odd: Compute Engine instances, MIGs and resize requests); `--backend tpu-api` or
//! `--backend compute-engine` keeps to one. The summary has a line per backend.
//!
//! `--capacity plan`: every run's slice has a `spec.capacityPlan` (`Capacity::PLANS`: a full
//! reservation, then Spot stocked out, then on demand in another zone on the TPU API; Spot stocked
//! out, then on demand in another zone on Compute Engine); ordinary runs draw these among the
//! other capacities (binary runs never: their controllers count `waitFor` on the wall clock,
//! see `crash::Plans::Never`). "two-rung moments" are the distinct findings of a slice with requests
//! alive on two rungs (incarnations) at once, looked for at every tick and kill.
//!
//! `--maintenance`: every run's slice is a TPU API node (Spot, on demand or queued) with a startup
//! script, and once it converged its node is maintained under kills (`crash/maintenance.rs`): a
//! notice then the maintenance at its window (3 runs in 4; the operator asks for a checkpoint 5
//! min before it), or `simulateMaintenanceEvent`. The slice's container checkpoints into its
//! `CHECKPOINT_DIR`, and two notices in three may be moved, which the operator starts early once
//! the asked checkpoint is committed. The summary counts the checkpoint requests (`nodes.patch`
//! of the node's metadata) per window, the early starts per reschedulable window (at most one
//! each), and the maintenance restarts and recreations counted.
//!
//! `--multislice`: every run's slice is a TPU API Spot multislice of 2–4 slices (one queued
//! resource per slice) with a startup script, and once it converged one slice's node (drawn) is
//! preempted under kills before the loss, while it is counted, while the slice is replaced alone
//! and after (`crash/multislice.rs`). Checked at every tick and kill: at most one queued resource
//! per slice not being deleted; over the step: exactly one create of the lost slice's queued
//! resource after the loss, none and no delete on the other slices. The summary counts the
//! slices lost, the creates per lost slice, the writes on surviving slices and the steps that
//! ended (the slice Ready again with the lost slice's `sliceRestarts` at 1).
//!
//! `--vertex-faults`: every run trains on Vertex with a lost `customJobs.create` reply and lists
//! 2 min behind (`CrashConfig::vertex_faults`): "duplicates" are the ones left running.

mod steps;

use std::collections::BTreeMap;

use steps::{Maintained, Multisliced};

use tpu_operator_reliability::{
    arg, budget_crossing,
    crash::{self, CrashConfig, CrashReport, Plans},
    fixtures::{Backend, Training},
    process::OperatorBuild,
};

/// Figures of one backend's runs.
#[derive(Default)]
struct Tally {
    runs: u64,
    kills: u64,
    duplicates: usize,
    leaks: usize,
    two_rungs: usize,
    /// Runs of a planned slice, and of those the ones where one slice was seen with two or
    /// more requests one after another (the plan's moves watched by the two-rung check).
    plan_runs: u64,
    plan_moves_seen: u64,
    bad: u64,
    /// TpuSlices by capacity (the run's slice and a TPU VM pipeline's training slice).
    slices: BTreeMap<String, u64>,
    maintenance: Maintained,
    multislice: Multisliced,
}

impl Tally {
    fn add(&mut self, r: &CrashReport) {
        self.runs += 1;
        self.kills += u64::from(r.kills);
        self.duplicates += r.duplicates;
        self.leaks += r.leaks;
        self.two_rungs += r.two_rungs;
        if r.capacity.is_plan() {
            self.plan_runs += 1;
            self.plan_moves_seen += u64::from(r.rungs_seen >= 2);
        }
        self.bad += u64::from(!r.ok());
        if let Some(m) = &r.maintenance {
            self.maintenance.add(m);
        }
        if let Some(m) = &r.multislice {
            self.multislice.add(m);
        }
        *self.slices.entry(format!("{:?}", r.capacity)).or_default() += 1;
        if let Training::TpuVm(c) = r.training {
            *self.slices.entry(format!("{c:?} (training)")).or_default() += 1;
        }
    }

    /// A backend's line of the summary.
    fn line(&self) -> String {
        format!(
            "{} runs, {} kill points, {} duplicates, {} leaks, {} two-rung moments, {} runs with broken promises; slices {:?}; {} planned runs, {} seen moving from one request to the next",
            self.runs,
            self.kills,
            self.duplicates,
            self.leaks,
            self.two_rungs,
            self.bad,
            self.slices,
            self.plan_runs,
            self.plan_moves_seen
        )
    }
}

/// Counts over a set of runs, for the TOTAL line and the exit code.
#[derive(Default)]
struct Totals {
    kills: u64,
    duplicates: usize,
    leaks: usize,
    two_rungs: usize,
    bad: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let points = arg("--points", 500);
    let first_seed = arg("--seed", 1000);
    let binary_runs = arg("--binary", 0);
    if let Some(n) = value_of("--budget") {
        let ok = budget_crossing::bench(n.parse().expect("--budget N"), first_seed).await;
        std::process::exit(i32::from(!ok));
    }
    let cfg = config();
    // The in-process runs link the controllers into this executable: their build is its own.
    println!(
        "in-process runs: the controllers as built into this {} crash-bench",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let in_process = in_process_runs(points, first_seed, &cfg).await;
    let binary = binary_runs_of(binary_runs).await;
    let dups = in_process.duplicates + binary.duplicates;
    let leaks = in_process.leaks + binary.leaks;
    let two_rungs = in_process.two_rungs + binary.two_rungs;
    println!(
        "TOTAL: {} kill points, {dups} duplicates, {leaks} leaks, {two_rungs} two-rung moments",
        in_process.kills + binary.kills
    );
    if in_process.bad + binary.bad > 0 || dups + leaks + two_rungs > 0 {
        std::process::exit(1);
    }
}

/// The in-process runs' configuration: `--vertex-faults`, `--backend` and `--capacity`.
fn config() -> CrashConfig {
    let vertex_faults = std::env::args().any(|a| a == "--vertex-faults");
    let maintenance = std::env::args().any(|a| a == "--maintenance");
    let multislice = std::env::args().any(|a| a == "--multislice");
    let backend = value_of("--backend").map(|b| match b.as_str() {
        "tpu-api" => Backend::TpuApi,
        "compute-engine" => Backend::ComputeEngine,
        other => panic!("--backend {other}: tpu-api or compute-engine"),
    });
    let plans = match value_of("--capacity").as_deref() {
        Some("plan") => Plans::Only,
        None | Some("any") => Plans::Drawn,
        Some(other) => panic!("--capacity {other}: plan or any"),
    };
    CrashConfig {
        vertex_faults,
        backend,
        plans,
        maintenance,
        multislice,
        ..CrashConfig::default()
    }
}

/// The argument after `flag`, if given.
fn value_of(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

/// Seeded in-process runs from `first_seed` until `points` kill points were exercised; prints
/// each failing seed, a summary and a line per backend.
async fn in_process_runs(points: u64, first_seed: u64, cfg: &CrashConfig) -> Totals {
    let vertex_faults = cfg.vertex_faults;
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let started = std::time::Instant::now();
    let mut t = Tally::default();
    let mut jobs_made = 0;
    let mut seed = first_seed;
    while t.kills < points {
        let r = crash::run(seed, cfg.clone()).await;
        tallies.entry(format!("{:?}", r.backend)).or_default().add(&r);
        t.add(&r);
        jobs_made += r.jobs_made;
        if !r.ok() {
            println!(
                "FAIL seed {seed} ({:?} {:?} {:?} {:?}):\n{}",
                r.flow, r.backend, r.capacity, r.training, r.violations
            );
        }
        seed += 1;
    }
    println!(
        "in-process{}{}: seeds {first_seed}..{seed} ({} runs), {} kill points, {} duplicates, {} leaks, {} two-rung moments, {} runs with broken promises, {jobs_made} Vertex jobs made, {:.0} s",
        if vertex_faults { " (vertex faults)" } else { "" },
        match (cfg.plans, cfg.maintenance, cfg.multislice) {
            (_, true, _) => " (maintenance)",
            (_, _, true) => " (multislice)",
            (Plans::Only, ..) => " (capacity plans only)",
            _ => "",
        },
        t.runs,
        t.kills,
        t.duplicates,
        t.leaks,
        t.two_rungs,
        t.bad,
        started.elapsed().as_secs_f64()
    );
    for (backend, b) in &tallies {
        println!("  {backend}: {}", b.line());
    }
    if cfg.maintenance {
        println!("  {}", t.maintenance.line());
    }
    if cfg.multislice {
        println!("  {}", t.multislice.line());
    }
    Totals {
        kills: t.kills,
        duplicates: t.duplicates,
        leaks: t.leaks,
        two_rungs: t.two_rungs,
        bad: t.bad,
    }
}

/// `binary_runs` runs against the real binary (seeds from 50000, default configuration without
/// planned slices: see [`Plans::Never`]), killed with SIGKILL; prints each failing seed and, if
/// there were any runs, a summary.
async fn binary_runs_of(binary_runs: u64) -> Totals {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut t = Totals::default();
    if binary_runs > 0 {
        println!(
            "binary runs: {} (the image's build: release, --no-default-features)",
            tpu_operator_reliability::process::operator_binary(OperatorBuild::Shipped).display()
        );
    }
    for i in 0..binary_runs {
        let seed = 50_000 + i;
        let mut world = crash::binary_world(dir.path(), OperatorBuild::Shipped).await;
        let cfg = CrashConfig {
            plans: Plans::Never,
            ..CrashConfig::default()
        };
        let r = crash::run_in(&mut world, seed, cfg).await;
        t.kills += u64::from(r.kills);
        t.duplicates += r.duplicates;
        t.leaks += r.leaks;
        t.two_rungs += r.two_rungs;
        if !r.ok() {
            t.bad += 1;
            println!("FAIL binary seed {seed} ({:?}):\n{}", r.capacity, r.violations);
        }
    }
    if binary_runs > 0 {
        println!(
            "binary (SIGKILL): seeds 50000..{} ({binary_runs} runs), {} kill points, {} runs with broken promises, {:.0} s",
            50_000 + binary_runs,
            t.kills,
            t.bad,
            started.elapsed().as_secs_f64()
        );
    }
    t
}
