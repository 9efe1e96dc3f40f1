use kube::runtime::{reflector, watcher};
use serde_json::json;

use super::*;

/// A pipeline writing `gs://b/m`, created at `at` (seconds), at version `rv`.
fn pipeline(name: &str, at: u32, rv: &str, phase: &str) -> Cached<TrainingPipeline> {
    let tp: TrainingPipeline = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                     "resourceVersion": rv, "creationTimestamp": format!("2026-11-26T10:00:{at:02}Z")},
        "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://b/m"},
                 "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x4",
                                         "container": {"image": "i"}}}},
        "status": {"phase": phase}
    }))
    .unwrap();
    Cached::new(tp).unwrap()
}

fn owner_of(cached: &Cached<TrainingPipeline>) -> Owner {
    Owner::of(&cached.decode().unwrap()).unwrap()
}

#[test]
fn the_index_follows_the_cache_a_version_at_a_time_and_forgets_what_left_it() {
    let (store, mut writer) = reflector::store::<Cached<TrainingPipeline>>();
    let index = Index::default();
    let older = pipeline("older", 1, "10", "Training");
    let newer = pipeline("newer", 2, "11", "Pending");
    writer.apply_watcher_event(&watcher::Event::Apply(older.clone()));
    writer.apply_watcher_event(&watcher::Event::Apply(newer.clone()));
    let me = Claim::of(&newer.decode().unwrap()).unwrap();

    let blocker = index.blocker(&store, &me, |_| true).map(|c| c.name);
    assert_eq!(
        blocker.as_deref(),
        Some("older"),
        "a live older pipeline writes gs://b/m"
    );
    index.wait_for("uid-older", owner_of(&newer));

    // Unchanged versions are not read again; a new version is.
    writer.apply_watcher_event(&watcher::Event::Apply(pipeline("older", 1, "12", "Succeeded")));
    assert_eq!(
        index.blocker(&store, &me, |_| true),
        None,
        "finished at its new version: no claim"
    );
    writer.apply_watcher_event(&watcher::Event::Apply(pipeline("older", 1, "13", "Training")));
    assert_eq!(
        index.blocker(&store, &me, |_| true).map(|c| c.name).as_deref(),
        Some("older")
    );
    // A claim its own policy does not let write there holds nothing.
    assert_eq!(
        index.blocker(&store, &me, |c| c.name != "older"),
        None,
        "a claim refused by its own policy blocks no one"
    );

    // Gone from the cache: forgotten, and so are the pipelines that waited for it.
    writer.apply_watcher_event(&watcher::Event::Delete(pipeline("older", 1, "13", "Training")));
    assert_eq!(index.blocker(&store, &me, |_| true), None);
    let claims = index.claims.lock().unwrap();
    assert_eq!(claims.by_uid.keys().collect::<Vec<_>>(), ["uid-newer"]);
    assert!(
        index.waiting.lock().unwrap().is_empty(),
        "no waiters kept for a pipeline gone"
    );
}
