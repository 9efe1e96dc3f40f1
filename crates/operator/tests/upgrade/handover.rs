//! One rolling update's hand-over from one release's binary to another's, and what the cloud saw
//! meanwhile.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use crate::cluster::{Cli, Operator, wait};
use crate::workload::NS;

/// How long a hand-over's calls are counted (from its first step), and a steady leader's.
pub const WINDOW: Duration = Duration::from_secs(30);

/// Cloud calls over a stretch of wall time.
pub struct Calls {
    pub seconds: f64,
    pub reads: u64,
    /// Creates, deletes, cancels and other changes to TPU, Dataproc, Vertex or Compute resources.
    pub mutations: BTreeMap<String, u64>,
}

impl Calls {
    /// The calls made over `window` from now.
    pub async fn over(gcp: &gcp_emulator::Emulator, window: Duration) -> Self {
        let (start, before) = (Instant::now(), gcp.call_counts());
        tokio::time::sleep(window).await;
        Self::since(gcp, start, &before)
    }

    pub fn since(gcp: &gcp_emulator::Emulator, start: Instant, before: &BTreeMap<String, u64>) -> Self {
        let mut calls = Self {
            seconds: start.elapsed().as_secs_f64(),
            reads: 0,
            mutations: BTreeMap::new(),
        };
        for (method, n) in gcp.call_counts() {
            let n = n - before.get(&method).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            if mutates(&method) {
                calls.mutations.insert(method, n);
            } else {
                calls.reads += n;
            }
        }
        calls
    }

    fn per_minute(&self) -> f64 {
        (self.reads + self.mutations.values().sum::<u64>()) as f64 * 60.0 / self.seconds
    }
}

impl fmt::Display for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} reads, mutations {:?} in {:.0} s ({:.0} calls/min)",
            self.reads,
            self.mutations,
            self.seconds,
            self.per_minute()
        )
    }
}

/// Whether `method` (`service.resource.verb`) changes a billable resource.
fn mutates(method: &str) -> bool {
    let billable = ["tpu.", "dataproc.", "vertex.", "compute."]
        .iter()
        .any(|s| method.starts_with(s));
    let verb = method.rsplit('.').next().unwrap_or_default();
    billable && !matches!(verb, "get" | "list" | "aggregatedList" | "wait")
}

/// A finished hand-over: the release now leading, how long no release led, the calls counted.
pub struct HandOver {
    pub operator: Operator,
    /// From the old leader's SIGTERM until the new one has held the Lease and looked at every
    /// object once: the most any run waited on the hand-over.
    pub gap: Duration,
    pub calls: Calls,
}

impl HandOver {
    /// `start_new` (the chart step and the new binary), the new binary ready beside the old,
    /// SIGTERM to the old one; the calls over the whole of it (at least [`WINDOW`]) must change
    /// nothing in the cloud.
    pub async fn run(
        cli: &Cli,
        gcp: &gcp_emulator::Emulator,
        old: &mut Operator,
        pod: &str,
        start_new: impl AsyncFnOnce() -> Operator,
    ) -> Self {
        let (start, before) = (Instant::now(), gcp.call_counts());
        let resources = gcp.billable_resources();
        let operator = start_new().await;
        operator.wait_ready().await;
        old.terminate().await;
        let stopped = Instant::now();
        wait(&format!("{pod} to lead"), async || {
            let holder = cli.kubectl(&[
                "get",
                "lease",
                "tpu-operator",
                "-n",
                "tpu-operator",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ]);
            (holder == pod).then_some(())
        })
        .await;
        let objects = cli.kubectl(&["get", &crate::workload::kinds(), "-n", NS, "-o", "name"]);
        let objects = objects.lines().count() as u64;
        wait(&format!("{pod} to look at all {objects} objects"), async || {
            (reconciles(&operator).await >= objects).then_some(())
        })
        .await;
        let gap = stopped.elapsed();
        if let Some(rest) = WINDOW.checked_sub(start.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        let calls = Calls::since(gcp, start, &before);
        println!("hand-over to {pod}: gap {gap:.1?}; {calls}");
        assert!(
            calls.mutations.is_empty(),
            "the hand-over to {pod} changed the cloud: {calls}"
        );
        assert_eq!(
            gcp.billable_resources(),
            resources,
            "cloud resources across the hand-over to {pod}"
        );
        Self { operator, gap, calls }
    }
}

/// The passes `operator` has run, every kind together.
async fn reconciles(operator: &Operator) -> u64 {
    let text = operator.metrics().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("tpu_operator_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Every cloud resource of the run was created once: as many creates as resources.
pub fn one_create_each(gcp: &gcp_emulator::Emulator) {
    let counts = gcp.call_counts();
    let creates = |method: &str| counts.get(method).copied().unwrap_or(0);
    // Slices: two nodes and one queued resource; batches: the standalone one and one per
    // pipeline; Vertex jobs: one per pipeline that trained.
    let expected = [
        ("tpu.nodes.create", 2),
        ("tpu.queuedResources.create", 1),
        ("dataproc.batches.create", 5),
        ("vertex.customJobs.create", 3),
    ];
    for (method, want) in expected {
        assert_eq!(creates(method), want, "{method}: one create per cloud resource");
    }
    println!("duplicates: 0 ({expected:?})");
}
