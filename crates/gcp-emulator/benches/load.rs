//! Load figure for the README: calls per second the emulator sustains over HTTP with 10,000 live
//! resources (4,000 TPU nodes, 3,000 Dataproc batches, 3,000 Vertex custom jobs), from 16
//! concurrent keep-alive clients issuing a read-heavy mix (get node / batch / job / operation,
//! small-page lists) plus creates. Run: `cargo bench -p gcp-emulator --bench load`.

use gcp_emulator::Emulator;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NODES: usize = 4_000;
const BATCHES: usize = 3_000;
const JOBS: usize = 3_000;
const WORKERS: usize = 16;
const RUN: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let emu = Emulator::builder()
        .manual_clock(chrono::Utc::now())
        .start()
        .await
        .expect("emulator starts");
    let url = emu.url();
    let c = reqwest::Client::new();
    let tpu = format!("{url}/tpu/v2/projects/p/locations/us-central2-b");
    let dp = format!("{url}/dataproc/v1/projects/p/locations/us-central1");
    let vx = format!("{url}/vertex/v1/projects/p/locations/us-central1");

    let t0 = Instant::now();
    let job_names = create_resources(&c, &tpu, &dp, &vx).await;
    let setup = t0.elapsed();
    let created = NODES + BATCHES + JOBS;
    println!(
        "setup: {created} creates in {:.2}s = {:.0} creates/s (sequential, one connection)",
        setup.as_secs_f64(),
        created as f64 / setup.as_secs_f64()
    );
    // Let everything reach a steady state (nodes READY, batches RUNNING/finished...).
    emu.clock().advance(Duration::from_secs(120));
    assert_eq!(
        emu.list_resources()
            .iter()
            .filter(|r| r.kind != "operation")
            .count(),
        created
    );

    single_client_latencies(&c, &url, &tpu, &dp, &job_names).await;
    let job_names = Arc::new(job_names);
    for (label, kinds) in [("mixed gets + filtered 10-item lists", 6), ("gets only", 3)] {
        let (n, errors) = phase(&c, &url, &tpu, &dp, job_names.clone(), kinds).await;
        println!(
            "sustained ({label}): {n} calls in {:.1}s = {:.0} calls/s with {created} live resources ({WORKERS} keep-alive clients; errors: {errors})",
            RUN.as_secs_f64(),
            n as f64 / RUN.as_secs_f64(),
        );
    }
    emu.shutdown().await;
}

/// Creates NODES TPU nodes, BATCHES Dataproc batches and JOBS Vertex custom jobs one after the
/// other over one connection; returns the custom jobs' names.
async fn create_resources(c: &reqwest::Client, tpu: &str, dp: &str, vx: &str) -> Vec<String> {
    let mut job_names = Vec::with_capacity(JOBS);
    for i in 0..NODES {
        let body = json!({"runtimeVersion": "tpu-ubuntu2204-base", "acceleratorType": "v5litepod-8", "labels": {"i": i.to_string()}});
        let r = c
            .post(format!("{tpu}/nodes?nodeId=n{i}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for i in 0..BATCHES {
        let body = json!({"pysparkBatch": {"mainPythonFileUri": "gs://b/m.py", "args": ["gs://b/out/"]}});
        let r = c
            .post(format!("{dp}/batches?batchId=batch-{i:05}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for i in 0..JOBS {
        let body = json!({"displayName": format!("j{i}"), "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": "1", "containerSpec": {"imageUri": "alpine"}}]}});
        let r: serde_json::Value = c
            .post(format!("{vx}/customJobs"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        job_names.push(r["name"].as_str().unwrap().to_string());
    }
    job_names
}

/// Prints the single-client latency per request kind (100 calls each).
async fn single_client_latencies(c: &reqwest::Client, url: &str, tpu: &str, dp: &str, job_names: &[String]) {
    let kinds = [
        ("tpu nodes.get", format!("{tpu}/nodes/n17")),
        ("dataproc batches.get", format!("{dp}/batches/batch-00017")),
        (
            "vertex customJobs.get",
            format!("{url}/vertex/v1/{}", job_names[17]),
        ),
        ("tpu nodes.list pageSize=10", format!("{tpu}/nodes?pageSize=10")),
        (
            "dataproc batches.list filter state",
            format!("{dp}/batches?pageSize=10&filter=state+%3D+RUNNING"),
        ),
        (
            "dataproc batches.list (no filter)",
            format!("{dp}/batches?pageSize=10"),
        ),
        (
            "dataproc batches.list filter label",
            format!("{dp}/batches?pageSize=10&filter=labels.x%3Dy"),
        ),
        (
            "vertex customJobs.list filter label",
            format!(
                "{url}/vertex/v1/projects/p/locations/us-central1/customJobs?pageSize=10&filter=labels.x%3Dy"
            ),
        ),
    ];
    for (label, u) in &kinds {
        let t = Instant::now();
        for _ in 0..100 {
            let r = c.get(u).send().await.unwrap();
            assert!(r.status().is_success(), "{label}");
            let _ = r.bytes().await;
        }
        println!("latency {label}: {:.3} ms", t.elapsed().as_secs_f64() * 10.0);
    }
}

/// Runs WORKERS clients for RUN over the first `kinds` request kinds; returns (ok calls, errors).
async fn phase(
    c: &reqwest::Client,
    url: &str,
    tpu: &str,
    dp: &str,
    jobs: Arc<Vec<String>>,
    kinds: usize,
) -> (u64, u64) {
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (c, tpu, dp, url) = (c.clone(), tpu.to_string(), dp.to_string(), url.to_string());
        let (count, errors, jobs) = (count.clone(), errors.clone(), jobs.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w * 7919;
            while Instant::now() < deadline {
                i += 1;
                let u = match i % kinds {
                    0 => format!("{tpu}/nodes/n{}", i % NODES),
                    1 => format!("{dp}/batches/batch-{:05}?%24alt=json%3Benum-encoding%3Dint", i % BATCHES),
                    2 => format!("{url}/vertex/v1/{}", jobs[i % JOBS]),
                    3 => format!("{tpu}/nodes?pageSize=10"),
                    4 => format!("{dp}/batches?pageSize=10&filter=state+%3D+RUNNING"),
                    _ => format!("{url}/vertex/v1/projects/p/locations/us-central1/customJobs?pageSize=10&filter=labels.x%3Dy"),
                };
                match c.get(&u).send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (count.load(Ordering::Relaxed), errors.load(Ordering::Relaxed))
}
