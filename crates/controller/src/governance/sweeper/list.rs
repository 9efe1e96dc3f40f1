//! Reading what exists: the operator's cloud resources in the configured projects and locations,
//! and the UIDs of every custom resource that may own one.

use std::collections::{BTreeMap, HashSet};

use kube::{ResourceExt, api::ListParams};
use tpu_operator_api::{
    naming::{labels, sanitize_label_value},
    preprocess_batch::PreprocessBatch,
    tpu_slice::TpuSlice,
    training_pipeline::TrainingPipeline,
};
use tpu_operator_gcp::{
    GcpError, Place,
    aiplatform_v1::model::{CustomJob, JobState},
    compute_v1::model::{Instance, instance},
    dataproc_v1::model::{Batch, batch},
    tpu_v2::model::{Node, QueuedResource, node, queued_resource_state},
};

use super::{
    Places,
    plan::{CloudResource, ListedInstance, ResourceKind, Stage, compute_resources, uid_label},
};
use crate::runtime::context::Context;

fn labels_of<'a>(l: impl IntoIterator<Item = (&'a String, &'a String)>) -> BTreeMap<String, String> {
    l.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn from_node(n: Node) -> CloudResource {
    CloudResource {
        kind: ResourceKind::TpuNode,
        stage: if n.state == node::State::Deleting {
            Stage::Winding
        } else {
            Stage::Active {
                cancel_operation: None,
            }
        },
        in_queued_resource: !n.queued_resource.is_empty(),
        labels: labels_of(&n.labels),
        name: n.name,
    }
}

fn from_queued(q: QueuedResource) -> CloudResource {
    let labels = q
        .tpu()
        .and_then(|t| t.node_spec.first())
        .and_then(|s| s.node.as_ref())
        .map(|n| labels_of(&n.labels))
        .unwrap_or_default();
    let deleting = matches!(
        q.state.as_ref().map(|s| &s.state),
        Some(queued_resource_state::State::Deleting)
    );
    CloudResource {
        kind: ResourceKind::QueuedResource,
        stage: if deleting {
            Stage::Winding
        } else {
            Stage::Active {
                cancel_operation: None,
            }
        },
        in_queued_resource: false,
        labels,
        name: q.name,
    }
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

fn from_instance(place: &Place, i: Instance) -> ListedInstance {
    use instance::Status as S;
    let created_by = i.metadata.as_ref().and_then(|m| {
        m.items
            .iter()
            .find(|item| item.key.as_deref() == Some("created-by"))
            .and_then(|item| item.value.clone())
    });
    ListedInstance {
        project: place.project.clone(),
        zone: place.location.clone(),
        name: i.name.unwrap_or_default(),
        labels: labels_of(&i.labels),
        created_by,
        stopping: matches!(
            i.status,
            Some(S::Stopping | S::Suspending | S::PendingStop | S::Deprovisioning)
        ),
    }
}

/// Every resource in `places` that may be ours (filtered by cluster label where
/// the API can filter; plan re-checks every label). A location that fails to list is reported in
/// the error list and skipped, so one bad zone does not hide orphans elsewhere.
pub async fn cloud(ctx: &Context, places: &Places) -> (Vec<CloudResource>, Vec<String>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut keep = |what: &str, r: Result<Vec<CloudResource>, GcpError>| match r {
        Ok(list) => out.extend(list),
        Err(e) if e.is_not_found() => {}
        Err(e) => errors.push(format!("{what}: {e}")),
    };
    let filter = format!(
        "labels.{} = \"{}\"",
        labels::CLUSTER,
        sanitize_label_value(&ctx.config.cluster_id)
    );
    for (project, zone) in &places.zones {
        let parent = format!("projects/{project}/locations/{zone}");
        let nodes = ctx.gcp.tpu.list_nodes(&parent).await;
        keep(
            &format!("list TPU nodes in {parent}"),
            nodes.map(|v| v.into_iter().map(from_node).collect()),
        );
        let qrs = ctx.gcp.tpu.list_queued_resources(&parent).await;
        keep(
            &format!("list queued resources in {parent}"),
            qrs.map(|v| v.into_iter().map(from_queued).collect()),
        );
        // Compute Engine slices: instances carry the labels (a group's members from its
        // template); plan::compute_resources turns members into their group.
        let place = Place::new(project, zone);
        let instances = ctx.gcp.compute.list_instances(&place, &filter).await;
        keep(
            &format!("list Compute Engine instances in projects/{project}/zones/{zone}"),
            instances.map(|v| compute_resources(v.into_iter().map(|i| from_instance(&place, i)).collect())),
        );
    }
    for (project, region) in &places.regions {
        let parent = format!("projects/{project}/locations/{region}");
        let batches = ctx.gcp.dataproc.list_batches(&parent, &filter).await;
        keep(
            &format!("list Dataproc batches in {parent}"),
            batches.map(|v| v.into_iter().map(from_batch).collect()),
        );
        let jobs = ctx.gcp.vertex.list_custom_jobs(&parent, &filter).await;
        keep(
            &format!("list Vertex custom jobs in {parent}"),
            jobs.map(|v| v.into_iter().map(from_job).collect()),
        );
    }
    (out, errors)
}

/// What the sweep learns from the custom resources: who is alive, and where they put things.
#[derive(Debug, Default)]
pub struct Live {
    /// UIDs (as label values) of every TpuSlice, PreprocessBatch and TrainingPipeline the operator
    /// watches, including objects being deleted (their finalizers are still cleaning up).
    pub uids: HashSet<String>,
    /// The zones and regions (with their projects) those objects use: from the spec (with the
    /// project defaulted as the controllers default it) and from the cloud resource names in
    /// their status.
    pub places: Places,
}

/// Lists the three kinds a page at a time (memory stays flat at any object count) and keeps only
/// UIDs and places.
pub async fn live(ctx: &Context) -> Result<Live, kube::Error> {
    let mut live = Live::default();
    each::<TpuSlice>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        if let Some(project) = ctx.project_for(&ns, o.spec.project.as_deref()) {
            live.places.zones.insert((project, o.spec.zone.clone()));
        }
        let status = o.status.as_ref();
        for name in status
            .iter()
            .flat_map(|s| [&s.node_name, &s.queued_resource_name])
        {
            live.places.add_zone_of(name.as_deref());
        }
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    each::<PreprocessBatch>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        if let Some(project) = ctx.project_for(&ns, o.spec.project.as_deref()) {
            live.places.regions.insert((project, o.spec.region.clone()));
        }
        live.places
            .add_region_of(o.status.as_ref().and_then(|s| s.batch_name.as_deref()));
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    each::<TrainingPipeline>(ctx, |o| {
        let ns = o.namespace().unwrap_or_default();
        if let Some(project) = ctx.project_for(&ns, o.spec.project.as_deref()) {
            live.places.regions.insert((project, o.spec.region.clone()));
        }
        live.places
            .add_region_of(o.status.as_ref().and_then(|s| s.custom_job_name.as_deref()));
        live.uids.extend(o.uid().map(|u| uid_label(&u)));
    })
    .await?;
    Ok(live)
}

/// Calls `f` on every object of `K` the operator watches, listing 500 a page.
async fn each<K>(ctx: &Context, mut f: impl FnMut(K)) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api = ctx.watched_api::<K>();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        page.items.into_iter().for_each(&mut f);
        match next {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
}
