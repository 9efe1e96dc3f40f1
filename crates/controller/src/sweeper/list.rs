//! Reading what exists: the operator's cloud resources in the configured projects and locations
//! (in a zone, what every provisioner may own: [`zone`]), and the UIDs
//! of every custom resource that may own one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use tpu_operator_api::{
    conditions::{find_condition, reasons, status, types},
    naming::{labels, sanitize_label_value},
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::TrainingPipeline,
};
use tpu_operator_gcp::{
    GcpError, Place as GcpPlace,
    aiplatform_v1::model::{CustomJob, JobState},
    compute::convert::short_name,
    dataproc_v1::model::{Batch, batch},
};

use super::{
    listing::{PlaceListing, TpuShape},
    places::{Place, Scope, Used},
    plan::{self, CloudResource, GroupClaim, GroupFacts, ResourceKind, Stage, parse_zonal, uid_label},
};
use crate::reconcile::context::Context;

mod zone;

fn labels_of<'a>(l: impl IntoIterator<Item = (&'a String, &'a String)>) -> BTreeMap<String, String> {
    l.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn from_batch(b: Batch) -> CloudResource {
    use batch::State as S;
    let stage = match b.state {
        S::Succeeded | S::Failed | S::Cancelled => Stage::Terminal,
        S::Cancelling => Stage::Winding,
        _ => Stage::Active {
            cancel_operation: Some(b.operation.clone()).filter(|o| !o.is_empty()),
        },
    };
    CloudResource {
        kind: ResourceKind::DataprocBatch,
        stage,
        in_queued_resource: false,
        labels: labels_of(&b.labels),
        name: b.name,
    }
}

fn from_job(j: CustomJob) -> CloudResource {
    use JobState as S;
    let stage = match j.state {
        S::Succeeded | S::Failed | S::Cancelled | S::Expired | S::PartiallySucceeded => Stage::Terminal,
        S::Cancelling => Stage::Winding,
        _ => Stage::Active {
            cancel_operation: None,
        },
    };
    CloudResource {
        kind: ResourceKind::VertexCustomJob,
        stage,
        in_queued_resource: false,
        labels: labels_of(&j.labels),
        name: j.name,
    }
}

/// What listing the cloud found.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every resource that may be ours (plan re-checks every label).
    pub resources: Vec<CloudResource>,
    /// Managed instance groups instances claim to be members of ([`plan::resolve_claims`]).
    pub claims: Vec<GroupClaim>,
    /// Locations that could not be listed.
    pub errors: Vec<String>,
    /// Places where every list answered and none had a resource of ours: learned places there
    /// may be forgotten ([`super::places::next`]).
    pub quiet: BTreeSet<Place>,
    /// The TPU shape of every listed TPU node and queued resource, by name: what an orphaned one
    /// holds ([`TpuShape`]).
    pub tpu: HashMap<String, TpuShape>,
    /// Places where every list answered: an orphan recorded there and not listed is gone.
    pub answered: BTreeSet<Place>,
}

/// Every resource in `places` that may be ours (filtered by cluster label where the API can
/// filter; plan re-checks every label). A location that fails to list is reported in the error
/// list and skipped, so one bad zone does not hide orphans elsewhere.
pub async fn cloud(ctx: &Context, places: &BTreeSet<Place>) -> Listing {
    let filter = format!(
        "labels.{} = \"{}\"",
        labels::CLUSTER,
        sanitize_label_value(&ctx.config.cluster_id)
    );
    let mut out = Listing::default();
    for place in places {
        let found = match place.scope {
            Scope::Zone => zone::owned(&ctx.gcp, place, &filter).await,
            Scope::Region => region(ctx, place, &filter).await,
        };
        if found.answered() {
            out.answered.insert(place.clone());
        }
        if found.quiet(&ctx.config.cluster_id) {
            out.quiet.insert(place.clone());
        }
        out.resources.extend(found.resources);
        out.claims.extend(found.claims);
        out.errors.extend(found.errors);
        out.tpu.extend(found.tpu);
    }
    out
}

/// Dataproc batches and Vertex custom jobs in a region.
async fn region(ctx: &Context, place: &Place, filter: &str) -> PlaceListing {
    let mut found = PlaceListing::default();
    let parent = format!("projects/{}/locations/{}", place.project, place.location);
    let batches = ctx.gcp.dataproc.list_batches(&parent, filter).await;
    found.keep(format!("list Dataproc batches in {parent}"), batches, |f, v| {
        f.resources.extend(v.into_iter().map(from_batch))
    });
    let jobs = ctx.gcp.vertex.list_custom_jobs(&parent, filter).await;
    found.keep(format!("list Vertex custom jobs in {parent}"), jobs, |f, v| {
        f.resources.extend(v.into_iter().map(from_job))
    });
    found
}

/// Reads each claimed group (`projects/{p}/zones/{z}/instanceGroupManagers/{m}`): whether it
/// exists, its template's labels and its members, for [`plan::resolve_claims`].
pub async fn groups(ctx: &Context, names: &[String]) -> HashMap<String, GroupFacts> {
    let mut out = HashMap::new();
    for name in names {
        let facts = match group(ctx, name).await {
            Ok(facts) => facts,
            Err(e) => {
                tracing::warn!(group = %name, error = %e, "could not read a group its members name; reporting them only");
                GroupFacts::Unreadable
            }
        };
        out.insert(name.clone(), facts);
    }
    out
}

