//! Cross-tenant denial of service (issue 32): how long `team-b`'s TpuSlice takes to be Ready
//! alone, and beside `--flood` slices in `team-a` that its TpuPolicy (`maxChips: 8`, already used
//! by one running slice) refuses. The real `tpu-operator run` process with its default poll
//! intervals and concurrency, watching every namespace, against kube-emulator (socket) and
//! gcp-emulator (manual clock, advanced 20 s every 10 ms of real time while waiting).
//!
//! Prints, for `--rounds` slices created one after another in team-b: the time from the create to
//! Ready (seen by polling every 10 ms), alone and then with the flood refused, their medians and
//! ratio; the team-a TpuSlice listings, cloud calls and refusals counted while the flood stands.
//!
//! With `--big N`, team-a's flood is instead N suspended slices (they bill nothing) each as large as
//! the CRDs admit (512 KiB of node metadata, a workload of 64 arguments, 64 command words and 64
//! environment values of 4 KiB, all incompressible: 1.3 MiB of JSON), and the operator is
//! restarted once they stand, so that its initial list reads them all; the operator's peak RSS is
//! what to compare with the chart's memory limit.
//!
//! cargo run --release -p tpu-operator-reliability --bin tenant-flood-bench -- --flood 1000 --rounds 5
//! cargo run --release -p tpu-operator-reliability --bin tenant-flood-bench -- --big 224 --rounds 3

use std::time::{Duration, Instant};

use kube::Api;
use serde_json::json;
use tpu_operator_api::{TpuSlice, tpu_policy::TpuPolicy, tpu_slice::TpuSlicePhase};
use tpu_operator_reliability::{
    World, arg,
    process::{OperatorProcess, bench_binary},
};

const TEAM_A: &str = "team-a";
const TEAM_B: &str = "team-b";

fn slice(name: &str) -> TpuSlice {
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                 "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}},
    }))
    .expect("slice")
}

fn phase(s: &TpuSlice) -> Option<TpuSlicePhase> {
    s.status.as_ref().map(|st| st.phase)
}

fn refused(s: &TpuSlice) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True" && c.reason == "PolicyDenied")
    })
}

/// Creates `name` in `api` and waits, advancing the cloud clock, until `done`; the real time taken.
async fn create_and_wait(
    world: &World,
    api: &Api<TpuSlice>,
    name: &str,
    done: fn(&TpuSlice) -> bool,
) -> Duration {
    let started = Instant::now();
    api.create(&Default::default(), &slice(name))
        .await
        .expect("create");
    wait(world, api, name, done).await;
    started.elapsed()
}

async fn wait(world: &World, api: &Api<TpuSlice>, name: &str, done: fn(&TpuSlice) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if api.get_opt(name).await.expect("get").is_some_and(|s| done(&s)) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never got there");
        world.advance(Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn rounds(world: &World, label: &str, n: u64) -> Vec<Duration> {
    let api = Api::<TpuSlice>::namespaced(world.client.clone(), TEAM_B);
    let mut took = Vec::new();
    for i in 0..n {
        let name = format!("{label}-{i}");
        let t = create_and_wait(world, &api, &name, |s| phase(s) == Some(TpuSlicePhase::Ready)).await;
        println!("  team-b {name}: Ready in {:.3} s", t.as_secs_f64());
        took.push(t);
        api.delete(&name, &Default::default()).await.expect("delete");
    }
    took
}

#[tokio::main]
async fn main() {
    let flood = arg("--flood", 1000);
    let big = arg("--big", 0);
    let n = arg("--rounds", 5).max(1);
    let dir = tempfile::tempdir().unwrap();
    let mut world = World::start_for_process().await;
    let mut op = start(&mut world, dir.path()).await;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let flood = if big > 0 { 0 } else { flood };
    println!(
        "flood = {flood}, big = {big}, rounds = {n}; loadavg at start: {}",
        load.trim()
    );

    let alone = rounds(&world, "alone", n).await;
    if big > 0 {
        op = big_team_a(&mut world, dir.path(), op, big).await;
    } else {
        flood_team_a(&world, flood).await;
    }
    let calls_before = world.gcp_calls();
    let beside = rounds(&world, "beside", n).await;
    let (a, b) = (median(alone), median(beside));
    println!(
        "team-b time to Ready, median of {n}: alone {:.3} s, beside {flood} refused in team-a {:.3} s: {:.2}x",
        a.as_secs_f64(),
        b.as_secs_f64(),
        b.as_secs_f64() / a.as_secs_f64()
    );
    println!(
        "cloud calls during the rounds beside the flood: {}; TPU nodes created in all: {}",
        world.gcp_calls() - calls_before,
        world.gcp.call_count("tpu", "nodes.create")
    );
    if let Some(metrics) = op.scrape().await {
        let reconciles =
            tpu_operator_reliability::process::metric_sum(&metrics, "tpu_operator_reconciles_total");
        println!("operator reconciles in all: {reconciles}");
    }
    println!(
        "operator: peak RSS {} KiB, CPU {:.1} s",
        op.peak_rss_kib().unwrap_or(0),
        op.cpu_seconds().unwrap_or(0.0)
    );
    if big > 0 {
        // What the restarted operator keeps with every object listed, cached and passed once:
        // an upper bound of the per-object cost (the allocator may keep memory freed after the
        // passes' peak).
        let anon = op.rss_split_kib().0.unwrap_or(0) as f64 / 1024.0;
        println!("operator now, beside the {big} slices: {anon:.1} MiB anonymous memory");
    }
}

/// The two teams' namespaces, team-a's TpuPolicy, and the operator process serving the kube
/// emulator (its kubeconfig in `dir`), ready.
async fn start(world: &mut World, dir: &std::path::Path) -> OperatorProcess {
    let kubeconfig = world.serve_kube(dir).await;
    for ns in [TEAM_A, TEAM_B] {
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::all(world.client.clone())
            .create(&Default::default(), &ns)
            .await
            .expect("namespace");
    }
    let policy: TpuPolicy = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuPolicy",
        "metadata": {"name": "team-a"},
        "spec": {"namespaces": [TEAM_A], "maxChips": 8},
    }))
    .unwrap();
    Api::<TpuPolicy>::all(world.client.clone())
        .create(&Default::default(), &policy)
        .await
        .expect("policy");
    let op = OperatorProcess::spawn_in(&bench_binary(), &kubeconfig, &world.gcp.url(), None, &[]);
    assert!(
        op.wait_ready(Duration::from_secs(60)).await,
        "operator never ready"
    );
    op
}

