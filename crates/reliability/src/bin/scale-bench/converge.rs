//! The phases up to convergence: create everything, the first change (nodes READY, batches
//! SUCCEEDED), and the pipelines finishing.

use std::time::{Duration, Instant};

use tpu_operator_reliability::fixtures::{self, Capacity, Training};

use super::{
    Bench, Created, Kind, WAVE_GAP, ZONES,
    measure::{cpu_split, lags},
    wait,
};

impl Bench {
    /// Creates every object, wave by wave, and waits until the cloud has all nodes and batches.
    pub(super) async fn create_all(&self) -> Created {
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
                let (nodes, batches) = self
                    .create_one(kind, i, &mut first_keys[w], &mut pipeline_keys)
                    .await;
                want_nodes += nodes;
                want_batches += batches;
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

    /// Creates object `i` of `kind`: the key its status shows the first change under goes to
    /// `wave_keys`, a pipeline's own key to `pipeline_keys`. Returns the nodes and batches it
    /// makes the cloud hold.
    async fn create_one(
        &self,
        kind: Kind,
        i: usize,
        wave_keys: &mut Vec<String>,
        pipeline_keys: &mut Vec<String>,
    ) -> (usize, usize) {
        let world = &self.world;
        match kind {
            Kind::Slice => {
                let name = format!("s-{i}");
                let capacity = if self.spot {
                    Capacity::SpotNode
                } else {
                    Capacity::OnDemandNode
                };
                let mut slice = fixtures::slice(&name, capacity);
                slice.spec.zone = ZONES[i % self.zones].into();
                world.create(&slice).await;
                wave_keys.push(format!("TpuSlice/{name}"));
                (1, 0)
            }
            Kind::Batch => {
                let name = format!("b-{i}");
                world.create(&fixtures::batch(&name)).await;
                wave_keys.push(format!("PreprocessBatch/{name}"));
                (0, 1)
            }
            Kind::Pipeline => {
                let name = format!("p-{i}");
                world.create(&fixtures::pipeline(&name, Training::Vertex)).await;
                pipeline_keys.push(format!("TrainingPipeline/{name}"));
                wave_keys.push(format!("PreprocessBatch/{name}-preprocess"));
                (0, 1)
            }
        }
    }

    /// Phase 1: nodes READY, batches SUCCEEDED. One jump (the burst), or the waves' deadlines
    /// passed one by one, `--spread` seconds apart in all.
    pub(super) async fn first_change(&self, first_keys: &[Vec<String>]) {
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
    pub(super) async fn pipelines_finish(&self, created: &Created) {
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
}
