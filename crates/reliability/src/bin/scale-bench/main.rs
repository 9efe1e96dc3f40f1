//! Scale benchmark: the real `tpu-operator run` process (default poll intervals: 2 s active,
//! 5 min stable, 30 s capacity; concurrency 16) against kube-emulator (socket) and gcp-emulator
//! (manual clock), both in this process, with N objects: 50% TpuSlices (Spot nodes), 30%
//! PreprocessBatches, 20% TrainingPipelines (preprocess batch + Vertex job).
//!
//! Phases: create everything (clock frozen) until every cloud resource is submitted; jump the
//! cloud clock 4 min (nodes READY, batches SUCCEEDED) and measure, per object, the time from the
//! jump to its status showing it (status lag, seen through watches); wait for the pipelines'
//! Vertex jobs, jump 7 min, measure again; idle for `--idle` seconds counting GCP reads; delete
//! everything and measure until it is gone and nothing is left in the cloud.
//!
//! The single jump makes all N objects change at one instant: the worst case. With `--waves W`
//! the objects are created in W waves, each submitted one emulated second after the previous
//! one, and the first phase passes the waves' deadlines one by one over `--spread` seconds of
//! real time: N / spread changes per second, each object's lag measured from its own wave's
//! change, as when thousands of TPU nodes and batches finish over a minute.
//!
//! With `--preempt K` (default 100, at most the slices), K READY Spot slices are then preempted in
//! the cloud and the time until each status shows it is measured (`preemption.rs`).
//!
//! With `--maintenance K` (default 0, at most the slices), K READY slices' nodes then get a
//! maintenance notice in the cloud (their `upcomingMaintenance`, a window a day out) and the time
//! until each status shows it Pending is measured, with the zone listings and reads by name made
//! meanwhile (`maintenance.rs`). `--zones Z` (default 1) spreads the slices round Z zones.
//!
//! With `--spot 0` the slices are on-demand nodes instead of Spot ones: a READY on-demand slice
//! is not kept under its zone's node listing, so the run leaves out that listing's work (on both
//! sides of the socket), and nothing can be preempted (`--preempt` is then 0).
//!
//! cargo run -p tpu-operator-reliability --bin scale-bench -- --n 100 [--idle 60] [--waves 100 --spread 50] [--preempt 100] [--maintenance 100 --zones 4] [--spot 0]

mod at_rest;
mod converge;
mod delete;
mod maintenance;
mod measure;
mod preemption;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tpu_operator_api::{
    PreprocessBatch, TpuSlice, TrainingPipeline, preprocess_batch::PreprocessBatchPhase,
    tpu_slice::TpuSlicePhase, training_pipeline::TrainingPipelinePhase,
};
use tpu_operator_reliability::{World, arg, fixtures, process::OperatorBuild};

use measure::{Seen, watch};

#[derive(Clone, Copy)]
enum Kind {
    Slice,
    Batch,
    Pipeline,
}

/// The zones `--zones` spreads the slices over, in order (the first is the fixtures' own).
const ZONES: [&str; 4] = [fixtures::ZONE, "us-central1-a", "us-east1-d", "europe-west4-a"];

/// Emulated time between the submissions of two waves (`--waves`).
const WAVE_GAP: Duration = Duration::from_secs(1);

