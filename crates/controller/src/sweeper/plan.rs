//! Which listed cloud resources are orphans and what to do with each. Pure: no I/O.
//!
//! A resource is **ours** only when it carries `managed-by=tpu-operator` and this cluster's
//! `tpu-operator-cluster` label (and, for a namespace-scoped operator, its namespace label); an
//! unlabelled resource, another cluster's, or one without an owner UID label is never touched. Ours
//! is an **orphan** when no TpuSlice, PreprocessBatch or TrainingPipeline has its owner UID. An
//! orphan is reported at once and, in delete mode, deleted once it has been an orphan for the grace
//! period (running Dataproc batches and Vertex jobs are cancelled first, then deleted once
//! terminal).

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tpu_operator_api::naming::{labels, sanitize_label_value};

/// What kind of cloud object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceKind {
    TpuNode,
    QueuedResource,
    DataprocBatch,
    VertexCustomJob,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TpuNode => "tpu.node",
            Self::QueuedResource => "tpu.queuedResource",
            Self::DataprocBatch => "dataproc.batch",
            Self::VertexCustomJob => "vertex.customJob",
        }
    }
}

/// Where a listed resource is in its life, as far as deleting it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Running (or any state a delete is accepted in, for TPU objects). For a Dataproc batch, the
    /// operation that cancels it.
    Active { cancel_operation: Option<String> },
    /// Being deleted or cancelled already: wait.
    Winding,
    /// Finished (Dataproc / Vertex): can be deleted.
    Terminal,
}

/// One listed cloud resource.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudResource {
    pub kind: ResourceKind,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub stage: Stage,
    /// A node that belongs to a queued resource (deleted with it, never on its own).
    pub in_queued_resource: bool,
}

/// What to do with an orphan now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Report only (report mode, grace period not over, or waiting for a cancel / delete).
    Report,
    Delete,
    /// Cancel running work first (the Dataproc operation name, or the Vertex job).
    Cancel(Option<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Orphan {
    pub kind: ResourceKind,
    pub name: String,
    pub namespace: String,
    pub owner_name: String,
    pub owner_uid: String,
    /// When this sweeper first saw it orphaned.
    pub since: DateTime<Utc>,
    pub step: Step,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Do not sweep.
    Off,
    /// Report orphans (metric, log, events, summary ConfigMap).
    #[default]
    Report,
    /// Report, and delete them after the grace period.
    Delete,
}

/// Everything plan needs.
pub struct Input<'a> {
    pub resources: &'a [CloudResource],
    /// UIDs of every TpuSlice, PreprocessBatch and TrainingPipeline that exists.
    pub live_uids: &'a HashSet<String>,
    pub cluster_id: &'a str,
    /// Only this namespace's resources (a namespace-scoped operator), else all.
    pub namespace: Option<&'a str>,
    /// When each orphan was first seen (by resource name), from earlier sweeps.
    pub first_seen: &'a HashMap<String, DateTime<Utc>>,
    pub now: DateTime<Utc>,
    pub grace: chrono::Duration,
    pub mode: Mode,
}

/// The orphans, each with its step, and the `first_seen` map to keep for the next sweep (orphans
/// no longer listed are forgotten).
pub fn plan(input: &Input<'_>) -> (Vec<Orphan>, HashMap<String, DateTime<Utc>>) {
    let cluster = sanitize_label_value(input.cluster_id);
    let mut orphans = Vec::new();
    let mut seen = HashMap::new();
    for r in input.resources {
        let label = |k: &str| r.labels.get(k).map(String::as_str);
        if label(labels::MANAGED_BY) != Some(labels::MANAGED_BY_VALUE)
            || label(labels::CLUSTER) != Some(cluster.as_str())
            || r.in_queued_resource
        {
            continue;
        }
        let namespace = label(labels::NAMESPACE).unwrap_or_default();
        if input
            .namespace
            .is_some_and(|ns| sanitize_label_value(ns) != namespace)
        {
            continue;
        }
        let Some(uid) = label(labels::UID).filter(|u| !u.is_empty()) else {
            continue;
        };
        if input.live_uids.contains(uid) {
            continue;
        }
        let since = input.first_seen.get(&r.name).copied().unwrap_or(input.now);
        seen.insert(r.name.clone(), since);
        let due = input.mode == Mode::Delete && input.now >= since + input.grace;
        let step = match (&r.stage, due) {
            (_, false) | (Stage::Winding, true) => Step::Report,
            (Stage::Terminal, true) => Step::Delete,
            (Stage::Active { cancel_operation }, true) => match r.kind {
                ResourceKind::TpuNode | ResourceKind::QueuedResource => Step::Delete,
                ResourceKind::DataprocBatch => Step::Cancel(cancel_operation.clone()),
                ResourceKind::VertexCustomJob => Step::Cancel(None),
            },
        };
        orphans.push(Orphan {
            kind: r.kind,
            name: r.name.clone(),
            namespace: namespace.to_owned(),
            owner_name: label(labels::NAME).unwrap_or_default().to_owned(),
            owner_uid: uid.to_owned(),
            since,
            step,
        });
    }
    (orphans, seen)
}

