//! At most one live resource per object: no two live resources carry one object's
//! `tpu-operator-uid` label (per attempt for batches and jobs).

use std::collections::BTreeMap;

use super::{
    ATTEMPT_LABEL, TERMINAL_BATCH, TERMINAL_JOB, UID_LABEL, Violations, created_by, label, short,
    slice_going, slice_key, state,
};
use serde_json::Value;

/// Compute Engine resources per slice incarnation owner: by `tpu-operator-uid`, the instances
/// inserted directly and the MIGs (a MIG carries no labels: its instance template's); the MIG
/// members are the MIG's business, counted with it.
pub(super) fn compute_by_uid(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
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

/// Two live resources for one object (TPU nodes by UID; batches and jobs by UID and attempt,
/// counting only the ones still running).
pub fn live_duplicates(gcp: &gcp_emulator::Emulator) -> Violations {
    live_duplicates_of(gcp, true)
}

/// [`live_duplicates`], leaving Vertex jobs out unless `with_jobs` (under lost create replies and
/// lagging lists they exist for a while by design, until the operator sees and cancels them).
pub fn live_duplicates_of(gcp: &gcp_emulator::Emulator, with_jobs: bool) -> Violations {
    let mut v = Violations::default();
    let nodes = nodes_by_uid(gcp);
    let queued = queued_by_uid(gcp);
    let batches = running_batches_by_uid(gcp);
    let jobs = if with_jobs {
        running_jobs_by_attempt(gcp)
    } else {
        BTreeMap::new()
    };
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

/// Multislice: slices with more than one queued resource not being deleted at once (a duplicate
/// slice: the replacement of a lost slice asked for while the one it was lost in still stood, or
/// asked for twice). Each finding names the UID and the slice index.
pub fn duplicate_slices(gcp: &gcp_emulator::Emulator) -> Violations {
    let mut v = Violations::default();
    for (key, names) in queued_by_uid(gcp) {
        if key.contains(" slice ") && names.len() > 1 {
            v.push(format!(
                "duplicate slice: {} queued resources not being deleted for uid {key}: {names:?}",
                names.len()
            ));
        }
    }
    v
}

/// TPU nodes by the UID label they carry (per slice for a multislice, leaving out the nodes of
/// a lost slice being deleted).
fn nodes_by_uid(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
    let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in gcp.nodes() {
        let name = n["name"].as_str().unwrap_or("");
        if let Some(uid) = label(&n, UID_LABEL).filter(|_| !slice_going(&n)) {
            nodes
                .entry(slice_key(uid, name))
                .or_default()
                .push(name.to_owned());
        }
    }
    nodes
}

/// Queued resources by the UID label of the node they ask for (per slice for a multislice,
/// leaving out a lost slice's being deleted).
fn queued_by_uid(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
    let mut queued: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in gcp.queued_resources() {
        let name = q["name"].as_str().unwrap_or("");
        let uid = q["tpu"]["nodeSpec"][0]["node"]["labels"][UID_LABEL].as_str();
        if let Some(uid) = uid.filter(|_| !slice_going(&q)) {
            queued
                .entry(slice_key(uid, name))
                .or_default()
                .push(name.to_owned());
        }
    }
    queued
}

/// Dataproc batches not yet terminal, by UID label.
fn running_batches_by_uid(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
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
    batches
}

/// Vertex jobs not yet terminal, by UID label and attempt (each attempt owns one job).
fn running_jobs_by_attempt(gcp: &gcp_emulator::Emulator) -> BTreeMap<String, Vec<String>> {
    let mut jobs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for j in gcp.custom_jobs() {
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
    jobs
}