/// `n` suspended slices in team-a, each as large as the CRDs admit; then a new operator process, so
/// that they are read by its initial list, as after an OOM kill. Returns once the last one shows
/// Suspended.
async fn big_team_a(
    world: &mut World,
    dir: &std::path::Path,
    op: OperatorProcess,
    n: u64,
) -> OperatorProcess {
    let team_a = Api::<TpuSlice>::namespaced(world.client.clone(), TEAM_A);
    println!(
        "  the first operator before them: {:.1} MiB anonymous memory (heap and stacks)",
        op.rss_split_kib().0.unwrap_or(0) as f64 / 1024.0
    );
    let started = Instant::now();
    let mut bytes = 0;
    for i in 0..n {
        let s = largest_slice(&format!("big-{i}"), i);
        bytes = serde_json::to_vec(&s).unwrap().len();
        team_a.create(&Default::default(), &s).await.expect("create big");
    }
    println!(
        "  team-a: {n} suspended slices of {:.2} MiB of JSON each created in {:.1} s",
        bytes as f64 / (1024.0 * 1024.0),
        started.elapsed().as_secs_f64()
    );
    wait(world, &team_a, &format!("big-{}", n - 1), suspended).await;
    println!(
        "  the first operator (team-b's rounds alone, then the {n} slices one after another): peak RSS {:.1} MiB",
        op.peak_rss_kib().unwrap_or(0) as f64 / 1024.0
    );
    drop(op);
    let kubeconfig = dir.join("kubeconfig");
    let op = OperatorProcess::spawn_in(&bench_binary(), &kubeconfig, &world.gcp.url(), None, &[]);
    assert!(
        op.wait_ready(Duration::from_secs(120)).await,
        "operator never ready again"
    );
    let restarted = Instant::now();
    wait(world, &team_a, "big-0", suspended).await;
    println!(
        "  operator restarted beside them: ready, and their status read, in {:.1} s; peak RSS so far {:.1} MiB",
        restarted.elapsed().as_secs_f64(),
        op.peak_rss_kib().unwrap_or(0) as f64 / 1024.0
    );
    op
}

fn suspended(s: &TpuSlice) -> bool {
    phase(s) == Some(TpuSlicePhase::Suspended)
}

/// A suspended slice as large as the CRDs admit, of letters that do not compress (a different
/// sequence for each slice).
fn largest_slice(name: &str, seed: u64) -> TpuSlice {
    let mut rng = tpu_operator_reliability::rng(seed);
    let mut noise = |n: usize| -> String {
        use rand::Rng;
        (0..n)
            .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
            .collect()
    };
    const K: usize = 1024;
    let args: Vec<String> = (0..64).map(|_| noise(4 * K)).collect();
    let command: Vec<String> = (0..64).map(|_| noise(4 * K)).collect();
    let env: Vec<serde_json::Value> = (0..64)
        .map(|i| json!({"name": format!("V{i}"), "value": noise(4 * K)}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": name},
        "spec": {"zone": "us-east5-b", "acceleratorType": "v6e-8",
                 "runtimeVersion": "v2-alpha-tpuv6e", "capacity": {"spot": {}}, "suspend": true,
                 "metadata": {"a": noise(256 * K), "b": noise(255 * K)},
                 "workload": {"image": "us-docker.pkg.dev/p/r/train:1", "command": command,
                              "args": args, "env": env}},
    }))
    .expect("largest slice")
}

/// One running slice in team-a that uses its policy's chips, then `flood` more its policy
/// refuses; returns once the last one shows refused.
async fn flood_team_a(world: &World, flood: u64) {
    let team_a = Api::<TpuSlice>::namespaced(world.client.clone(), TEAM_A);
    create_and_wait(world, &team_a, "holder", |s| {
        phase(s) == Some(TpuSlicePhase::Ready)
    })
    .await;
    let started = Instant::now();
    for i in 0..flood {
        team_a
            .create(&Default::default(), &slice(&format!("flood-{i}")))
            .await
            .expect("create flood");
    }
    let created = started.elapsed();
    wait(world, &team_a, &format!("flood-{}", flood - 1), refused).await;
    println!(
        "  team-a: {flood} slices created in {:.1} s, the last refused after {:.1} s",
        created.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
