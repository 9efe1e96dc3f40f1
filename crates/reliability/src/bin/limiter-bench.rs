//! Create limiter benchmark: `--slices` TpuSlices created at once against Google's TPU create
//! quota (`--quota` a minute, gcp-emulator's rate quota with the real error shape), driven by
//! two real `tpu-operator run` replicas electing a leader, the operator told the same quota
//! (`--create-limit tpuCreate=Q`). The emulator's clock is the wall clock (the binary's
//! limiter counts in wall-clock time), so a run takes about `slices / (0.95 × quota)` minutes.
//!
//! Prints: quota refusals; creates per minute and the throughput against the quota; each
//! slice's wait from its creation to its node's create, its median, p99 and max against
//! ⌈slices / quota⌉ + 1 minutes; the creates each replica made (its own `gcp_calls` metric).
//!
//! cargo run --release -p tpu-operator-reliability --bin limiter-bench -- --slices 500 --quota 91
//! (`TPU_OPERATOR_BINARY=target/debug/tpu-operator` measures a debug build instead of the image's)

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use gcp_emulator::{QuotaGroup, RateQuota};
use kube::{Api, ResourceExt};
use tpu_operator_api::TpuSlice;
use tpu_operator_reliability::{
    World, arg,
    fixtures::{self, Capacity},
    process::{OperatorProcess, bench_binary},
};

/// `nodes.create` calls the replica made, by its own metrics.
async fn creates_by(replica: &OperatorProcess) -> f64 {
    let text = replica.scrape().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("gcp_calls_total{") && l.contains("method=\"nodes.create\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, n| sum + n)
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() * p).div_ceil(100).max(1) - 1]
}

#[tokio::main]
async fn main() {
    let slices = arg("--slices", 500) as usize;
    let quota: u64 = arg("--quota", 91);
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(1.0)
        .start()
        .await
        .expect("gcp-emulator");
    gcp.set_rate_quota(RateQuota {
        group: QuotaGroup::TpuCreate,
        per_minute: Some(quota),
    });
    let mut world = World::start_with(gcp).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = world.serve_kube(dir.path()).await;
    let bin = bench_binary();
    let limit = format!("tpuCreate={quota}");
    let extra = ["--create-limit", limit.as_str()];
    let url = world.gcp.url();
    let a = OperatorProcess::spawn_replica(&bin, &kubeconfig, &url, None, "replica-a", &extra);
    assert!(a.wait_ready(Duration::from_secs(60)).await, "replica-a ready");
    let b = OperatorProcess::spawn_replica(&bin, &kubeconfig, &url, None, "replica-b", &extra);
    assert!(b.wait_ready(Duration::from_secs(60)).await, "replica-b ready");
    let api: Api<TpuSlice> = Api::namespaced(world.client.clone(), "default");
    let started = Instant::now();
    for i in 0..slices {
        api.create(
            &Default::default(),
            &fixtures::slice(&format!("s-{i:04}"), Capacity::SpotNode),
        )
        .await
        .expect("create slice");
    }
    println!(
        "limiter-bench: {slices} slices created in {:.1} s, quota {quota}/min",
        started.elapsed().as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(60 * (slices as u64 / quota + 5));
    let creates = || {
        world
            .gcp
            .calls()
            .into_iter()
            .filter(|c| c.service == "tpu" && c.method == "nodes.create")
            .collect::<Vec<_>>()
    };
    while creates().iter().filter(|c| c.status == 200).count() < slices {
        assert!(Instant::now() < deadline, "not every slice was created");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    report(&world, &api, (&a, &b), slices, quota, creates()).await;
}

/// Prints what the run measured (see the module docs).
async fn report(
    world: &World,
    api: &Api<TpuSlice>,
    (a, b): (&OperatorProcess, &OperatorProcess),
    slices: usize,
    quota: u64,
    calls: Vec<gcp_emulator::CallRecord>,
) {
    let refused = calls.iter().filter(|c| c.status != 200).count();
    let waits = waits(api, &calls).await;
    let mut per_minute: BTreeMap<i64, usize> = BTreeMap::new();
    let first = calls.iter().map(|c| c.time).min().expect("a create");
    for c in calls.iter().filter(|c| c.status == 200) {
        *per_minute.entry((c.time - first).num_seconds() / 60).or_default() += 1;
    }
    let last = calls.iter().map(|c| c.time).max().expect("a create");
    let span = (last - first).num_milliseconds() as f64 / 60_000.0 + 1.0;
    let throughput = slices as f64 / span;
    let bound = (slices as f64 / quota as f64).ceil() + 1.0;
    let (by_a, by_b) = (creates_by(a).await, creates_by(b).await);
    println!(
        "quota refusals: {refused} (emulator: {})",
        world.gcp.rate_quota_refusals(QuotaGroup::TpuCreate)
    );
    println!(
        "creates per minute from the first: {:?}",
        per_minute.values().collect::<Vec<_>>()
    );
    println!(
        "throughput: {throughput:.1}/min over {span:.2} min (the last create's minute counted) = {:.3} × quota",
        throughput / quota as f64
    );
    println!(
        "wait (min): matched {} of {slices}, median {:.2}, p99 {:.2}, max {:.2}; bound ⌈{slices}/{quota}⌉ + 1 = {bound}",
        waits.len(),
        percentile(&waits, 50),
        percentile(&waits, 99),
        waits.last().copied().unwrap_or_default()
    );
    println!(
        "nodes.create by replica: replica-a {by_a}, replica-b {by_b} (one leads, the other must make none)"
    );
    println!("nodes in the cloud: {}", world.gcp.nodes().len());
}

/// Each slice's wait, in minutes, sorted: from its creation to its node's successful create.
async fn waits(api: &Api<TpuSlice>, calls: &[gcp_emulator::CallRecord]) -> Vec<f64> {
    // Each slice's wait: from its creation (the API server's, second precision) to its create.
    let created: BTreeMap<String, DateTime<Utc>> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|s| {
            (
                s.name_any(),
                s.creation_timestamp().map(|t| t.0).unwrap_or_default(),
            )
        })
        .map(|(name, t)| {
            (
                name,
                DateTime::from_timestamp(t.as_second(), 0).unwrap_or_default(),
            )
        })
        .collect();
    let mut waits: Vec<f64> = calls
        .iter()
        .filter(|c| c.status == 200)
        .filter_map(|c| {
            let id = c.query.split('&').find_map(|kv| kv.strip_prefix("nodeId="))?;
            let name = created.keys().find(|n| id.contains(n.as_str()))?;
            Some((c.time - created[name]).num_milliseconds() as f64 / 60_000.0)
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    waits
}
