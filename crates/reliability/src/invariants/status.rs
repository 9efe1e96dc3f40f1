//! Status consistent with the cloud: a Ready/Succeeded status names a resource that exists in
//! that state, and every live resource is the one its object's status names.

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde_json::Value;
use tpu_operator_api::{
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    tpu_slice::{Provisioner, TpuSlice, TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};

use super::{
    ATTEMPT_LABEL, UID_LABEL, Violations, created_by, label, live::compute_by_uid, short, slice_index, state,
};
use crate::world::Snapshot;

/// Status against the cloud, for converged objects: what a Ready / Succeeded status names
/// exists in that state, and every live resource carrying an object's UID is the one its status
/// names (nothing the operator lost track of).
pub fn status_consistent(snapshot: &Snapshot, gcp: &gcp_emulator::Emulator) -> Violations {
    let mut v = Violations::default();
    let nodes = by_name(gcp.nodes());
    let queued = by_name(gcp.queued_resources());
    let batches = by_name(gcp.batches());
    let jobs = by_name(gcp.custom_jobs());
    for s in &snapshot.slices {
        v.extend(slice_consistent(s, &nodes, &queued, gcp));
    }
    for b in &snapshot.batches {
        v.extend(batch_consistent(b, &batches));
    }
    for p in &snapshot.pipelines {
        v.extend(pipeline_consistent(p, &jobs));
    }
    v
}

/// Cloud resources by their full name.
fn by_name(resources: Vec<Value>) -> BTreeMap<String, Value> {
    resources
        .into_iter()
        .map(|n| (n["name"].as_str().unwrap_or("").to_owned(), n))
        .collect()
}

/// [`status_consistent`] for a slice of its own: the node (and queued resource) a Ready status
/// names, and every node carrying its UID.
fn slice_consistent(
    s: &TpuSlice,
    nodes: &BTreeMap<String, Value>,
    queued: &BTreeMap<String, Value>,
    gcp: &gcp_emulator::Emulator,
) -> Violations {
    let mut v = Violations::default();
    let name = s.name_any();
    let Some(st) = &s.status else { return v };
    // Being deleted (e.g. a pipeline releasing its training slice): the status may still show
    // the last converged state while the finalizer deletes the node.
    // A pipeline's training slice is released once training is done (checked through the
    // pipeline instead).
    if s.metadata.deletion_timestamp.is_some() || !s.owner_references().is_empty() {
        return v;
    }
    if s.spec.provisioner == Provisioner::ComputeEngine {
        return compute_slice_consistent(s, gcp);
    }
    if st.phase == TpuSlicePhase::Ready {
        v.extend(ready_slice_consistent(&name, st, nodes, queued));
    }
    let uid = s.uid().unwrap_or_default();
    for (n, node) in nodes {
        let named = st.node_name.as_deref() == Some(n) || current_slice_node(s, st, n);
        if label(node, UID_LABEL) == Some(uid.as_str()) && !named {
            v.push(format!(
                "TpuSlice {name}: node {n} carries its UID but status names {:?}",
                st.node_name
            ));
        }
    }
    v
}

/// Multislice: `node` is the node of one of its slices as status has it now. Status names slice
/// 0's node (`<id>-s0`, `<id>-s0r<n>`); slice `k`'s is `<id>-s<k>`, or `<id>-s<k>r<n>` once
/// replaced `n` times (`status.sliceRestarts`).
fn current_slice_node(s: &TpuSlice, st: &TpuSliceStatus, node: &str) -> bool {
    let (Some(_), Some(first), Some(k)) = (&s.spec.multislice, &st.node_name, slice_index(node)) else {
        return false;
    };
    let id_of = |name: &str| name.rsplit_once('-').map(|(id, _)| id.to_owned());
    let restarts = st.slice_restarts.get(k as usize).copied().unwrap_or(0);
    let last = match restarts {
        0 => format!("s{k}"),
        n => format!("s{k}r{n}"),
    };
    id_of(first).is_some_and(|id| node == format!("{id}-{last}"))
}

/// A Ready TPU API slice: its node is READY (in the cloud and in status), and so is its queued
/// resource if it has one.
fn ready_slice_consistent(
    name: &str,
    st: &TpuSliceStatus,
    nodes: &BTreeMap<String, Value>,
    queued: &BTreeMap<String, Value>,
) -> Violations {
    let mut v = Violations::default();
    match st.node_name.as_ref().and_then(|n| nodes.get(n)) {
        Some(n) if state(n) == "READY" => {}
        Some(n) => v.push(format!("TpuSlice {name} Ready but its node is {}", state(n))),
        None => v.push(format!(
            "TpuSlice {name} Ready but its node {:?} does not exist",
            st.node_name
        )),
    }
    if st.node_state.as_deref() != Some("READY") {
        v.push(format!(
            "TpuSlice {name} Ready with nodeState {:?}",
            st.node_state
        ));
    }
    if let Some(q) = &st.queued_resource_name {
        // A queued resource's state is a message: `state: {state: ACTIVE, ...}`.
        let qstate = |q: &Value| q["state"]["state"].as_str().unwrap_or("").to_owned();
        match queued.get(q) {
            Some(q) if qstate(q) == "ACTIVE" => {}
            other => v.push(format!(
                "TpuSlice {name} Ready but its queued resource is {:?}",
                other.map(qstate)
            )),
        }
    }
    v
}

/// [`status_consistent`] for a PreprocessBatch: a Succeeded status names a SUCCEEDED batch, and
/// every batch carrying its UID is named by its status (current or previous).
fn batch_consistent(b: &PreprocessBatch, batches: &BTreeMap<String, Value>) -> Violations {
    let mut v = Violations::default();
    let name = b.name_any();
    let Some(st) = &b.status else { return v };
    if st.phase == PreprocessBatchPhase::Succeeded {
        match st.batch_name.as_ref().and_then(|n| batches.get(n)) {
            Some(c) if state(c) == "SUCCEEDED" => {}
            other => v.push(format!(
                "PreprocessBatch {name} Succeeded but its batch {:?} is {:?}",
                st.batch_name,
                other.map(state)
            )),
        }
        if st.batch_state.as_deref() != Some("SUCCEEDED") {
            v.push(format!(
                "PreprocessBatch {name} Succeeded with batchState {:?}",
                st.batch_state
            ));
        }
    }
    let uid = b.uid().unwrap_or_default();
    for (n, batch) in batches {
        let known = st.batch_name.as_deref() == Some(n) || st.previous_batches.contains(n);
        if label(batch, UID_LABEL) == Some(uid.as_str()) && !known {
            v.push(format!(
                "PreprocessBatch {name}: batch {n} carries its UID but its status does not name it"
            ));
        }
    }
    v
}

/// [`status_consistent`] for a TrainingPipeline: a Succeeded status has a model and a job that
/// succeeded, and every job carrying its UID is the one its status names (or a cancelled
/// duplicate of that job's attempt).
fn pipeline_consistent(p: &TrainingPipeline, jobs: &BTreeMap<String, Value>) -> Violations {
    let mut v = Violations::default();
    let name = p.name_any();
    let Some(st) = &p.status else { return v };
    if st.phase == TrainingPipelinePhase::Succeeded {
        if st.outputs.as_ref().and_then(|o| o.model_uri.as_ref()).is_none() {
            v.push(format!(
                "TrainingPipeline {name} Succeeded without outputs.modelUri"
            ));
        }
        if let Some(job) = st.custom_job_name.as_ref().and_then(|n| jobs.get(n))
            && state(job) != "JOB_STATE_SUCCEEDED"
        {
            v.push(format!(
                "TrainingPipeline {name} Succeeded but its job is {}",
                state(job)
            ));
        }
    }
    let uid = p.uid().unwrap_or_default();
    let named_attempt = st
        .custom_job_name
        .as_ref()
        .and_then(|n| jobs.get(n))
        .and_then(|j| label(j, ATTEMPT_LABEL));
    // A duplicate of the named job's attempt (a create whose reply was lost) that the
    // operator cancelled stays stored, not billing, until the pipeline is deleted.
    let cancelled_duplicate = |job: &Value| {
        matches!(state(job), "JOB_STATE_CANCELLED" | "JOB_STATE_CANCELLING")
            && named_attempt.is_some()
            && label(job, ATTEMPT_LABEL) == named_attempt
    };
    for (n, job) in jobs {
        if label(job, UID_LABEL) == Some(uid.as_str())
            && st.custom_job_name.as_deref() != Some(n)
            && !cancelled_duplicate(job)
        {
            v.push(format!(
                "TrainingPipeline {name}: job {n} carries its UID but status names {:?}",
                st.custom_job_name
            ));
        }
    }
    v
}

/// [`status_consistent`] for a Compute Engine slice: Ready names (as a TPU node name whose id
/// is the instance or MIG name) an instance that is RUNNING, or a MIG at its target size with
/// every member RUNNING (and a SUCCEEDED resize request for flex-start); every instance inserted
/// directly or MIG carrying the slice's UID is the one its status names.
fn compute_slice_consistent(s: &TpuSlice, gcp: &gcp_emulator::Emulator) -> Violations {
    let mut v = Violations::default();
    let name = s.name_any();
    let Some(st) = &s.status else { return v };
    let id = st.node_name.as_deref().map(short);
    let instances = gcp.instances();
    if st.phase == TpuSlicePhase::Ready {
        let id = id.unwrap_or("");
        v.extend(ready_compute_resource(&name, id, &instances, gcp));
        if st.node_state.as_deref() != Some("READY") {
            v.push(format!(
                "TpuSlice {name} Ready with nodeState {:?}",
                st.node_state
            ));
        }
        if let Some(q) = &st.queued_resource_name {
            let request = gcp
                .resize_requests()
                .into_iter()
                .find(|r| r["name"].as_str() == Some(short(q)));
            match request {
                Some(r) if r["state"] == "SUCCEEDED" => {}
                other => v.push(format!(
                    "TpuSlice {name} Ready but its resize request is {:?}",
                    other.map(|r| r["state"].clone())
                )),
            }
        }
    }
    let uid = s.uid().unwrap_or_default();
    for found in compute_by_uid(gcp).get(&uid).into_iter().flatten() {
        // `found` is "instance <name>" or "MIG <name>".
        if found.rsplit(' ').next() != id {
            v.push(format!(
                "TpuSlice {name}: {found} carries its UID but status names {:?}",
                st.node_name
            ));
        }
    }
    v
}

/// A Ready Compute Engine slice's resource `id`: exactly one of an instance inserted directly
/// that is RUNNING, or a MIG at its (non-zero) target size with every member RUNNING.
fn ready_compute_resource(
    name: &str,
    id: &str,
    instances: &[Value],
    gcp: &gcp_emulator::Emulator,
) -> Violations {
    let mut v = Violations::default();
    let direct = instances
        .iter()
        .find(|i| created_by(i).is_none() && i["name"].as_str() == Some(id));
    let group = gcp
        .instance_group_managers()
        .into_iter()
        .find(|g| g["name"].as_str() == Some(id));
    match (direct, group) {
        (Some(i), None) if i["status"] == "RUNNING" => {}
        (Some(i), None) => v.push(format!(
            "TpuSlice {name} Ready but its instance {id} is {}",
            i["status"]
        )),
        (None, Some(g)) => {
            let members: Vec<&Value> = instances
                .iter()
                .filter(|i| created_by(i).map(short) == Some(id))
                .collect();
            let target = g["targetSize"].as_u64().unwrap_or(0) as usize;
            let running = members.iter().filter(|i| i["status"] == "RUNNING").count();
            if target == 0 || members.len() != target || running != target {
                v.push(format!(
                    "TpuSlice {name} Ready but its MIG {id} has {running} of {} members RUNNING (target {target})",
                    members.len()
                ));
            }
        }
        (None, None) => v.push(format!(
            "TpuSlice {name} Ready but no instance or MIG {id:?} exists"
        )),
        (Some(_), Some(_)) => v.push(format!(
            "TpuSlice {name}: both an instance and a MIG are named {id}"
        )),
    }
    v
}
