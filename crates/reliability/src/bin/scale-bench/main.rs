//! Scale benchmark: the real `tpu-operator run` process (default poll intervals: 2 s active,
//! 5 min stable, 30 s capacity; concurrency 16) against kube-emulator (socket) and gcp-emulator
//! (manual clock), both in this process, with N objects: 50% TpuSlices (spot nodes), 30%
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
//! cargo run -p tpu-operator-reliability --bin scale-bench -- --n 100 [--idle 60] [--waves 100 --spread 50] [--preempt 100]

mod preemption;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use tpu_operator_api::{
    PreprocessBatch, TpuSlice, TrainingPipeline, preprocess_batch::PreprocessBatchPhase,
    tpu_slice::TpuSlicePhase, training_pipeline::TrainingPipelinePhase,
};
use tpu_operator_reliability::{
    World, arg,
    fixtures::{self, Capacity, Training},
    invariants,
    process::metric_sum,
    world::NAMESPACE,
};

#[derive(Clone, Copy)]
enum Kind {
    Slice,
    Batch,
    Pipeline,
}

/// Emulated time between the submissions of two waves (`--waves`).
const WAVE_GAP: Duration = Duration::from_secs(1);

/// First instant each object was seen done ("Ready"/"Succeeded"), by "kind/name".
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

