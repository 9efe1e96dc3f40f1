//! What a failing run prints: a one-line state of every object, and a dump of the emulator.

use kube::ResourceExt;

use crate::{
    fixtures,
    world::{Snapshot, World},
};

/// The emulator's resources, bucket listing and call counts (set `RELIABILITY_DUMP=1`).
pub fn dump(world: &World) -> String {
    let objects: Vec<String> = world
        .gcp
        .objects(fixtures::BUCKET)
        .into_iter()
        .map(|o| o.name)
        .collect();
    let calls: Vec<String> = world
        .gcp
        .calls()
        .iter()
        .map(|c| format!("{} {} {} {}", c.status, c.method, c.path, c.query))
        .collect();
    let compute: Vec<String> = world
        .gcp
        .list_resources()
        .into_iter()
        .filter(|r| r.kind.starts_with("compute.") && r.kind != "compute.operation")
        .map(|r| format!("{} {} {}", r.kind, r.name, r.state))
        .collect();
    format!(
        "nodes: {:#}\nqueued: {:#}\ncompute: {compute:#?}\nobjects: {objects:?}\ncalls:\n{}",
        serde_json::Value::from(world.gcp.nodes()),
        serde_json::Value::from(world.gcp.queued_resources()),
        calls.join("\n")
    )
}

/// A one-line state of every object, for failure messages.
pub fn describe(s: &Snapshot) -> String {
    let mut parts = Vec::new();
    for o in &s.slices {
        let st = o.status.as_ref();
        parts.push(format!(
            "TpuSlice {} {:?} node={:?} msg={:?} fin={:?}",
            o.name_any(),
            st.map(|s| s.phase),
            st.and_then(|s| s.node_name.clone()),
            st.and_then(|s| s.message.clone()),
            o.finalizers()
        ));
    }
    for o in &s.batches {
        let st = o.status.as_ref();
        parts.push(format!(
            "PreprocessBatch {} {:?} batch={:?} msg={:?} fin={:?}",
            o.name_any(),
            st.map(|s| s.phase),
            st.and_then(|s| s.batch_name.clone()),
            st.and_then(|s| s.message.clone()),
            o.finalizers()
        ));
    }
    for o in &s.pipelines {
        let st = o.status.as_ref();
        parts.push(format!(
            "TrainingPipeline {} {:?} job={:?} msg={:?} fin={:?}",
            o.name_any(),
            st.map(|s| s.phase),
            st.and_then(|s| s.custom_job_name.clone()),
            st.and_then(|s| s.message.clone()),
            o.finalizers()
        ));
    }
    parts.join("; ")
}
