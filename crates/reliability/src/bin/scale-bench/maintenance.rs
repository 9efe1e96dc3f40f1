//! The "maintenance notice" phase: Google announces maintenance on READY nodes of settled
//! slices (the node's `upcomingMaintenance`, as the `ScheduleMaintenance` fault sets it) while
//! nothing touches their Kubernetes objects, and the time from each notice appearing in the
//! cloud to its slice's `status.maintenance` showing it Pending is measured. Settled slices are
//! watched through one node listing per zone per `poll_active`; the listings and the reads by
//! name made meanwhile are counted per zone, to show that no per-object read was added.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use gcp_emulator::Fault;
use tpu_operator_api::{TpuSlice, tpu_slice::MaintenanceState};
use tpu_operator_reliability::World;

use super::{
    measure::{lags, watch},
    preemption::{POLL_ACTIVE, nodes_of},
};

/// How far ahead the announced window starts: past anything the later phases do to the
/// emulated clock, so the maintenance itself never runs in the bench.
const WINDOW_IN: u64 = 24 * 3600;

/// Announces maintenance on the nodes of the `count` slices with the highest indices (slices go
/// round the zones by index, so consecutive ones spread over them) and prints how long their
/// statuses took to show it (p50 / p99 / max), and the `nodes.list` and `nodes.get` calls per
/// zone per `poll_active` round meanwhile.
pub async fn measure(world: &World, slices: usize, count: usize, limit: Duration) {
    if count == 0 {
        return;
    }
    let nodes = nodes_of(world, (slices - count..slices).map(|i| format!("s-{i}"))).await;
    let noticed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    watch::<TpuSlice>(world.client.clone(), noticed.clone(), "TpuSlice", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.maintenance.as_ref())
            .is_some_and(|m| m.state == MaintenanceState::Pending)
    });
    // The watch's initial list must be done before the notices: give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    world.gcp.clear_calls();
    let t0 = Instant::now();
    let mut announced = Vec::with_capacity(nodes.len());
    for (slice, node) in &nodes {
        let notice = Fault::ScheduleMaintenance {
            name: node.clone(),
            start_in_secs: WINDOW_IN,
            duration_secs: 3600,
            can_reschedule: false,
            unscheduled: false,
        };
        world.gcp.inject(notice).unwrap();
        announced.push((vec![format!("TpuSlice/{slice}")], Instant::now()));
    }
    let deadline = Instant::now() + limit;
    while noticed.lock().unwrap().len() < announced.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window = t0.elapsed();
    let groups = announced.iter().map(|(keys, at)| (keys.as_slice(), *at));
    let (seen, p50, p99, max) = lags(&noticed, groups);
    let rounds = (window.as_secs_f64() / POLL_ACTIVE.as_secs_f64()).ceil().max(1.0);
    println!(
        "maintenance notice noticed: {seen}/{} READY slices' nodes announced over {} zones, status.maintenance Pending lag p50 {p50:.2} s, p99 {p99:.2} s, max {max:.2} s, in {:.1} s ({rounds:.0} rounds of {} s)",
        announced.len(),
        zones_of(&nodes).len(),
        window.as_secs_f64(),
        POLL_ACTIVE.as_secs()
    );
    for (zone, c) in calls_by_zone(world) {
        println!(
            "  {zone}: {} nodes.list listings ({} page calls) = {:.2} listings per round; {} nodes.get; {} announced there",
            c.listings,
            c.pages,
            c.listings as f64 / rounds,
            c.gets,
            nodes.iter().filter(|(_, n)| zone_of(n) == zone).count()
        );
    }
}

fn zone_of(node: &str) -> &str {
    node.split("/locations/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("?")
}

fn zones_of(nodes: &[(String, String)]) -> std::collections::BTreeSet<&str> {
    nodes.iter().map(|(_, n)| zone_of(n)).collect()
}

#[derive(Default)]
struct ZoneCalls {
    /// Listings: first-page calls (no `pageToken`).
    listings: u64,
    pages: u64,
    gets: u64,
}

/// The TPU `nodes.list` and `nodes.get` calls since the calls were cleared, by zone.
fn calls_by_zone(world: &World) -> BTreeMap<String, ZoneCalls> {
    let mut by: BTreeMap<String, ZoneCalls> = BTreeMap::new();
    for call in world.gcp.calls() {
        if call.service != "tpu" {
            continue;
        }
        let zone = zone_of(&call.path).to_owned();
        match call.method.as_str() {
            "nodes.list" => {
                let c = by.entry(zone).or_default();
                c.pages += 1;
                let later_page = call
                    .query
                    .split('&')
                    .any(|kv| kv.strip_prefix("pageToken=").is_some_and(|t| !t.is_empty()));
                c.listings += u64::from(!later_page);
            }
            "nodes.get" => by.entry(zone).or_default().gets += 1,
            _ => {}
        }
    }
    by
}
