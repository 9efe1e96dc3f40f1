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
//! only Compute Engine objects that carry our labels ([`compute_resources`]): a plain instance is
//! its own resource; a member of a managed instance group (metadata `created-by` naming the
//! group) stands for the group, which is what is deleted (the group would recreate a member
//! deleted alone). A deleted group's instance template and workload policy carry no labels;
//! [`release_of`] names them from the group itself, and the sweeper releases them once the
//! group is gone.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tpu_operator_api::naming::{labels, sanitize_label_value};
use tpu_operator_gcp::compute::convert::{base_instance_name, region_of};

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

/// The UIDs a live object's cloud resources carry (sanitized like the labels).
pub fn uid_label(uid: &str) -> String {
    sanitize_label_value(uid)
}

/// One Compute Engine instance as listed in a zone, reduced to what the sweep decides on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedInstance {
    pub project: String,
    pub zone: String,
    /// Short name.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Metadata `created-by`: `projects/{number-or-id}/zones/{z}/instanceGroupManagers/{m}` for
    /// a managed instance group's member.
    pub created_by: Option<String>,
    /// Stopping, suspending or being deprovisioned: a delete is already on its way, or the
    /// instance is being preempted.
    pub stopping: bool,
}

/// `projects/{p}/zones/{z}/{collection}/{name}` → (p, z, name).
pub fn parse_zonal<'a>(name: &'a str, collection: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let mut parts = name.split('/');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("projects"), Some(p), Some("zones"), Some(z), Some(c), Some(n), None)
            if c == collection && !p.is_empty() && !z.is_empty() && !n.is_empty() =>
        {
            Some((p, z, n))
        }
        _ => None,
    }
}

/// The Compute Engine resources a zone's listed instances stand for: a plain instance is
/// itself; every member of a managed instance group stands for the group, listed once (with
/// the first member's labels, which all members share: they come from the group's template).
/// A member whose `created-by` names a group in another zone, or whose name is not the group's
/// base instance name plus a suffix, is not what the operator makes and is left out: deleting
/// it alone would only have the group recreate it, and the group it names is not provably ours.
pub fn compute_resources(instances: Vec<ListedInstance>) -> Vec<CloudResource> {
    let mut out: Vec<CloudResource> = Vec::new();
    for i in instances {
        let active = Stage::Active {
            cancel_operation: None,
        };
        let Some(created_by) = i.created_by.as_deref() else {
            out.push(CloudResource {
                kind: ResourceKind::ComputeInstance,
                name: format!("projects/{}/zones/{}/instances/{}", i.project, i.zone, i.name),
                labels: i.labels,
                stage: if i.stopping { Stage::Winding } else { active },
                in_queued_resource: false,
            });
            continue;
        };
        let Some((_, zone, group)) = parse_zonal(created_by, "instanceGroupManagers") else {
            // Another creator (not a group): not one of ours.
            continue;
        };
        let member = i
            .name
            .strip_prefix(&base_instance_name(group))
            .is_some_and(|rest| rest.starts_with('-'));
        if zone != i.zone || !member {
            continue;
        }
        let name = format!(
            "projects/{}/zones/{}/instanceGroupManagers/{group}",
            i.project, i.zone
        );
        if out.iter().any(|r| r.name == name) {
            continue;
        }
        // A group is always deletable: a repeated delete joins the one under way, and its
        // members stopping may as well be a preemption.
        out.push(CloudResource {
            kind: ResourceKind::ComputeInstanceGroup,
            name,
            labels: i.labels,
            stage: active,
            in_queued_resource: false,
        });
    }
    out
}

/// An orphaned group's instance template and workload policy, to delete once the group is gone
/// (`ComputeSlices::release`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub project: String,
    /// The group's zone (the template and policy live in its region).
    pub zone: String,
    /// The template's (and policy's) name: the slice's first id.
    pub shared_id: String,
}

impl Release {
    /// As the summary ConfigMap keeps it: `projects/<p>/zones/<z>/<shared id>`.
    pub fn to_line(&self) -> String {
        format!("projects/{}/zones/{}/{}", self.project, self.zone, self.shared_id)
    }

    pub fn from_line(line: &str) -> Option<Self> {
        let (project, zone, shared_id) = parse_zonal_any(line)?;
        Some(Self {
            project: project.to_owned(),
            zone: zone.to_owned(),
            shared_id: shared_id.to_owned(),
        })
    }
}

fn parse_zonal_any(line: &str) -> Option<(&str, &str, &str)> {
    let rest = line.strip_prefix("projects/")?;
    let (project, rest) = rest.split_once("/zones/")?;
    let (zone, id) = rest.split_once('/')?;
    (!project.is_empty() && !zone.is_empty() && !id.is_empty() && !id.contains('/'))
        .then_some((project, zone, id))
}

