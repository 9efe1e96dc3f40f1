//! At-most-once creates, from the call log: what the operator asked for by the ids it chose.

use std::collections::{BTreeMap, BTreeSet};

use super::{Expected, Violations, short, slice_index};

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

/// A multislice's TPU writes to one slice (queued resources and nodes), from the call log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceWrites {
    /// Ids of the successful `queuedResources.create` and `nodes.create` calls (a create
    /// replayed after a lost reply is refused as already there: one id is one create).
    pub creates: BTreeSet<String>,
    /// Successful `queuedResources.delete` and `nodes.delete` calls.
    pub deletes: usize,
}

/// The TPU writes of the multislice whose ids start with `prefix` (`<id>` of `<id>-s<k>`), by
/// slice index, from the call log's call `since` on (a position in [`gcp_emulator::Emulator::calls`]).
pub fn slice_writes(gcp: &gcp_emulator::Emulator, since: usize, prefix: &str) -> BTreeMap<u32, SliceWrites> {
    let mut out: BTreeMap<u32, SliceWrites> = BTreeMap::new();
    for call in gcp.calls().iter().skip(since) {
        if call.service != "tpu" || call.status >= 300 {
            continue;
        }
        let (id, create) = match call.method.as_str() {
            "queuedResources.create" => (query_param(&call.query, "queuedResourceId"), true),
            "nodes.create" => (query_param(&call.query, "nodeId"), true),
            "queuedResources.delete" | "nodes.delete" => (Some(short(&call.path).to_owned()), false),
            _ => continue,
        };
        let Some(id) = id.filter(|id| id.starts_with(prefix)) else {
            continue;
        };
        let Some(k) = slice_index(&id) else { continue };
        let w = out.entry(k).or_default();
        if create {
            w.creates.insert(id);
        } else {
            w.deletes += 1;
        }
    }
    out
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
