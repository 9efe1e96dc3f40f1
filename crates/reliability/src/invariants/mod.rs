//! The promises, as checks over the emulators' state and the gcp-emulator's call log.
//!
//! * At-most-once creates: the call log's successful creates, by the id the operator chose
//!   (`nodeId`, `queuedResourceId`, `batchId`; for Compute Engine inserts, whose names travel in
//!   the body, the `requestId`, one per slice incarnation) or, for Vertex (server-chosen ids), by
//!   count, never exceed what the objects of a run may own; and at no moment do two live
//!   resources carry one object's `tpu-operator-uid` label (per attempt for batches and jobs; on
//!   Compute Engine, instances made directly plus MIGs, a MIG counted by its template's label,
//!   and more than one resize request per MIG).
//! * No leaks: once every object is deleted, nothing of ours is left in the emulator (TPU API,
//!   Dataproc, Vertex, and Compute Engine instances, instance templates, resource policies, MIGs
//!   and resize requests).
//! * No stuck finalizers: every deleted object goes away.
//! * Status consistent with the cloud: a Ready/Succeeded status names a resource that exists in
//!   that state, and every live resource is the one its object's status names.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use serde_json::Value;
use tpu_operator_api::{
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase},
    tpu_slice::{Provisioner, TpuSlice, TpuSlicePhase, TpuSliceStatus},
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase},
};

use crate::world::Snapshot;

pub use tpu_operator_api::{naming::labels::UID as UID_LABEL, training_pipeline::ATTEMPT_LABEL};

/// A list of broken promises (empty = all kept).
#[derive(Clone, Debug, Default)]
pub struct Violations(pub Vec<String>);

impl Violations {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn extend(&mut self, other: Violations) {
        self.0.extend(other.0);
    }
    pub fn push(&mut self, v: String) {
        self.0.push(v);
    }
}

impl std::fmt::Display for Violations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for v in &self.0 {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

/// The most cloud resources the objects of a run may create (no preemptions, no failed attempts).
#[derive(Clone, Copy, Debug, Default)]
pub struct Expected {
    pub nodes: usize,
    pub queued: usize,
    pub batches: usize,
    pub jobs: usize,
    /// Compute Engine instances inserted directly (single-host slices).
    pub instances: usize,
    /// Compute Engine managed instance groups (multi-host and flex-start slices).
    pub groups: usize,
    /// Compute Engine MIG resize requests (flex-start slices).
    pub resize_requests: usize,
}

/// Successful creates in the call log, by the id the operator chose.
#[derive(Clone, Debug, Default)]
pub struct Created {
    pub nodes: BTreeSet<String>,
    pub queued: BTreeSet<String>,
    pub batches: BTreeSet<String>,
    /// Successful `customJobs.create` calls (Vertex picks the id; every success is a new job).
    pub jobs: usize,
    /// `requestId`s of successful `instances.insert` calls (a replay of one id is one instance).
    pub instances: BTreeSet<String>,
    /// `requestId`s of successful `instanceGroupManagers.insert` calls.
    pub groups: BTreeSet<String>,
    /// `requestId`s of successful `instanceGroupManagerResizeRequests.insert` calls.
    pub resize_requests: BTreeSet<String>,
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_owned())
    })
}

pub fn created(gcp: &gcp_emulator::Emulator) -> Created {
    let mut c = Created::default();
    for call in gcp.calls() {
        if call.status >= 300 {
            continue;
        }
        match (call.service.as_str(), call.method.as_str()) {
            ("tpu", "nodes.create") => {
                c.nodes
                    .insert(query_param(&call.query, "nodeId").unwrap_or_default());
            }
            ("tpu", "queuedResources.create") => {
                c.queued
                    .insert(query_param(&call.query, "queuedResourceId").unwrap_or_default());
            }
            ("dataproc", "batches.create") => {
                c.batches
                    .insert(query_param(&call.query, "batchId").unwrap_or_default());
            }
            ("vertex", "customJobs.create") => c.jobs += 1,
            ("compute", "instances.insert") => {
                c.instances
                    .insert(query_param(&call.query, "requestId").unwrap_or_default());
            }
            ("compute", "instanceGroupManagers.insert") => {
                c.groups
                    .insert(query_param(&call.query, "requestId").unwrap_or_default());
            }
            ("compute", "instanceGroupManagerResizeRequests.insert") => {
                c.resize_requests
                    .insert(query_param(&call.query, "requestId").unwrap_or_default());
            }
            _ => {}
        }
    }
    c
}

