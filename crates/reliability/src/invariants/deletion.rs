//! After every object is deleted: nothing of ours left in the cloud, no object held by its
//! finalizer.

use serde_json::Value;

use super::{TERMINAL_BATCH, TERMINAL_JOB, Violations, state};
use crate::world::Snapshot;

/// Everything of ours still in the emulator (call once every object is gone and the delete
/// operations had time to finish).
pub fn leftovers(gcp: &gcp_emulator::Emulator) -> Violations {
    let mut v = Violations::default();
    for (what, items) in [
        ("TPU node", gcp.nodes()),
        ("queued resource", gcp.queued_resources()),
        ("Dataproc batch", gcp.batches()),
        ("Vertex custom job", gcp.custom_jobs()),
        ("Compute Engine instance", gcp.instances()),
        ("Compute Engine instance template", gcp.instance_templates()),
        ("Compute Engine resource policy", gcp.resource_policies()),
        ("Compute Engine MIG", gcp.instance_group_managers()),
        ("Compute Engine resize request", gcp.resize_requests()),
    ] {
        for r in items {
            let st = match r["status"].as_str() {
                Some(status) if state(&r).is_empty() => status,
                _ => state(&r),
            };
            v.push(format!(
                "{what} left after deletion: {} ({st})",
                r["name"].as_str().unwrap_or("?"),
            ));
        }
    }
    v
}

/// Whether a leftover is billable (a node, queued resource, Compute Engine instance, MIG or
/// resize request in any state, a batch or job that still runs); a terminal batch or job
/// record costs nothing, nor do instance templates and resource policies (still leaks, see
/// [`leftovers`]).
pub fn billable(gcp: &gcp_emulator::Emulator) -> usize {
    let c = gcp.resource_counts();
    gcp.nodes().len()
        + gcp.queued_resources().len()
        + c.instances
        + c.instance_group_managers
        + c.resize_requests
        + gcp
            .batches()
            .iter()
            .filter(|b| !TERMINAL_BATCH.contains(&state(b)))
            .count()
        + gcp
            .custom_jobs()
            .iter()
            .filter(|j| !TERMINAL_JOB.contains(&state(j)))
            .count()
}

/// Objects still present (with their finalizers) after they were all deleted, with what their
/// status says, so a failure names the reason the finalizer is still held.
pub fn stuck(snapshot: &Snapshot) -> Violations {
    let mut v = Violations::default();
    let mut one = |kind: &str, meta: &kube::api::ObjectMeta, status: Option<Value>| {
        let conditions: Vec<String> = status
            .as_ref()
            .and_then(|s| s["conditions"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                format!(
                    "{}={} {}: {}",
                    c["type"].as_str().unwrap_or("?"),
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        v.push(format!(
            "{kind} {} still exists (deleting: {}, finalizers {:?}, phase {}, conditions {conditions:?})",
            meta.name.as_deref().unwrap_or("?"),
            meta.deletion_timestamp.is_some(),
            meta.finalizers.clone().unwrap_or_default(),
            status
                .as_ref()
                .and_then(|s| s["phase"].as_str().map(str::to_owned))
                .unwrap_or_default(),
        ));
    };
    let json = |s: Option<Value>| s.filter(|v| !v.is_null());
    for o in &snapshot.slices {
        one(
            "TpuSlice",
            &o.metadata,
            json(serde_json::to_value(&o.status).ok()),
        );
    }
    for o in &snapshot.batches {
        one(
            "PreprocessBatch",
            &o.metadata,
            json(serde_json::to_value(&o.status).ok()),
        );
    }
    for o in &snapshot.pipelines {
        one(
            "TrainingPipeline",
            &o.metadata,
            json(serde_json::to_value(&o.status).ok()),
        );
    }
    v
}
