//! The cloud resources that train, as the emulator lists them, and the faults that preempt or
//! fail them.

use std::collections::BTreeSet;

use gcp_emulator::{Emulator, Fault};
use serde_json::Value;

/// A cloud resource that trains, as the emulator lists it.
#[derive(Debug)]
pub(super) struct Trainer {
    pub(super) kind: TrainerKind,
    pub(super) name: String,
    pub(super) running: bool,
    pub(super) spot: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TrainerKind {
    Node,
    /// A node a queued resource made: it runs the workload, its queued resource holds the capacity.
    QueuedNode,
    QueuedResource,
    Instance,
    Job,
}

impl Trainer {
    /// A TPU VM node (made directly or by a queued resource): what Google announces maintenance of.
    pub(super) fn is_node(&self) -> bool {
        matches!(self.kind, TrainerKind::Node | TrainerKind::QueuedNode)
    }

    /// The fault that reclaims its Spot capacity (a queued resource's node: through the queued
    /// resource).
    pub(super) fn preemption(&self) -> Option<Fault> {
        let name = self.name.clone();
        Some(match self.kind {
            TrainerKind::Node => Fault::PreemptNode { name },
            TrainerKind::QueuedNode => return None,
            TrainerKind::QueuedResource => Fault::PreemptQueuedResource { name },
            TrainerKind::Instance => Fault::PreemptInstance { name },
            TrainerKind::Job => Fault::PreemptJob { name },
        })
    }

    /// The fault that fails the training it runs (a queued resource's node and an instance's
    /// workload are failed through the node that runs it, so only nodes and jobs have one).
    pub(super) fn failure(&self) -> Option<Fault> {
        match self.kind {
            TrainerKind::Job => Some(Fault::FailJob {
                name: self.name.clone(),
                message: Some("rehearsal: the training script failed (--inject fail:train)".into()),
            }),
            TrainerKind::Node | TrainerKind::QueuedNode => Some(Fault::FailTpuWorkload {
                node: self.name.clone(),
                exit_code: Some(1),
                message: None,
            }),
            TrainerKind::QueuedResource | TrainerKind::Instance => None,
        }
    }
}

pub(super) fn trainers(gcp: &Emulator) -> Vec<Trainer> {
    let spot_node =
        |n: &Value| n["schedulingConfig"]["spot"] == true || n["schedulingConfig"]["preemptible"] == true;
    let in_queue: BTreeSet<String> = gcp
        .queued_resources()
        .iter()
        .flat_map(|q| q["tpu"]["nodeSpec"].as_array().cloned().unwrap_or_default())
        .filter_map(|spec| {
            Some(format!(
                "{}/nodes/{}",
                spec["parent"].as_str()?,
                spec["nodeId"].as_str()?
            ))
        })
        .collect();
    let (nodes, queued_nodes): (Vec<Value>, Vec<Value>) = gcp
        .nodes()
        .into_iter()
        .partition(|n| !in_queue.contains(str_of(n, "name")));
    let nodes = nodes.into_iter().map(|n| Trainer {
        kind: TrainerKind::Node,
        name: str_of(&n, "name").to_owned(),
        running: n["state"] == "READY",
        spot: spot_node(&n),
    });
    // A queued resource's node runs the workload (failed through it), the queued resource holds
    // the capacity (preempted through it).
    let workers = queued_nodes.into_iter().map(|n| Trainer {
        kind: TrainerKind::QueuedNode,
        name: str_of(&n, "name").to_owned(),
        running: n["state"] == "READY",
        spot: false,
    });
    let queued = gcp.queued_resources().into_iter().map(|q| Trainer {
        kind: TrainerKind::QueuedResource,
        name: str_of(&q, "name").to_owned(),
        running: q["state"]["state"] == "ACTIVE",
        spot: q.get("spot").is_some() || q["tpu"]["nodeSpec"][0]["node"]["schedulingConfig"]["spot"] == true,
    });
    let instances = gcp.instances().into_iter().map(|i| Trainer {
        kind: TrainerKind::Instance,
        name: str_of(&i, "name").to_owned(),
        running: i["status"] == "RUNNING",
        spot: i["scheduling"]["provisioningModel"] == "SPOT",
    });
    let jobs = gcp.custom_jobs().into_iter().map(|j| Trainer {
        kind: TrainerKind::Job,
        name: str_of(&j, "name").to_owned(),
        running: j["state"] == "JOB_STATE_RUNNING",
        spot: j["jobSpec"]["scheduling"]["strategy"] == "SPOT",
    });
    nodes
        .chain(workers)
        .chain(queued)
        .chain(instances)
        .chain(jobs)
        .collect()
}

pub(super) fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_default()
}