async fn wait(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// One run: the operator process, the emulators, the bench's watches, and the mix of objects.
struct Bench {
    world: World,
    seen: Seen,
    n: usize,
    slices: usize,
    batches: usize,
    pipelines: usize,
    /// Slices are Spot nodes (`--spot 1`, the default) or on-demand ones (`--spot 0`).
    spot: bool,
    /// How many zones the slices go round (`--zones`).
    zones: usize,
    waves: usize,
    spread: u64,
    limit: Duration,
    /// The empty process's anonymous memory in KiB (watches open, nothing listed).
    empty_anon: u64,
}

/// What creation left for the timed phases.
struct Created {
    started: Instant,
    /// Keys of the objects whose status shows the first change (node READY, batch SUCCEEDED),
    /// per wave.
    first_keys: Vec<Vec<String>>,
    pipeline_keys: Vec<String>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = arg("--n", 100) as usize;
    let idle = arg("--idle", 60);
    let waves = arg("--waves", 1).max(1) as usize;
    let spread = arg("--spread", 50);
    assert!(
        waves < 180,
        "--waves must stay under 180: every wave must be submitted before the first one changes"
    );
    let limit = Duration::from_secs(arg("--limit", 1800));
    let spot = arg("--spot", 1) != 0;
    let dir = tempfile::tempdir().unwrap();
    let mut bench = Bench::start(dir.path(), n, waves, spread, limit, spot).await;
    bench.zones = (arg("--zones", 1) as usize).clamp(1, ZONES.len());
    let created = bench.create_all().await;
    bench.first_change(&created.first_keys).await;
    bench.pipelines_finish(&created).await;
    bench.idle(idle).await;
    bench.memory().await;
    let announce = (arg("--maintenance", 0) as usize).min(bench.slices);
    maintenance::measure(&bench.world, bench.slices, announce, limit).await;
    let spot_slices = if bench.spot { bench.slices } else { 0 };
    let preempt = (arg("--preempt", 100) as usize).min(spot_slices);
    preemption::measure(&bench.world, preempt, limit).await;
    bench.delete_all().await;
    bench.world.kill_operator().await;
}

/// Which binary the figures are of (its `tpu_operator_build_info`): the image's build unless
/// `TPU_OPERATOR_RELIABILITY_NO_BUILD` left another in place.
async fn print_build(world: &World) {
    let Some(process) = world.process() else { return };
    let build = process
        .build_info()
        .await
        .unwrap_or_else(|| "unknown (no build info on /metrics)".into());
    let shipped = build.contains("profile=release") && build.contains("features= ");
    println!(
        "operator: {build}{}",
        if shipped {
            " (the image's build)"
        } else {
            " (NOT the image's build)"
        }
    );
}

impl Bench {
    async fn start(
        dir: &std::path::Path,
        n: usize,
        waves: usize,
        spread: u64,
        limit: Duration,
        spot: bool,
    ) -> Self {
        let (slices, batches) = (n / 2, n * 3 / 10);
        let pipelines = n - slices - batches;
        // Creates unpaced: the bench submits everything with the clock frozen and measures what
        // each object costs, which the create limiter does not change (a waiting object makes
        // no call); limiter-bench measures the pacing.
        let unpaced = [
            "--create-limit",
            "tpuCreate=0,computeMutate=0,dataprocBatchCreate=0,vertexJobCreate=0",
        ];
        let mut world = World::start_process(dir, OperatorBuild::Shipped, &unpaced).await;
        world.start_operator().await;
        // The empty process's anonymous memory (watches open, nothing listed): what convergence
        // adds above it, divided by N, is the memory per object, comparable across N and machines.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let empty_anon = world.process().and_then(|p| p.rss_split_kib().0).unwrap_or(0);
        print_build(&world).await;
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "N = {n}: {slices} TpuSlices ({} nodes), {batches} PreprocessBatches, {pipelines} TrainingPipelines; loadavg at start: {}",
            if spot { "Spot" } else { "on-demand" },
            load.trim()
        );
        let seen: Seen = Arc::default();
        watch::<TpuSlice>(world.client.clone(), seen.clone(), "TpuSlice", |o| {
            o.status.as_ref().is_some_and(|s| s.phase == TpuSlicePhase::Ready)
        });
        watch::<PreprocessBatch>(world.client.clone(), seen.clone(), "PreprocessBatch", |o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.phase == PreprocessBatchPhase::Succeeded)
        });
        watch::<TrainingPipeline>(world.client.clone(), seen.clone(), "TrainingPipeline", |o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.phase == TrainingPipelinePhase::Succeeded)
        });

        Self {
            world,
            seen,
            n,
            slices,
            batches,
            pipelines,
            spot,
            zones: 1,
            waves,
            spread,
            limit,
            empty_anon,
        }
    }

    /// The objects in creation order, kinds interleaved so that every wave holds the same mix.
    fn order(&self) -> Vec<(Kind, usize)> {
        let (n, slices, batches, pipelines) = (self.n, self.slices, self.batches, self.pipelines);
        let mut order: Vec<(Kind, usize)> = Vec::with_capacity(n);
        let (mut next_slice, mut next_batch, mut next_pipeline) = (0, 0, 0);
        for i in 0..n {
            // Per 10 objects: 5 slices, 3 batches, 2 pipelines, spread evenly.
            let kind = match i % 10 {
                0 | 2 | 4 | 6 | 8 if next_slice < slices => Kind::Slice,
                1 | 5 | 9 if next_batch < batches => Kind::Batch,
                _ if next_pipeline < pipelines => Kind::Pipeline,
                _ if next_slice < slices => Kind::Slice,
                _ => Kind::Batch,
            };
            let idx = match kind {
                Kind::Slice => &mut next_slice,
                Kind::Batch => &mut next_batch,
                Kind::Pipeline => &mut next_pipeline,
            };
            order.push((kind, *idx));
            *idx += 1;
        }

        order
    }
}