/// What to release after deleting the orphaned group `group` (its full name), read from the
/// group: its template, when the group's description names the orphan's owner UID (templates,
/// policies and groups carry no labels; the description `tpu-operator TpuSlice <ns>/<name>
/// (uid <uid>)` is the only mark the operator leaves on them) and the template is a regional
/// one in the group's region, as the operator makes them. `None`: release nothing.
pub fn release_of(
    group: &str,
    description: Option<&str>,
    instance_template: Option<&str>,
    owner_uid: &str,
) -> Option<Release> {
    let (project, zone, _) = parse_zonal(group, "instanceGroupManagers")?;
    let ours = description.is_some_and(|d| {
        d.starts_with("tpu-operator TpuSlice ")
            && !owner_uid.is_empty()
            && d.ends_with(&format!("(uid {owner_uid})"))
    });
    if !ours {
        return None;
    }
    let mut parts = instance_template?.rsplit('/');
    let (template, collection, region) = (parts.next()?, parts.next()?, parts.next()?);
    let regions = parts.next()?;
    (collection == "instanceTemplates"
        && regions == "regions"
        && region == region_of(zone)
        && !template.is_empty())
    .then(|| Release {
        project: project.to_owned(),
        zone: zone.to_owned(),
        shared_id: template.to_owned(),
    })
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

    #[test]
    fn a_plain_instance_is_itself_and_a_group_member_stands_for_its_group_once() {
        let l = ours("dead");
        let group = "projects/123456789/zones/us-east5-b/instanceGroupManagers/team-a-x-1a2b";
        let mut stopping = instance("single", None, &with(&l));
        stopping.stopping = true;
        let listed = vec![
            instance("team-a-y-9f9f", None, &with(&l)),
            instance("team-a-x-1a2b-abcd", Some(group), &with(&l)),
            instance("team-a-x-1a2b-efgh", Some(group), &with(&l)),
            stopping,
            // created-by naming a group in another zone, a name that is not the group's base
            // name plus a suffix, and a creator that is not a group: none is ours to touch.
            instance(
                "team-a-x-1a2b-ijkl",
                Some("projects/1/zones/us-east5-a/instanceGroupManagers/team-a-x-1a2b"),
                &with(&l),
            ),
            instance("other-vm", Some(group), &with(&l)),
            instance("team-a-x-1a2bc-zzzz", Some(group), &with(&l)),
            instance(
                "gke-node",
                Some("projects/1/zones/us-east5-b/instanceGroups/gke"),
                &with(&l),
            ),
        ];
        let got: Vec<_> = compute_resources(listed)
            .into_iter()
            .map(|r| (r.kind, r.name, r.stage))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    ResourceKind::ComputeInstance,
                    "projects/p/zones/us-east5-b/instances/team-a-y-9f9f".to_string(),
                    ACTIVE
                ),
                (
                    ResourceKind::ComputeInstanceGroup,
                    "projects/p/zones/us-east5-b/instanceGroupManagers/team-a-x-1a2b".to_string(),
                    ACTIVE
                ),
                (
                    ResourceKind::ComputeInstance,
                    "projects/p/zones/us-east5-b/instances/single".to_string(),
                    Stage::Winding
                ),
            ]
        );
    }

    #[test]
    fn compute_engine_orphans_follow_the_label_rules_and_are_deleted_after_the_grace_period() {
        let group = "projects/1/zones/us-east5-b/instanceGroupManagers/g";
        let mut other_cluster = ours("dead");
        other_cluster[1].1 = "c2".into();
        let mut no_uid = ours("dead");
        no_uid.pop();
        let listed = vec![
            instance("vm", None, &with(&ours("dead"))),
            instance("g-abcd", Some(group), &with(&ours("dead"))),
            instance("live-vm", None, &with(&ours("alive"))),
            instance("unlabelled", None, &[("team", "ml")]),
            instance("other", None, &with(&other_cluster)),
            instance("no-uid", None, &with(&no_uid)),
        ];
        let resources = compute_resources(listed);
        let live = HashSet::from(["alive".to_string()]);
        let first_seen = HashMap::from([
            ("projects/p/zones/us-east5-b/instances/vm".to_string(), t(0)),
            (
                "projects/p/zones/us-east5-b/instanceGroupManagers/g".to_string(),
                t(0),
            ),
        ]);
        let at = |now, mode| {
            plan(&Input {
                resources: &resources,
                live_uids: &live,
                cluster_id: "c1",
                namespace: None,
                first_seen: &first_seen,
                now,
                grace: chrono::Duration::minutes(15),
                mode,
            })
            .0
            .into_iter()
            .map(|o| (o.kind, o.name, o.step))
            .collect::<Vec<_>>()
        };
        let due = at(t(15), Mode::Delete);
        assert_eq!(
            due,
            vec![
                (
                    ResourceKind::ComputeInstance,
                    "projects/p/zones/us-east5-b/instances/vm".to_string(),
                    Step::Delete
                ),
                (
                    ResourceKind::ComputeInstanceGroup,
                    "projects/p/zones/us-east5-b/instanceGroupManagers/g".to_string(),
                    Step::Delete
                ),
            ]
        );
        assert!(at(t(14), Mode::Delete).iter().all(|(_, _, s)| *s == Step::Report));
        assert!(at(t(60), Mode::Report).iter().all(|(_, _, s)| *s == Step::Report));
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
