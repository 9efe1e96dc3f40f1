//! The last phase: delete everything and count the calls until nothing billable is left.

use std::time::{Duration, Instant};

use tpu_operator_api::{PreprocessBatch, TpuSlice, TrainingPipeline};
use tpu_operator_reliability::invariants;

use super::{Bench, measure::failures_by_category};

impl Bench {
    /// Deletes everything and counts the calls until the cloud holds nothing billable.
    pub(super) async fn delete_all(&self) {
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