fn watch<K>(client: kube::Client, seen: Seen, kind: &'static str, done: fn(&K) -> bool)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let api: Api<K> = Api::namespaced(client, NAMESPACE);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(o) = ev
                && done(&o)
            {
                seen.lock()
                    .unwrap()
                    .entry(format!("{kind}/{}", o.name_any()))
                    .or_insert_with(Instant::now);
            }
        }
    });
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Lags of each group's objects from the group's instant (when their cloud resources changed).
fn lags<'a>(
    seen: &Seen,
    groups: impl IntoIterator<Item = (&'a [String], Instant)>,
) -> (usize, f64, f64, f64) {
    let g = seen.lock().unwrap();
    let mut v: Vec<f64> = groups
        .into_iter()
        .flat_map(|(keys, t0)| {
            keys.iter()
                .filter_map(|k| g.get(k))
                .map(move |t| t.saturating_duration_since(t0).as_secs_f64())
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

/// CPU seconds so far of the operator process and of this one.
fn cpu_split(world: &World) -> (f64, f64) {
    let operator = world.process().and_then(|p| p.cpu_seconds());
    let bench = tpu_operator_reliability::process::cpu_seconds_of("self");
    (operator.unwrap_or(f64::NAN), bench.unwrap_or(f64::NAN))
}

/// `tpu_operator_reconcile_failures_total` summed over kinds, by `category` (a stale status
/// write's 409 shows as `KubeConflict`).
fn failures_by_category(metrics: &str) -> std::collections::BTreeMap<String, f64> {
    let mut by = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("tpu_operator_reconcile_failures_total{") else {
            continue;
        };
        let category = rest
            .split("category=\"")
            .nth(1)
            .and_then(|c| c.split('"').next())
            .unwrap_or("?");
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *by.entry(category.to_owned()).or_default() += value;
    }
    by
}

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
    let dir = tempfile::tempdir().unwrap();
    let mut bench = Bench::start(dir.path(), n, waves, spread, limit).await;
    let created = bench.create_all().await;
    bench.first_change(&created.first_keys).await;
    bench.pipelines_finish(&created).await;
    bench.idle(idle).await;
    bench.memory().await;
    let preempt = (arg("--preempt", 100) as usize).min(bench.slices);
    preemption::measure(&bench.world, preempt, limit).await;
    bench.delete_all().await;
    bench.world.kill_operator().await;
}

impl Bench {
    async fn start(dir: &std::path::Path, n: usize, waves: usize, spread: u64, limit: Duration) -> Self {
        let (slices, batches) = (n / 2, n * 3 / 10);
        let pipelines = n - slices - batches;
        let mut world = World::start_process(dir, &[]).await;
        world.start_operator().await;
        // The empty process's anonymous memory (watches open, nothing listed): what convergence
        // adds above it, divided by N, is the memory per object, comparable across N and machines.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let empty_anon = world.process().and_then(|p| p.rss_split_kib().0).unwrap_or(0);
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "N = {n}: {slices} TpuSlices, {batches} PreprocessBatches, {pipelines} TrainingPipelines; loadavg at start: {}",
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

    /// Creates every object, wave by wave, and waits until the cloud has all nodes and batches.
    async fn create_all(&self) -> Created {
        let (world, waves, limit, n) = (&self.world, self.waves, self.limit, self.n);
        let (slices, batches, pipelines) = (self.slices, self.batches, self.pipelines);
        let order = self.order();
        let started = Instant::now();
        let mut pipeline_keys = Vec::new();
        // Keys of the objects whose status shows the first change (node READY, batch SUCCEEDED),
        // per wave.
        let mut first_keys: Vec<Vec<String>> = vec![Vec::new(); waves];
        let gcp = &world.gcp;
        let (mut want_nodes, mut want_batches) = (0, 0);
        let mut submitted = true;
        for (w, chunk) in order.chunks(n.div_ceil(waves)).enumerate() {
            for &(kind, i) in chunk {
                match kind {
                    Kind::Slice => {
                        let name = format!("s-{i}");
                        world.create(&fixtures::slice(&name, Capacity::SpotNode)).await;
                        first_keys[w].push(format!("TpuSlice/{name}"));
                        want_nodes += 1;
                    }
                    Kind::Batch => {
                        let name = format!("b-{i}");
                        world.create(&fixtures::batch(&name)).await;
                        first_keys[w].push(format!("PreprocessBatch/{name}"));
                        want_batches += 1;
                    }
                    Kind::Pipeline => {
                        let name = format!("p-{i}");
                        world.create(&fixtures::pipeline(&name, Training::Vertex)).await;
                        pipeline_keys.push(format!("TrainingPipeline/{name}"));
                        first_keys[w].push(format!("PreprocessBatch/{name}-preprocess"));
                        want_batches += 1;
                    }
                }
            }
            if waves > 1 {
                // Each wave's cloud resources are submitted one emulated second after the previous
                // wave's, so they change state one second apart.
                submitted &= wait(limit, || {
                    let c = gcp.resource_counts();
                    c.nodes >= want_nodes && c.batches >= want_batches
                })
                .await;
                world.advance(WAVE_GAP);
            }
        }
        let created = started.elapsed();
        submitted &= wait(limit, || {
            let c = gcp.resource_counts();
            c.nodes >= slices && c.batches >= batches + pipelines
        })
        .await;
        let t_submitted = started.elapsed();
        println!(
            "objects created in {:.1} s{}; all {} nodes and {} batches submitted at {:.1} s{}",
            created.as_secs_f64(),
            if waves > 1 {
                format!(" in {waves} waves, each submitted before the next")
            } else {
                String::new()
            },
            slices,
            batches + pipelines,
            t_submitted.as_secs_f64(),
            if submitted { "" } else { " (TIMED OUT)" }
        );

        Created {
            started,
            first_keys,
            pipeline_keys,
        }
    }

    /// Phase 1: nodes READY, batches SUCCEEDED. One jump (the burst), or the waves' deadlines
    /// passed one by one, `--spread` seconds apart in all.
    async fn first_change(&self, first_keys: &[Vec<String>]) {
        let (world, waves, spread, limit, seen) =
            (&self.world, self.waves, self.spread, self.limit, &self.seen);
        let cpu_before = cpu_split(world);
        let t0 = Instant::now();
        let mut wave_at = Vec::with_capacity(waves);
        if waves == 1 {
            world.advance(Duration::from_secs(240));
            wave_at.push(t0);
        } else {
            // Every transition of the fixtures takes 3 min of emulated time (TPU create; Dataproc
            // pending + run), so wave w changes at 3 min + w seconds after the first submission.
            let step = Duration::from_secs_f64(spread as f64 / waves as f64);
            let mut cloud = WAVE_GAP * waves as u32;
            for w in 0..waves {
                let target = Duration::from_secs(180) + WAVE_GAP * w as u32 + Duration::from_millis(500);
                world.advance(target - cloud);
                cloud = target;
                wave_at.push(Instant::now());
                if w + 1 < waves {
                    tokio::time::sleep(step).await;
                }
            }
        }
        let all_first: Vec<String> = first_keys.iter().flatten().cloned().collect();
        let ok = wait(limit, || {
            let g = seen.lock().unwrap();
            all_first.iter().all(|k| g.contains_key(k))
        })
        .await;
        let burst = t0.elapsed();
        let cpu_after = cpu_split(world);
        let (cnt, p50, p99, max) = lags(
            seen,
            first_keys.iter().map(Vec::as_slice).zip(wave_at.iter().copied()),
        );
        println!(
            "status lag, node READY / batch SUCCEEDED ({}; {cnt} of {} objects{}): p50 {p50:.2} s, p99 {p99:.2} s, max {max:.2} s",
            if waves == 1 {
                "all at one instant".to_string()
            } else {
                format!(
                    "{waves} waves over {spread} s: {:.0} changes/s",
                    all_first.len() as f64 / spread as f64
                )
            },
            all_first.len(),
            if ok { "" } else { ", TIMED OUT" }
        );
        // Where the burst's CPU went: the operator, and this process (both emulators and the
        // bench's own watches); the machine has 2 cores.
        println!(
            "CPU during phase 1 ({:.1} s wall, {:.1} CPU-s available on 2 cores): operator {:.1} s, emulators + bench {:.1} s",
            burst.as_secs_f64(),
            burst.as_secs_f64() * 2.0,
            cpu_after.0 - cpu_before.0,
            cpu_after.1 - cpu_before.1
        );
    }

    /// Phase 2: the pipelines create their Vertex jobs; then a jump finishes them. Prints the
    /// time and the GCP calls to converge.
    async fn pipelines_finish(&self, created: &Created) {
        let (world, limit, seen, n) = (&self.world, self.limit, &self.seen, self.n);
        let (slices, batches, pipelines) = (self.slices, self.batches, self.pipelines);
        let (gcp, started, pipeline_keys) = (&world.gcp, created.started, &created.pipeline_keys);
        let jobs_ok = wait(limit, || gcp.resource_counts().custom_jobs >= pipelines).await;
        let t1 = Instant::now();
        world.advance(Duration::from_secs(420));
        let ok2 = wait(limit, || {
            let g = seen.lock().unwrap();
            pipeline_keys.iter().all(|k| g.contains_key(k))
        })
        .await;
        let (cnt2, p50b, p99b, maxb) = lags(seen, [(pipeline_keys.as_slice(), t1)]);
        let converged = started.elapsed();
        println!(
            "status lag after jump 2 (Vertex job SUCCEEDED → pipeline Succeeded; {cnt2} of {}{}{}): p50 {p50b:.2} s, p99 {p99b:.2} s, max {maxb:.2} s",
            pipeline_keys.len(),
            if jobs_ok { "" } else { ", jobs TIMED OUT" },
            if ok2 { "" } else { ", TIMED OUT" }
        );
        println!(
            "time to converge (first create → last object done): {:.1} s",
            converged.as_secs_f64()
        );
        let counts_converge = world.gcp.call_counts();
        let calls_converge: u64 = counts_converge.values().sum();
        // Minimum to converge: slice = create + 1 read (READY); batch = create + 1 read (SUCCEEDED)
        // + 1 output check; pipeline = its batch (3) + job create + 1 read (SUCCEEDED) + 1 model check.
        let min_converge = (slices * 2 + batches * 3 + pipelines * 6) as u64;
        println!(
            "GCP calls to converge: {calls_converge} ({:.2} per object; minimum {min_converge}, ratio {:.2}): {counts_converge:?}",
            calls_converge as f64 / n as f64,
            calls_converge as f64 / min_converge as f64
        );
    }

    /// Calls made while nothing changes.
    async fn idle(&self, idle: u64) {
        let (world, n) = (&self.world, self.n);
        world.gcp.clear_calls();
        tokio::time::sleep(Duration::from_secs(idle)).await;
        let idle_counts = world.gcp.call_counts();
        let writes: u64 = idle_counts
            .iter()
            .filter(|(k, _)| {
                k.ends_with(".create")
                    || k.ends_with(".delete")
                    || k.ends_with(".patch")
                    || k.ends_with(".cancel")
            })
            .map(|(_, v)| v)
            .sum();
        let reads: u64 = idle_counts.values().sum::<u64>() - writes;
        println!(
            "idle {idle} s: {reads} reads, {writes} writes → {:.1} reads per object per hour: {idle_counts:?}",
            reads as f64 / n as f64 * 3600.0 / idle as f64
        );
    }

    /// The operator's memory and CPU at convergence, and the memory per object.
    async fn memory(&self) {
        let (world, n, empty_anon) = (&self.world, self.n, self.empty_anon);
        let proc = world.process().expect("operator process");
        let metrics = proc.scrape().await.unwrap_or_default();
        let reconciles = metric_sum(&metrics, "tpu_operator_reconciles_total");
        let rss_peak = proc.peak_rss_kib().unwrap_or(0);
        let rss_now = proc.rss_kib().unwrap_or(0);
        let (anon, file) = proc.rss_split_kib();
        let cpu = proc.cpu_seconds().unwrap_or(f64::NAN);
        println!(
            "operator: peak RSS {:.1} MiB (now {:.1} MiB: {:.1} MiB anonymous, {:.1} MiB file-backed), CPU {cpu:.1} s, reconciles {reconciles:.0} ({:.1} per object)",
            rss_peak as f64 / 1024.0,
            rss_now as f64 / 1024.0,
            anon.unwrap_or(0) as f64 / 1024.0,
            file.unwrap_or(0) as f64 / 1024.0,
            reconciles / n as f64
        );
        println!(
            "reconcile failures by category: {:?}",
            failures_by_category(&metrics)
        );
        if let Some(anon) = anon {
            println!(
                "memory per object: {:.2} KiB (anonymous RSS at convergence {:.1} MiB minus the empty process's {:.1} MiB, over N)",
                anon.saturating_sub(empty_anon) as f64 / n as f64,
                anon as f64 / 1024.0,
                empty_anon as f64 / 1024.0
            );
        }
    }

    /// Deletes everything and counts the calls until the cloud holds nothing billable.
    async fn delete_all(&self) {
        let (world, limit) = (&self.world, self.limit);
        let (slices, batches, pipelines) = (self.slices, self.batches, self.pipelines);
        world.gcp.clear_calls();
        let t_del = Instant::now();
        for i in 0..pipelines {
            world.delete::<TrainingPipeline>(&format!("p-{i}")).await;
        }
        for i in 0..slices {
            world.delete::<TpuSlice>(&format!("s-{i}")).await;
        }
        for i in 0..batches {
            world.delete::<PreprocessBatch>(&format!("b-{i}")).await;
        }
        let deadline = Instant::now() + limit;
        let mut gone = false;
        while Instant::now() < deadline {
            world.advance(Duration::from_secs(30));
            let snap = world.snapshot().await;
            if snap.is_empty() && invariants::billable(&world.gcp) == 0 {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let del_counts = world.gcp.call_counts();
        let del_calls: u64 = del_counts.values().sum();
        // Minimum to delete: slice = delete + 1 read (gone); batch = delete; pipeline = its batch's
        // delete + the job's delete.
        let min_delete = (slices * 2 + batches + pipelines * 2) as u64;
        println!(
            "delete: all gone in {:.1} s{}; GCP calls {del_calls} (minimum {min_delete}, ratio {:.2}); leftovers: {}: {del_counts:?}",
            t_del.elapsed().as_secs_f64(),
            if gone { "" } else { " (TIMED OUT)" },
            del_calls as f64 / min_delete as f64,
            invariants::leftovers(&world.gcp).0.len()
        );
        let proc = world.process().expect("operator process");
        // Cumulative: what the deletion added is the difference from the figure at convergence.
        let metrics = proc.scrape().await.unwrap_or_default();
        println!(
            "reconcile failures by category, convergence and deletion: {:?}",
            failures_by_category(&metrics)
        );
        println!(
            "operator at the end: peak RSS {:.1} MiB, CPU {:.1} s; loadavg {}",
            proc.peak_rss_kib().unwrap_or(0) as f64 / 1024.0,
            proc.cpu_seconds().unwrap_or(f64::NAN),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
    }
}
