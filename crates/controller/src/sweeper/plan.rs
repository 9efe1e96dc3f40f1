//! Which listed cloud resources are orphans and what to do with each. Pure: no I/O.
//!
//! A resource is **ours** only when it carries `managed-by=tpu-operator` and this cluster's
//! `tpu-operator-cluster` label (and, for a namespace-scoped operator, its namespace label); an
//! unlabelled resource, another cluster's, or one without an owner UID label is never touched. Ours
//! is an **orphan** when no TpuSlice, PreprocessBatch or TrainingPipeline has its owner UID. An
//! orphan is reported at once and, in delete mode, deleted once it has been an orphan for the grace
//! period (running Dataproc batches and Vertex jobs are cancelled first, then deleted once
//! terminal).
//!
//! Compute Engine slices (`provisioner: ComputeEngine`) are found through their instances, the
//! only Compute Engine objects listed with our labels ([`compute_resources`]). An instance is its
//! own resource, whatever its metadata says, unless it is a member of a managed instance group
//! that is provably ours. Metadata `created-by` is only a claim (a tenant writes an instance's
//! metadata through its spec): a claimed group ([`GroupClaim`]) is read, and stands for its
//! members only when its instance template carries our labels for this cluster with the member's
//! owner UID ([`resolve_claims`]); the group is then what is deleted (it would recreate a member
//! deleted alone). A member of a group that is not ours is reported and left alone; an instance
//! whose claim is false (the group does not exist or does not list it) is deleted as itself. A
//! deleted group's instance template and workload policy are named by the group itself
//! ([`release_of`]), and the sweeper releases them once the group is gone.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tpu_operator_api::naming::{labels, sanitize_label_value};

mod compute;

pub use compute::{
    GroupClaim, GroupFacts, ListedInstance, Release, claims_to_verify, compute_resources, parse_zonal,
    release_of, resolve_claims, template_of,
};