/// Creates beyond what the run's objects may own, from the whole call log.
pub fn duplicate_creates(gcp: &gcp_emulator::Emulator, expected: Expected) -> Violations {
    let c = created(gcp);
    let mut v = Violations::default();
    let mut check = |what: &str, got: usize, max: usize, detail: String| {
        if got > max {
            v.push(format!("{got} {what} created for at most {max}: {detail}"));
        }
    };
    check(
        "TPU nodes",
        c.nodes.len(),
        expected.nodes,
        format!("{:?}", c.nodes),
    );
    check(
        "queued resources",
        c.queued.len(),
        expected.queued,
        format!("{:?}", c.queued),
    );
    check(
        "Dataproc batches",
        c.batches.len(),
        expected.batches,
        format!("{:?}", c.batches),
    );
    check("Vertex custom jobs", c.jobs, expected.jobs, String::new());
    check(
        "Compute Engine instances (by requestId)",
        c.instances.len(),
        expected.instances,
        format!("{:?}", c.instances),
    );
    check(
        "Compute Engine MIGs (by requestId)",
        c.groups.len(),
        expected.groups,
        format!("{:?}", c.groups),
    );
    check(
        "Compute Engine resize requests (by requestId)",
        c.resize_requests.len(),
        expected.resize_requests,
        format!("{:?}", c.resize_requests),
    );
    v
}

/// The MIG an instance was made by (its `created-by` metadata), `None` for one inserted
/// directly.
fn created_by(instance: &Value) -> Option<&str> {
    instance["metadata"]["items"]
        .as_array()?
        .iter()
        .find(|i| i["key"] == "created-by")
        .and_then(|i| i["value"].as_str())
}

fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Compute Engine resources per slice incarnation owner: by `tpu-operator-uid`, the instances
/// inserted directly and the MIGs (a MIG carries no labels: its instance template's); the MIG
/// members are the MIG's business, counted with it.
fn compute_by_uid(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
    let templates: BTreeMap<String, Value> = gcp
        .instance_templates()
        .into_iter()
        .map(|t| (short(t["name"].as_str().unwrap_or("")).to_owned(), t))
        .collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in gcp.instances() {
        if created_by(&i).is_some() {
            continue;
        }
        if let Some(uid) = label(&i, UID_LABEL) {
            let name = format!("instance {}", i["name"].as_str().unwrap_or(""));
            out.entry(uid.to_owned()).or_default().push(name);
        }
    }
    for g in gcp.instance_group_managers() {
        let template = short(g["instanceTemplate"].as_str().unwrap_or(""));
        let uid = templates
            .get(template)
            .and_then(|t| t["properties"]["labels"][UID_LABEL].as_str());
        let name = format!("MIG {}", g["name"].as_str().unwrap_or(""));
        // A MIG whose template is gone (or unlabelled) is still one resource: keyed by itself.
        let key = uid.map_or_else(|| format!("template {template}"), str::to_owned);
        out.entry(key).or_default().push(name);
    }
    out
}

/// Resize requests per MIG (`instanceGroupManagerResizeRequests` live under their MIG).
fn resize_requests_by_group(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in gcp.resize_requests() {
        let name = r["name"].as_str().unwrap_or("").to_owned();
        // `selfLink` is `.../instanceGroupManagers/<mig>/resizeRequests/<name>`.
        let link = r["selfLink"].as_str().unwrap_or("");
        let group = link
            .split("/instanceGroupManagers/")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("?")
            .to_owned();
        out.entry(group).or_default().push(name);
    }
    out
}

