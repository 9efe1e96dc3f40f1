//! The "preemption noticed" phase (issue 35 item 7): READY Spot slices are preempted in the
//! cloud while nothing touches their Kubernetes objects, and the time from each preemption to
//! its slice's status showing it is measured. Settled slices are watched through one node
//! listing per zone per `poll_active`, so the lag is bounded by that interval, not by the
//! 5-minute backstop read; the listings made meanwhile are counted per zone and interval.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use gcp_emulator::Fault;
use kube::Api;
use tpu_operator_api::{TpuSlice, tpu_slice::TpuSlicePhase};
use tpu_operator_reliability::{World, world::NAMESPACE};

use super::measure::{lags, watch};

/// The operator's default `--poll-active` (the cloud watch's listing round).
pub(super) const POLL_ACTIVE: Duration = Duration::from_secs(2);

/// Preempts the nodes of slices `s-0 .. s-(count-1)` and prints how long their statuses took to
/// show it (p50 / p99 / max) and how many zone listings the operator made meanwhile. Then lets
/// the recreated nodes come up, so the deletion phase starts from converged slices again.
pub async fn measure(world: &World, count: usize, limit: Duration) {
    if count == 0 {
        return;
    }
    let nodes = nodes_of(world, (0..count).map(|i| format!("s-{i}"))).await;
    let noticed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    watch::<TpuSlice>(world.client.clone(), noticed.clone(), "TpuSlice", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.recreations > 0 || matches!(st.phase, TpuSlicePhase::Preempted | TpuSlicePhase::Recreating)
        })
    });
    // The watch's initial list must not see these as preempted already: give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    world.gcp.clear_calls();
    let t0 = Instant::now();
    for (_, node) in &nodes {
        world
            .gcp
            .inject(Fault::PreemptNode { name: node.clone() })
            .unwrap();
    }
    let keys: Vec<String> = nodes.iter().map(|(name, _)| format!("TpuSlice/{name}")).collect();
    let deadline = Instant::now() + limit;
    while noticed.lock().unwrap().len() < keys.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window = t0.elapsed();
    let (seen, p50, p99, max) = lags(&noticed, [(keys.as_slice(), t0)]);
    let lists = world.gcp.call_count("tpu", "nodes.list");
    let rounds = (window.as_secs_f64() / POLL_ACTIVE.as_secs_f64()).ceil().max(1.0);
    println!(
        "preemption noticed: {seen}/{} READY Spot slices preempted, status lag p50 {p50:.2} s, p99 {p99:.2} s, max {max:.2} s; \
         {lists} nodes.list calls in {:.1} s ({:.2} per {} s round: one zone's listing, in pages of 1,000 nodes)",
        keys.len(),
        window.as_secs_f64(),
        lists as f64 / rounds,
        POLL_ACTIVE.as_secs()
    );
    recovered(world, limit).await;
}

/// Advances the cloud clock until every slice is READY again (the recreated spot nodes come up
/// after a few emulated minutes).
async fn recovered(world: &World, limit: Duration) {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        world.advance(Duration::from_secs(60));
        let slices = world.snapshot().await.slices;
        let ready = slices
            .iter()
            .filter(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
            })
            .count();
        if ready == slices.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The node names of the slices `names`, as their statuses give them.
pub(super) async fn nodes_of(world: &World, names: impl Iterator<Item = String>) -> Vec<(String, String)> {
    let api: Api<TpuSlice> = Api::namespaced(world.client.clone(), NAMESPACE);
    let mut nodes = Vec::new();
    for name in names {
        let node = api
            .get(&name)
            .await
            .ok()
            .and_then(|s| s.status)
            .and_then(|st| st.node_name);
        if let Some(node) = node {
            nodes.push((name, node));
        }
    }
    nodes
}
