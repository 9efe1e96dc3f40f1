//! What the operator may own in a zone, for every way a TpuSlice is provisioned: TPU nodes and
//! queued resources (the TPU API), Compute Engine instances (a group's members carry its
//! template's labels; the plan sorts out which claim a group, [`plan::compute_resources`]).

use tpu_operator_api::tpu_slice::Provisioner;
use tpu_operator_gcp::{
    Gcp, Place as GcpPlace,
    compute_v1::model::{Instance, instance},
    tpu_v2::model::{Node, QueuedResource, node, queued_resource_state},
};

use super::labels_of;
use crate::sweeper::{
    listing::{PlaceListing, TpuShape},
    places::Place,
    plan::{self, CloudResource, ListedInstance, ResourceKind, Stage},
};

/// Every provisioner's resources in `place` (a zone). `filter` is the cluster label, where the
/// API filters; the sweeper re-checks every label.
pub(super) async fn owned(gcp: &Gcp, place: &Place, filter: &str) -> PlaceListing {
    let mut found = PlaceListing::default();
    // The match is exhaustive, so a new provisioner cannot be added without saying what it owns.
    for provisioner in [Provisioner::TpuApi, Provisioner::ComputeEngine] {
        match provisioner {
            Provisioner::TpuApi => tpu_api(gcp, place, &mut found).await,
            Provisioner::ComputeEngine => compute_engine(gcp, place, filter, &mut found).await,
        }
    }
    found
}

/// Every TPU node and queued resource in the zone (TPU v2 has no server-side filter), with the
/// shape each holds, for the orphans' quota and budget.
async fn tpu_api(gcp: &Gcp, place: &Place, found: &mut PlaceListing) {
    let parent = format!("projects/{}/locations/{}", place.project, place.location);
    let nodes = gcp.tpu.list_nodes(&parent).await;
    found.keep(format!("list TPU nodes in {parent}"), nodes, |f, v| {
        f.tpu.extend(v.iter().map(|n| (n.name.clone(), node_shape(n))));
        f.resources.extend(v.into_iter().map(from_node))
    });
    let qrs = gcp.tpu.list_queued_resources(&parent).await;
    found.keep(format!("list queued resources in {parent}"), qrs, |f, v| {
        f.tpu
            .extend(v.iter().filter_map(|q| Some((q.name.clone(), queued_shape(q)?))));
        f.resources.extend(v.into_iter().map(from_queued))
    });
}

async fn compute_engine(gcp: &Gcp, place: &Place, filter: &str, found: &mut PlaceListing) {
    let place = GcpPlace::new(&place.project, &place.location);
    let instances = gcp.compute.list_instances(&place, filter).await;
    let what = format!(
        "list Compute Engine instances in projects/{}/zones/{}",
        place.project, place.location
    );
    found.keep(what, instances, |f, v| {
        let listed = v.into_iter().map(|i| from_instance(&place, i)).collect();
        let (resources, claims) = plan::compute_resources(listed);
        f.resources.extend(resources);
        f.claims.extend(claims);
    });
}

fn active_or_winding(winding: bool) -> Stage {
    if winding {
        Stage::Winding
    } else {
        Stage::Active {
            cancel_operation: None,
        }
    }
}

fn from_node(n: Node) -> CloudResource {
    CloudResource {
        kind: ResourceKind::TpuNode,
        stage: active_or_winding(n.state == node::State::Deleting),
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
        stage: active_or_winding(deleting),
        in_queued_resource: false,
        labels,
        name: q.name,
    }
}

fn node_shape(n: &Node) -> TpuShape {
    TpuShape {
        accelerator_type: n.accelerator_type.clone(),
        nodes: 1,
        spot: n
            .scheduling_config
            .as_ref()
            .is_some_and(|s| s.spot || s.preemptible),
    }
}

fn queued_shape(q: &QueuedResource) -> Option<TpuShape> {
    let spec = q.tpu()?.node_spec.first()?;
    let node = spec.node.as_ref()?;
    let nodes = spec
        .multislice_params()
        .map_or(1, |m| u32::try_from(m.node_count).unwrap_or(1).max(1));
    Some(TpuShape {
        accelerator_type: node.accelerator_type.clone(),
        nodes,
        spot: q.spot().is_some(),
    })
}

fn from_instance(place: &GcpPlace, i: Instance) -> ListedInstance {
    use instance::Status as S;
    // The last `created-by`: Compute Engine adds the group's to what the template says.
    let created_by = i.metadata.as_ref().and_then(|m| {
        m.items
            .iter()
            .rev()
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
