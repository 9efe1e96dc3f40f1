//! Compute Engine slices, swept through their instances: an instance is its own resource unless
//! it is a member of a managed instance group that is provably ours (see the module above).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tpu_operator_gcp::compute::convert::{base_instance_name, region_of};

use super::{CloudResource, Input, ResourceKind, Stage, orphan_uid, owner_uid};

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

/// A managed instance group that listed instances name in their `created-by` metadata (in their
/// own zone, their name its base instance name plus a suffix, as Compute Engine names members).
/// Only a claim until [`resolve_claims`] has seen the group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupClaim {
    /// `projects/{p}/zones/{z}/instanceGroupManagers/{m}`.
    pub group: String,
    pub members: Vec<ListedInstance>,
}

/// What the sweep read of a claimed group ([`GroupClaim`]).
#[derive(Clone, Debug, PartialEq)]
pub enum GroupFacts {
    /// NOT_FOUND: no such group.
    Gone,
    /// The group, its template or its members could not be read this sweep.
    Unreadable,
    Read {
        /// The labels of the group's instance template, when the group names a regional one in
        /// its own project and region (as the operator makes them) and it exists; groups carry
        /// no labels, their template carries the members' labels.
        template_labels: Option<BTreeMap<String, String>>,
        /// Short names of the group's managed instances.
        members: BTreeSet<String>,
    },
}

fn instance_resource(i: &ListedInstance, stage: Stage) -> CloudResource {
    CloudResource {
        kind: ResourceKind::ComputeInstance,
        name: format!("projects/{}/zones/{}/instances/{}", i.project, i.zone, i.name),
        labels: i.labels.clone(),
        stage: if i.stopping { Stage::Winding } else { stage },
        in_queued_resource: false,
    }
}

const ACTIVE: Stage = Stage::Active {
    cancel_operation: None,
};

/// The group an instance's `created-by` claims, if it reads like a member of a group the
/// operator could have made: a zonal group in the instance's zone whose base instance name
/// prefixes the instance's name. Anything else (no `created-by`, another creator, another zone)
/// makes the instance its own resource: it carries our labels, so it is ours whatever its
/// metadata says.
fn claimed_group(i: &ListedInstance) -> Option<String> {
    let (_, zone, group) = parse_zonal(i.created_by.as_deref()?, "instanceGroupManagers")?;
    let member = i
        .name
        .strip_prefix(&base_instance_name(group))
        .is_some_and(|rest| rest.starts_with('-'));
    (zone == i.zone && member).then(|| {
        format!(
            "projects/{}/zones/{}/instanceGroupManagers/{group}",
            i.project, i.zone
        )
    })
}

/// A zone's listed instances: those that are their own resource, and the groups the others
/// claim to be members of (each once, with its claimants).
pub fn compute_resources(instances: Vec<ListedInstance>) -> (Vec<CloudResource>, Vec<GroupClaim>) {
    let mut out = Vec::new();
    let mut claims: Vec<GroupClaim> = Vec::new();
    for i in instances {
        let Some(group) = claimed_group(&i) else {
            out.push(instance_resource(&i, ACTIVE));
            continue;
        };
        match claims.iter_mut().find(|c| c.group == group) {
            Some(claim) => claim.members.push(i),
            None => claims.push(GroupClaim {
                group,
                members: vec![i],
            }),
        }
    }
    (out, claims)
}

/// The claimed groups worth reading: those with a member that is ours and whose owner is gone.
/// Live slices' groups are never read.
pub fn claims_to_verify(claims: &[GroupClaim], input: &Input<'_>) -> Vec<String> {
    claims
        .iter()
        .filter(|c| c.members.iter().any(|m| orphan_uid(&m.labels, input).is_some()))
        .map(|c| c.group.clone())
        .collect()
}

/// The resources claimed groups stand for, given what was read of them (`facts`; a group not in
/// it was not read). A group is ours when its template carries our labels for this cluster with
/// an owner UID: it then stands for its claimants with that UID, and is judged by the template's
/// labels, never by what a member says. Every other claimant is its own resource: deleted as
/// itself when its claim is false (the group is gone or does not list it), reported only when it
/// really is a member of a group that is not ours, or when the group could not be read.
pub fn resolve_claims(
    claims: Vec<GroupClaim>,
    facts: &HashMap<String, GroupFacts>,
    cluster_id: &str,
) -> Vec<CloudResource> {
    let mut out = Vec::new();
    for claim in claims {
        let fact = facts.get(&claim.group);
        let proven = match fact {
            Some(GroupFacts::Read {
                template_labels: Some(l),
                ..
            }) => owner_uid(l, cluster_id).map(|uid| (l, uid)),
            _ => None,
        };
        if let Some((l, _)) = proven {
            out.push(CloudResource {
                kind: ResourceKind::ComputeInstanceGroup,
                name: claim.group.clone(),
                labels: l.clone(),
                // A group is always deletable: a repeated delete joins the one under way, and
                // its members stopping may as well be a preemption.
                stage: ACTIVE,
                in_queued_resource: false,
            });
        }
        for m in &claim.members {
            if proven.is_some_and(|(_, uid)| owner_uid(&m.labels, cluster_id) == Some(uid)) {
                continue;
            }
            let stage = match fact {
                Some(GroupFacts::Gone) => ACTIVE,
                Some(GroupFacts::Read { members, .. }) if !members.contains(&m.name) => ACTIVE,
                _ => Stage::ReportOnly,
            };
            out.push(instance_resource(m, stage));
        }
    }
    out
}

/// The regional template a group names, as `(project, region, name)`, when it is in the group's
/// project and region, as the operator makes them; `None` for anything else.
pub fn template_of<'a>(
    group: &str,
    instance_template: Option<&'a str>,
) -> Option<(&'a str, &'a str, &'a str)> {
    let (project, zone, _) = parse_zonal(group, "instanceGroupManagers")?;
    let mut parts = instance_template?.rsplit('/');
    let (template, collection, region, regions, in_project) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (collection == "instanceTemplates"
        && regions == "regions"
        && region == region_of(zone)
        && in_project == project
        && parts.next() == Some("projects")
        && !template.is_empty())
    .then_some((in_project, region, template))
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
    let (_, _, template) = template_of(group, instance_template)?;
    Some(Release {
        project: project.to_owned(),
        zone: zone.to_owned(),
        shared_id: template.to_owned(),
    })
}