/// What kind of cloud object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceKind {
    TpuNode,
    QueuedResource,
    DataprocBatch,
    VertexCustomJob,
    /// A single-host Compute Engine slice's instance (`projects/p/zones/z/instances/i`).
    ComputeInstance,
    /// A multi-host or flex-start Compute Engine slice's managed instance group
    /// (`projects/p/zones/z/instanceGroupManagers/m`), found through its members.
    ComputeInstanceGroup,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TpuNode => "tpu.node",
            Self::QueuedResource => "tpu.queuedResource",
            Self::DataprocBatch => "dataproc.batch",
            Self::VertexCustomJob => "vertex.customJob",
            Self::ComputeInstance => "compute.instance",
            Self::ComputeInstanceGroup => "compute.instanceGroupManager",
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
    /// Reported, never acted on: a member of a managed instance group that is not provably ours
    /// (deleting it alone would only have the group recreate it), or one whose group could not
    /// be read this sweep.
    ReportOnly,
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
    let mut orphans = Vec::new();
    let mut seen = HashMap::new();
    for r in input.resources {
        let label = |k: &str| r.labels.get(k).map(String::as_str);
        if r.in_queued_resource {
            continue;
        }
        let Some(uid) = orphan_uid(&r.labels, input) else {
            continue;
        };
        let namespace = label(labels::NAMESPACE).unwrap_or_default();
        let since = input.first_seen.get(&r.name).copied().unwrap_or(input.now);
        seen.insert(r.name.clone(), since);
        let due = input.mode == Mode::Delete && input.now >= since + input.grace;
        let step = match (&r.stage, due) {
            (_, false) | (Stage::Winding | Stage::ReportOnly, true) => Step::Report,
            (Stage::Terminal, true) => Step::Delete,
            (Stage::Active { cancel_operation }, true) => match r.kind {
                ResourceKind::TpuNode
                | ResourceKind::QueuedResource
                | ResourceKind::ComputeInstance
                | ResourceKind::ComputeInstanceGroup => Step::Delete,
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

/// The owner UID label of a resource carrying our labels for this cluster (`managed-by` and the
/// cluster label, both as the operator writes them); `None` for anything else, which is never
/// touched. `cluster` is the cluster id as given (sanitized here like the label).
pub fn owner_uid<'a>(l: &'a BTreeMap<String, String>, cluster: &str) -> Option<&'a str> {
    let label = |k: &str| l.get(k).map(String::as_str);
    if label(labels::MANAGED_BY) != Some(labels::MANAGED_BY_VALUE)
        || label(labels::CLUSTER) != Some(sanitize_label_value(cluster).as_str())
    {
        return None;
    }
    label(labels::UID).filter(|u| !u.is_empty())
}

/// The owner UID of a resource that is ours, in this operator's namespace (when scoped), and
/// whose owner is gone.
fn orphan_uid<'a>(l: &'a BTreeMap<String, String>, input: &Input<'_>) -> Option<&'a str> {
    let uid = owner_uid(l, input.cluster_id)?;
    let namespace = l.get(labels::NAMESPACE).map(String::as_str).unwrap_or_default();
    let other_namespace = input
        .namespace
        .is_some_and(|ns| sanitize_label_value(ns) != namespace);
    (!other_namespace && !input.live_uids.contains(uid)).then_some(uid)
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

    fn instance(name: &str, created_by: Option<&str>, labels: &[(&str, &str)]) -> ListedInstance {
        ListedInstance {
            project: "p".into(),
            zone: "us-east5-b".into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            created_by: created_by.map(str::to_owned),
            stopping: false,
        }
    }

    fn input<'a>(
        resources: &'a [CloudResource],
        live: &'a HashSet<String>,
        first_seen: &'a HashMap<String, DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Input<'a> {
        Input {
            resources,
            live_uids: live,
            cluster_id: "c1",
            namespace: None,
            first_seen,
            now,
            grace: chrono::Duration::minutes(15),
            mode: Mode::Delete,
        }
    }

    const GROUP: &str = "projects/123456789/zones/us-east5-b/instanceGroupManagers/team-a-x-1a2b";
    const OURS: &str = "projects/p/zones/us-east5-b/instanceGroupManagers/team-a-x-1a2b";

    fn read(template_labels: Option<&[(&'static str, String)]>, members: &[&str]) -> GroupFacts {
        GroupFacts::Read {
            template_labels: template_labels
                .map(|l| l.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()),
            members: members.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn summary(resources: &[CloudResource]) -> Vec<(ResourceKind, &str, &Stage)> {
        resources
            .iter()
            .map(|r| (r.kind, r.name.as_str(), &r.stage))
            .collect()
    }

    #[test]
    fn an_instance_is_itself_whatever_its_created_by_says_unless_it_claims_a_group_in_its_zone() {
        let l = ours("dead");
        let mut stopping = instance("single", None, &with(&l));
        stopping.stopping = true;
        let listed = vec![
            instance("team-a-y-9f9f", None, &with(&l)),
            instance("team-a-x-1a2b-abcd", Some(GROUP), &with(&l)),
            instance("team-a-x-1a2b-efgh", Some(GROUP), &with(&l)),
            stopping,
            // created-by naming a group in another zone, a name that is not the group's base
            // name plus a suffix, a creator that is not a group: each is its own resource
            // (it carries our labels), never hidden.
            instance(
                "team-a-x-1a2b-ijkl",
                Some("projects/1/zones/us-east5-a/instanceGroupManagers/team-a-x-1a2b"),
                &with(&l),
            ),
            instance("other-vm", Some(GROUP), &with(&l)),
            instance(
                "gke-node",
                Some("projects/1/zones/us-east5-b/instanceGroups/gke"),
                &with(&l),
            ),
        ];
        let (resources, claims) = compute_resources(listed);
        let instance_name = |n: &str| format!("projects/p/zones/us-east5-b/instances/{n}");
        let names: Vec<_> = resources
            .iter()
            .map(|r| (r.name.clone(), r.stage.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                (instance_name("team-a-y-9f9f"), ACTIVE),
                (instance_name("single"), Stage::Winding),
                (instance_name("team-a-x-1a2b-ijkl"), ACTIVE),
                (instance_name("other-vm"), ACTIVE),
                (instance_name("gke-node"), ACTIVE),
            ]
        );
        assert!(resources.iter().all(|r| r.kind == ResourceKind::ComputeInstance));
        assert_eq!(claims.len(), 1, "{claims:?}");
        assert_eq!(claims[0].group, OURS);
        assert_eq!(claims[0].members.len(), 2);
    }

    /// A tenant's instance whose metadata `created-by` names someone else's
    /// group (unlabelled template) never makes that group ours; the instance, not a member of
    /// it, is deleted as itself.
    #[test]
    fn a_claimed_group_is_ours_only_when_its_template_carries_our_labels_with_the_owner_uid() {
        let dead = ours("dead");
        let tenant = instance("team-a-x-1a2b-fake", Some(GROUP), &with(&dead));
        let claims = || compute_resources(vec![tenant.clone()]).1;
        let live = HashSet::from(["alive".to_string()]);
        let first_seen = HashMap::from([
            (OURS.to_string(), t(0)),
            (
                "projects/p/zones/us-east5-b/instances/team-a-x-1a2b-fake".to_string(),
                t(0),
            ),
        ]);
        let base = input(&[], &live, &first_seen, t(60));
        assert_eq!(claims_to_verify(&claims(), &base), vec![OURS.to_string()]);
        let steps = |facts: Option<GroupFacts>| {
            let facts: HashMap<_, _> = facts.into_iter().map(|f| (OURS.to_string(), f)).collect();
            let resources = resolve_claims(claims(), &facts, "c1");
            plan(&Input {
                resources: &resources,
                ..input(&[], &live, &first_seen, t(60))
            })
            .0
            .into_iter()
            .map(|o| (o.kind, o.step))
            .collect::<Vec<_>>()
        };
        let mut other_cluster = ours("dead");
        other_cluster[1].1 = "c2".into();
        let unlabelled = [("team", "ml".to_string())];
        let alive = ours("alive");
        let instance_deleted = vec![(ResourceKind::ComputeInstance, Step::Delete)];
        let reported = vec![(ResourceKind::ComputeInstance, Step::Report)];
        // The group exists without our labels (or with another cluster's, or another owner's)
        // and does not list the instance: the claim is false, the instance is deleted as itself.
        for labels in [
            None,
            Some(&unlabelled[..]),
            Some(&other_cluster[..]),
            Some(&alive[..]),
        ] {
            let facts = read(labels, &["victim-abcd"]);
            assert_eq!(steps(Some(facts)), instance_deleted, "{labels:?}");
        }
        // No such group: the instance is its own.
        assert_eq!(steps(Some(GroupFacts::Gone)), instance_deleted);
        // A real member of a group that is not ours, a group that could not be read, or one
        // not read at all: reported, never acted on.
        assert_eq!(steps(Some(read(None, &["team-a-x-1a2b-fake"]))), reported);
        assert_eq!(steps(Some(GroupFacts::Unreadable)), reported);
        assert_eq!(steps(None), reported);
        // Only a template with our labels and the member's owner UID makes the group stand for
        // it: the group is deleted, never the member alone.
        assert_eq!(
            steps(Some(read(Some(&dead), &["team-a-x-1a2b-fake"]))),
            vec![(ResourceKind::ComputeInstanceGroup, Step::Delete)]
        );
    }

    #[test]
    fn a_live_slices_group_is_never_read_and_a_proven_group_is_judged_by_its_template() {
        let alive = ours("alive");
        let member = instance("team-a-x-1a2b-abcd", Some(GROUP), &with(&alive));
        let claims = compute_resources(vec![member.clone()]).1;
        let live = HashSet::from(["alive".to_string()]);
        let first_seen = HashMap::new();
        let base = input(&[], &live, &first_seen, t(0));
        assert!(claims_to_verify(&claims, &base).is_empty());
        // A lost instance (dead owner) claims a live slice's group: the group is read and is
        // ours with a live owner, so it is no orphan; the claimant stands alone.
        let dead = ours("dead");
        let lost = instance("team-a-x-1a2b-efgh", Some(GROUP), &with(&dead));
        let (_, claims) = compute_resources(vec![member, lost]);
        let facts = HashMap::from([(OURS.to_string(), read(Some(&alive), &["team-a-x-1a2b-abcd"]))]);
        let resources = resolve_claims(claims, &facts, "c1");
        assert_eq!(
            summary(&resources),
            vec![
                (ResourceKind::ComputeInstanceGroup, OURS, &ACTIVE),
                (
                    ResourceKind::ComputeInstance,
                    "projects/p/zones/us-east5-b/instances/team-a-x-1a2b-efgh",
                    &ACTIVE
                ),
            ]
        );
        assert_eq!(resources[0].labels["tpu-operator-uid"], "alive");
        let (orphans, _) = plan(&Input {
            resources: &resources,
            ..base
        });
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].kind, ResourceKind::ComputeInstance);
    }

    #[test]
    fn an_orphaned_group_releases_its_regional_template_only_when_its_description_names_the_owner() {
        let group = "projects/p/zones/us-east5-b/instanceGroupManagers/team-a-x-1a2b-r1";
        let ours = Some("tpu-operator TpuSlice team-a/x (uid dead)");
        let template = Some(
            "https://compute.googleapis.com/compute/v1/projects/p/regions/us-east5/instanceTemplates/team-a-x-1a2b",
        );
        let release = release_of(group, ours, template, "dead").expect("release");
        assert_eq!(
            release,
            Release {
                project: "p".into(),
                zone: "us-east5-b".into(),
                shared_id: "team-a-x-1a2b".into(),
            }
        );
        assert_eq!(Release::from_line(&release.to_line()), Some(release));
        let relative = Some("projects/p/regions/us-east5/instanceTemplates/t");
        assert!(release_of(group, ours, relative, "dead").is_some());

        // Another owner, no description, a hand-made description, a global template, another
        // region's template, no template, not a group name: nothing is released.
        let refused = [
            release_of(
                group,
                Some("tpu-operator TpuSlice team-a/x (uid other)"),
                template,
                "dead",
            ),
            release_of(group, None, template, "dead"),
            release_of(group, Some("my group (uid dead)"), template, "dead"),
            release_of(group, ours, Some("projects/p/global/instanceTemplates/t"), "dead"),
            release_of(
                group,
                ours,
                Some("projects/p/regions/europe-west4/instanceTemplates/t"),
                "dead",
            ),
            release_of(group, ours, None, "dead"),
            release_of("projects/p/zones/us-east5-b/instances/vm", ours, template, "dead"),
            release_of(group, Some("tpu-operator TpuSlice team-a/x (uid )"), template, ""),
        ];
        assert!(refused.iter().all(Option::is_none), "{refused:?}");
        assert_eq!(Release::from_line("garbage"), None);
        assert_eq!(Release::from_line("projects/p/zones/z/a/b"), None);
    }
}