/// The UIDs a live object's cloud resources carry (sanitized like the labels).
pub fn uid_label(uid: &str) -> String {
    sanitize_label_value(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + min * 60, 0).unwrap()
    }

    fn res(kind: ResourceKind, name: &str, labels: &[(&str, &str)], stage: Stage) -> CloudResource {
        CloudResource {
            kind,
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stage,
            in_queued_resource: false,
        }
    }

    fn ours(uid: &str) -> Vec<(&'static str, String)> {
        vec![
            ("managed-by", "tpu-operator".into()),
            ("tpu-operator-cluster", "c1".into()),
            ("tpu-operator-namespace", "team-a".into()),
            ("tpu-operator-name", "x".into()),
            ("tpu-operator-uid", uid.into()),
        ]
    }

    fn with<'a>(labels: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        labels.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    const ACTIVE: Stage = Stage::Active {
        cancel_operation: None,
    };

    #[test]
    fn only_our_labelled_resources_without_a_live_owner_are_orphans() {
        use ResourceKind::*;
        let mut other_cluster = ours("dead");
        other_cluster[1].1 = "c2".into();
        let mut no_uid = ours("dead");
        no_uid.pop();
        let mut qr_node = res(TpuNode, "n-of-qr", &with(&ours("dead")), ACTIVE);
        qr_node.in_queued_resource = true;
        let resources = vec![
            res(TpuNode, "live", &with(&ours("alive")), ACTIVE),
            res(TpuNode, "orphan", &with(&ours("dead")), ACTIVE),
            res(TpuNode, "unlabelled", &[("team", "ml")], ACTIVE),
            res(TpuNode, "other-cluster", &with(&other_cluster), ACTIVE),
            res(TpuNode, "no-uid", &with(&no_uid), ACTIVE),
            qr_node,
            res(QueuedResource, "qr", &with(&ours("dead")), ACTIVE),
        ];
        let live = HashSet::from(["alive".to_string()]);
        let first_seen = HashMap::new();
        let input = Input {
            resources: &resources,
            live_uids: &live,
            cluster_id: "c1",
            namespace: None,
            first_seen: &first_seen,
            now: t(0),
            grace: chrono::Duration::minutes(15),
            mode: Mode::Delete,
        };
        let (orphans, seen) = plan(&input);
        let names: Vec<_> = orphans.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["orphan", "qr"]);
        assert!(
            orphans.iter().all(|o| o.step == Step::Report),
            "grace period: {orphans:?}"
        );
        assert_eq!(seen.len(), 2);
        assert_eq!(
            (orphans[0].namespace.as_str(), orphans[0].owner_uid.as_str()),
            ("team-a", "dead")
        );

        // A namespace-scoped operator only looks at its namespace.
        let (scoped, _) = plan(&Input {
            namespace: Some("team-b"),
            ..input
        });
        assert!(scoped.is_empty());
    }

    #[test]
    fn delete_mode_acts_after_the_grace_period_cancelling_running_work_first() {
        use ResourceKind::*;
        let l = ours("dead");
        let resources = vec![
            res(TpuNode, "node", &with(&l), ACTIVE),
            res(TpuNode, "deleting", &with(&l), Stage::Winding),
            res(
                DataprocBatch,
                "batch",
                &with(&l),
                Stage::Active {
                    cancel_operation: Some("op".into()),
                },
            ),
            res(DataprocBatch, "done-batch", &with(&l), Stage::Terminal),
            res(VertexCustomJob, "job", &with(&l), ACTIVE),
            res(VertexCustomJob, "cancelling", &with(&l), Stage::Winding),
        ];
        let live = HashSet::new();
        let first_seen: HashMap<_, _> = resources.iter().map(|r| (r.name.clone(), t(0))).collect();
        let at = |now, mode| {
            let input = Input {
                resources: &resources,
                live_uids: &live,
                cluster_id: "c1",
                namespace: None,
                first_seen: &first_seen,
                now,
                grace: chrono::Duration::minutes(15),
                mode,
            };
            plan(&input)
                .0
                .into_iter()
                .map(|o| (o.name, o.step))
                .collect::<Vec<_>>()
        };
        assert!(at(t(14), Mode::Delete).iter().all(|(_, s)| *s == Step::Report));
        assert!(at(t(60), Mode::Report).iter().all(|(_, s)| *s == Step::Report));
        assert_eq!(
            at(t(15), Mode::Delete),
            vec![
                ("node".to_string(), Step::Delete),
                ("deleting".to_string(), Step::Report),
                ("batch".to_string(), Step::Cancel(Some("op".into()))),
                ("done-batch".to_string(), Step::Delete),
                ("job".to_string(), Step::Cancel(None)),
                ("cancelling".to_string(), Step::Report),
            ]
        );
    }
}