async fn group(ctx: &Context, name: &str) -> Result<GroupFacts, GcpError> {
    let Some((project, zone, manager)) = parse_zonal(name, "instanceGroupManagers") else {
        return Ok(GroupFacts::Unreadable);
    };
    let place = GcpPlace::new(project, zone);
    let group = match ctx.gcp.compute.get_instance_group_manager(&place, manager).await {
        Ok(g) => g,
        Err(e) if e.is_not_found() => return Ok(GroupFacts::Gone),
        Err(e) => return Err(e),
    };
    let template_labels = match plan::template_of(name, group.instance_template.as_deref()) {
        Some((p, region, template)) => {
            match ctx
                .gcp
                .compute
                .get_instance_template(&GcpPlace::new(p, region), template)
                .await
            {
                Ok(t) => Some(labels_of(t.properties.iter().flat_map(|p| p.labels.iter()))),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    let members = ctx
        .gcp
        .compute
        .list_managed_instances(&place, manager)
        .await?
        .into_iter()
        .filter_map(|m| m.instance.map(|url| short_name(&url).to_owned()))
        .collect();
    Ok(GroupFacts::Read {
        template_labels,
        members,
    })
}

/// What the sweep learns from the custom resources: who is alive, and where they put things.
#[derive(Debug, Default)]
pub struct Live {
    /// UIDs (as label values) of every TpuSlice, PreprocessBatch and TrainingPipeline the operator
    /// watches, including objects being deleted (their finalizers are still cleaning up).
    pub uids: HashSet<String>,
    /// The places those objects use, by namespace: the cloud resource names the operator wrote
    /// in their status, and the place in the spec (with the project defaulted as the controllers
    /// default it) of an object the operator has not refused.
    pub used: Used,
}

/// Refused: the tenancy policy denied it, its spec is invalid, or GCP refused the operator
/// there. Nothing was made from its spec, so its spec teaches no place (a tenant could otherwise
/// make the sweeper list any project and zone it names).
fn refused(conditions: &[Condition]) -> bool {
    find_condition(conditions, types::STALLED).is_some_and(|c| {
        c.status == status::TRUE
            && [
                reasons::POLICY_DENIED,
                reasons::INVALID_SPEC,
                reasons::PERMISSION_DENIED,
                reasons::CREDENTIALS_UNAVAILABLE,
            ]
            .contains(&c.reason.as_str())
    })
}

impl Live {
    fn add(&mut self, ns: &str, place: Option<Place>) {
        if let Some(place) = place {
            self.used.entry(ns.to_owned()).or_default().insert(place);
        }
    }

    /// The spec's place, unless the object was refused.
    fn add_spec(
        &mut self,
        ctx: &Context,
        ns: &str,
        conditions: Option<&[Condition]>,
        spec: (Scope, Option<&str>, &str),
    ) {
        if conditions.is_some_and(refused) {
            return;
        }
        let (scope, project, location) = spec;
        let place = ctx
            .settings()
            .project_for(ns, project)
            .filter(|_| !location.is_empty())
            .map(|p| Place::new(scope, p, location));
        self.add(ns, place);
    }
}

/// Lists the three kinds a page at a time (memory stays flat at any object count) and keeps only
/// UIDs and places.
pub async fn live(ctx: &Context) -> Result<Live, kube::Error> {
    let mut live = Live::default();
    each::<TpuSlice>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        let status = o.status.as_ref();
        // `spec.zone`, and the zones its capacity plan has asked (status records each before its
        // create). Not every zone the plan names: a slice waiting on its first rung would
        // otherwise make the sweeper list zones nothing was ever asked in.
        let plan = status.and_then(|s| s.capacity_plan.as_ref());
        let asked = plan
            .into_iter()
            .flat_map(|p| std::iter::once(p.zone.as_str()).chain(p.attempts.iter().map(|a| a.zone.as_str())));
        let mut zones: Vec<&str> = std::iter::once(o.spec.zone.as_str()).chain(asked).collect();
        zones.sort_unstable();
        zones.dedup();
        for zone in zones {
            let spec = (Scope::Zone, o.spec.project.as_deref(), zone);
            live.add_spec(ctx, &ns, status.map(|s| s.conditions.as_slice()), spec);
        }
        for name in status
            .iter()
            .flat_map(|s| [&s.node_name, &s.queued_resource_name])
        {
            live.add(&ns, name.as_deref().and_then(|n| Place::of(Scope::Zone, n)));
        }
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    each::<PreprocessBatch>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        let status = o.status.as_ref();
        let spec = (Scope::Region, o.spec.project.as_deref(), o.spec.region.as_str());
        live.add_spec(ctx, &ns, status.map(|s| s.conditions.as_slice()), spec);
        let batch = status.and_then(|s| s.batch_name.as_deref());
        live.add(&ns, batch.and_then(|n| Place::of(Scope::Region, n)));
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    each::<TrainingPipeline>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        let status = o.status.as_ref();
        let spec = (Scope::Region, o.spec.project.as_deref(), o.spec.region.as_str());
        live.add_spec(ctx, &ns, status.map(|s| s.conditions.as_slice()), spec);
        let job = status.and_then(|s| s.custom_job_name.as_deref());
        live.add(&ns, job.and_then(|n| Place::of(Scope::Region, n)));
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    Ok(live)
}

/// Calls `f` on every object of `K` the operator watches, a page at a time
/// ([`crate::runtime::listing::for_each`]).
async fn each<K>(ctx: &Context, f: impl FnMut(K)) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    crate::runtime::listing::for_each(&ctx.watched_api::<K>(), f).await
}