fn label<'a>(r: &'a Value, key: &str) -> Option<&'a str> {
    r["labels"][key].as_str()
}

fn state(r: &Value) -> &str {
    r["state"].as_str().unwrap_or("")
}

const TERMINAL_BATCH: [&str; 3] = ["SUCCEEDED", "FAILED", "CANCELLED"];
const TERMINAL_JOB: [&str; 4] = [
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
];

/// Two live resources for one object (TPU nodes by UID; batches and jobs by UID and attempt,
/// counting only the ones still running).
pub fn live_duplicates(gcp: &gcp_emulator::Emulator) -> Violations {
    live_duplicates_of(gcp, true)
}

/// [`live_duplicates`], leaving Vertex jobs out unless `with_jobs` (under lost create replies and
/// lagging lists they exist for a while by design, until the operator sees and cancels them).
pub fn live_duplicates_of(gcp: &gcp_emulator::Emulator, with_jobs: bool) -> Violations {
    let mut v = Violations::default();
    let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in gcp.nodes() {
        if let Some(uid) = label(&n, UID_LABEL) {
            nodes
                .entry(uid.to_owned())
                .or_default()
                .push(n["name"].as_str().unwrap_or("").to_owned());
        }
    }
    let mut queued: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in gcp.queued_resources() {
        let uid = q["tpu"]["nodeSpec"][0]["node"]["labels"][UID_LABEL]
            .as_str()
            .map(str::to_owned);
        if let Some(uid) = uid {
            queued
                .entry(uid)
                .or_default()
                .push(q["name"].as_str().unwrap_or("").to_owned());
        }
    }
    let mut batches: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in gcp.batches() {
        if TERMINAL_BATCH.contains(&state(&b)) {
            continue;
        }
        if let Some(uid) = label(&b, UID_LABEL) {
            batches
                .entry(uid.to_owned())
                .or_default()
                .push(b["name"].as_str().unwrap_or("").to_owned());
        }
    }
    let mut jobs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for j in gcp.custom_jobs().into_iter().filter(|_| with_jobs) {
        if TERMINAL_JOB.contains(&state(&j)) {
            continue;
        }
        if let Some(uid) = label(&j, UID_LABEL) {
            let attempt = label(&j, ATTEMPT_LABEL).unwrap_or("0");
            jobs.entry(format!("{uid} attempt {attempt}"))
                .or_default()
                .push(j["name"].as_str().unwrap_or("").to_owned());
        }
    }
    for (what, map) in [
        ("TPU nodes", nodes),
        ("queued resources", queued),
        ("running Dataproc batches", batches),
        ("running Vertex jobs", jobs),
        (
            "Compute Engine slices (instances inserted directly + MIGs)",
            compute_by_uid(gcp),
        ),
        ("Compute Engine resize requests", resize_requests_by_group(gcp)),
    ] {
        for (uid, names) in map {
            if names.len() > 1 {
                v.push(format!("{} {what} for uid {uid}: {names:?}", names.len()));
            }
        }
    }
    v
}

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
        if label(node, UID_LABEL) == Some(uid.as_str()) && st.node_name.as_deref() != Some(n) {
            v.push(format!(
                "TpuSlice {name}: node {n} carries its UID but status names {:?}",
                st.node_name
            ));
        }
    }
    v
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

/// Converged: every slice of its own Ready, every batch and pipeline Succeeded (a pipeline's
/// training slice is the pipeline's business: it may be released once training is done).
pub fn converged(snapshot: &Snapshot, want: usize) -> bool {
    snapshot.len() >= want
        && snapshot
            .slices
            .iter()
            .filter(|s| s.owner_references().is_empty())
            .all(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
            })
        && snapshot.batches.iter().all(|b| {
            b.status
                .as_ref()
                .is_some_and(|st| st.phase == PreprocessBatchPhase::Succeeded)
        })
        && snapshot.pipelines.iter().all(|p| {
            p.status
                .as_ref()
                .is_some_and(|st| st.phase == TrainingPipelinePhase::Succeeded)
        })
}
