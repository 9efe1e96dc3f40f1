//! The converged operator at rest: the GCP calls it makes while nothing changes, and its
//! memory and CPU.

use std::time::Duration;

use tpu_operator_reliability::process::metric_sum;

use super::{Bench, measure::failures_by_category};

impl Bench {
    /// Calls made while nothing changes.
    pub(super) async fn idle(&self, idle: u64) {
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
    pub(super) async fn memory(&self) {
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
}
