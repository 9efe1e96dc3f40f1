//! Load figures for the README: create throughput with 10,000 objects (CRD with schema + CEL
//! validation, through kube-rs in-process), list time, watch fan-out, and memory.
//! Run: `cargo bench -p kube-emulator --bench load` (prints numbers; no assertions).

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_emulator::{Config, KubeEmulator};
use serde_json::json;
use std::time::Instant;

const OBJECTS: usize = 10_000;
const WATCHERS: usize = 10;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn widget(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": format!("w-{i:05}"), "labels": {"bench": "yes", "shard": (i % 16).to_string()}},
        "spec": {"zone": "us-central2-b", "replicas": 1 + (i % 10) as i64, "machineType": "ct5lp-hightpu-4t"}
    }))
    .expect("widget")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rss_start = rss_mib();
    // History large enough that the fan-out watchers never fall behind into 410s.
    let emulator = KubeEmulator::with_config(Config {
        history_limit: 4 * OBJECTS,
        ..Config::default()
    });
    emulator
        .install_crds_from_yaml(include_str!("../tests/fixtures/widgets.yaml"))
        .expect("CRD");
    let client = Client::new(emulator.router(), "default");
    let gvk = GroupVersionKind::gvk("example.dev", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);

    // Watch fan-out: WATCHERS watches started before the creates, each counting ADDED events.
    let start_rv = emulator.resource_version().to_string();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let stream = api
            .watch(&WatchParams::default().timeout(290), &start_rv)
            .await
            .expect("watch")
            .boxed();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream;
            let mut added = 0usize;
            while let Some(event) = stream.next().await {
                if let Ok(WatchEvent::Added(_)) = event {
                    added += 1;
                    if added == OBJECTS {
                        break;
                    }
                }
            }
            (added, Instant::now())
        }));
    }

    let started = Instant::now();
    let mut creates = futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &widget(i))
                    .await
                    .expect("create")
            }
        })
        .buffer_unordered(32);
    while creates.next().await.is_some() {}
    let create_secs = started.elapsed().as_secs_f64();

    let mut last_delivery = started;
    for w in watchers {
        let (added, at) = w.await.expect("watcher");
        assert_eq!(added, OBJECTS, "a watcher missed events");
        last_delivery = last_delivery.max(at);
    }
    let fanout_secs = (last_delivery - started).as_secs_f64();

    let list_started = Instant::now();
    let listed = api.list(&ListParams::default()).await.expect("list");
    let list_secs = list_started.elapsed().as_secs_f64();
    let selected_started = Instant::now();
    let selected = api
        .list(&ListParams::default().labels("shard=3"))
        .await
        .expect("list");
    let selected_secs = selected_started.elapsed().as_secs_f64();
    let rss_end = rss_mib();

    println!("kube-emulator load bench ({OBJECTS} Widgets with schema + CEL validation, kube-rs in-process)");
    println!(
        "  create:        {:>8.0} objects/s  ({create_secs:.2} s, 32 in flight)",
        OBJECTS as f64 / create_secs
    );
    println!(
        "  watch fan-out: {:>8.0} events/s delivered  ({WATCHERS} watchers x {OBJECTS} events, all delivered {fanout_secs:.2} s after the first create)",
        (WATCHERS * OBJECTS) as f64 / fanout_secs
    );
    println!(
        "  list all:      {:>8.3} s for {} objects",
        list_secs,
        listed.items.len()
    );
    println!(
        "  list selector: {:>8.3} s for {} objects (labelSelector shard=3)",
        selected_secs,
        selected.items.len()
    );
    println!(
        "  memory:        {:>8.1} MiB RSS after, {:.1} MiB before ({:.1} KiB per object incl. watch history)",
        rss_end,
        rss_start,
        (rss_end - rss_start) * 1024.0 / OBJECTS as f64
    );
}
