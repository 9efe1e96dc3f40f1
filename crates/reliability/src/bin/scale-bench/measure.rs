//! What the bench measures with: the watches that record when each object's status first shows
//! it done, the lags from those instants, CPU time, and the operator's failure counts.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Instant,
};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use tpu_operator_reliability::{World, world::NAMESPACE};

/// First instant each object was seen done ("Ready"/"Succeeded"), by "kind/name".
pub(super) type Seen = Arc<Mutex<HashMap<String, Instant>>>;

pub(super) fn watch<K>(client: kube::Client, seen: Seen, kind: &'static str, done: fn(&K) -> bool)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let api: Api<K> = Api::namespaced(client, NAMESPACE);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(o) = ev
                && done(&o)
            {
                seen.lock()
                    .unwrap()
                    .entry(format!("{kind}/{}", o.name_any()))
                    .or_insert_with(Instant::now);
            }
        }
    });
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Lags of each group's objects from the group's instant (when their cloud resources changed).
pub(super) fn lags<'a>(
    seen: &Seen,
    groups: impl IntoIterator<Item = (&'a [String], Instant)>,
) -> (usize, f64, f64, f64) {
    let g = seen.lock().unwrap();
    let mut v: Vec<f64> = groups
        .into_iter()
        .flat_map(|(keys, t0)| {
            keys.iter()
                .filter_map(|k| g.get(k))
                .map(move |t| t.saturating_duration_since(t0).as_secs_f64())
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

/// CPU seconds so far of the operator process and of this one.
pub(super) fn cpu_split(world: &World) -> (f64, f64) {
    let operator = world.process().and_then(|p| p.cpu_seconds());
    let bench = tpu_operator_reliability::process::cpu_seconds_of("self");
    (operator.unwrap_or(f64::NAN), bench.unwrap_or(f64::NAN))
}

/// The start of a labelled `tpu_operator_reconcile_failures_total` sample line (a constant of
/// its own keeps the unbalanced `{` out of a function body, where brace-counting size checks
/// would lose track of it).
const FAILURES_SERIES: &str = "tpu_operator_reconcile_failures_total{";

/// `tpu_operator_reconcile_failures_total` summed over kinds, by `category` (a stale status
/// write's 409 shows as `KubeConflict`).
pub(super) fn failures_by_category(metrics: &str) -> BTreeMap<String, f64> {
    let mut by = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(FAILURES_SERIES) else {
            continue;
        };
        let category = rest
            .split("category=\"")
            .nth(1)
            .and_then(|c| c.split('"').next())
            .unwrap_or("?");
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *by.entry(category.to_owned()).or_default() += value;
    }
    by
}
