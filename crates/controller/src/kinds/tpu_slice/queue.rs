//! A TpuSlice queued through Kueue (`kueue.x-k8s.io/queue-name`, with the operator's Kueue
//! integration on): what a pass reads of its Workload, and the Kubernetes writes the plan asks
//! for (create the Workload, release an evicted one's reservation).
//!
//! The slice's node exists only while Kueue admits the Workload: pending, nothing is created;
//! evicted, the node is deleted as `spec.suspend` deletes it (whatever the deletion policy), the
//! stop is counted so the next admission creates a new node, and only then is the reservation
//! released (the quota must not go to another team while this node still bills).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use tpu_operator_api::{
    accelerator::SliceShape,
    kueue::{KueueStatus, PRIORITY_CLASS_LABEL, QUEUE_LABEL},
    tpu_slice::{TpuSlice, TpuSliceStatus},
};

use crate::{
    kueue::{
        Gate, client,
        demand::{self, Demand},
        workload::{Workload, WorkloadSpec},
    },
    reconcile::context::Context,
    runtime::error::{ReconcileError, Result},
};

/// What a pass read of the slice's Workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Queued {
    pub workload: String,
    pub local_queue: String,
    pub gate: Gate,
    /// The Workload as read (the release patch is built on it).
    pub found: Option<Workload>,
    /// The Workload this slice would write (`None`: the spec has no valid shape): compared with
    /// `found`, and what is created when there is none.
    pub desired: Option<WorkloadSpec>,
    /// Position in the LocalQueue while pending (1 = next), when Kueue's visibility API serves it.
    pub position: Option<i32>,
    /// The priority class the label names (its value read only while the Workload is missing),
    /// or the message naming a class that does not exist.
    pub priority: Result<Option<(String, i32)>, String>,
}

/// The LocalQueue the slice asks for, when Kueue gates it (integration on, label set).
pub fn local_queue<'a>(slice: &'a TpuSlice, ctx: &Context) -> Option<&'a str> {
    if !ctx.config.kueue {
        return None;
    }
    slice
        .labels()
        .get(QUEUE_LABEL)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
}

/// The Workload's name: the slice's kind and name, cut so the whole stays a valid name, and 5
/// characters of its uid so a slice re-created under the same name never reads its
/// predecessor's Workload.
pub fn workload_name(slice: &TpuSlice) -> String {
    let name: String = slice.name_any().chars().take(40).collect();
    let uid: String = slice.uid().unwrap_or_default().chars().take(5).collect();
    format!("tpuslice-{}-{uid}", name.trim_end_matches(['-', '.']))
}

/// Reads the slice's Workload and what its gate needs: the position while pending, the
/// priority class while it does not exist yet. A Workload that is not exactly the one this slice
/// would write ([`demand::mismatch`]) gates nothing: [`Gate::Foreign`]. `None`: the slice is not
/// gated by Kueue. `shape`: one slice's shape (`None`: the spec is invalid, which plan reports).
pub async fn observe(slice: &TpuSlice, ctx: &Context, shape: Option<&SliceShape>) -> Result<Option<Queued>> {
    let Some(queue) = local_queue(slice, ctx) else {
        return Ok(None);
    };
    let workload = workload_name(slice);
    let found = client::get(&ctx.client, &namespace(slice)?, &workload)
        .await
        .map_err(ReconcileError::kube("read the Kueue Workload"))?;
    let class = slice.labels().get(PRIORITY_CLASS_LABEL);
    // The class's value is read only to create the Workload; an existing one is compared by the
    // class's name (Kueue rewrites the value when the class changes).
    let priority = match (&found, class) {
        (None, Some(class)) => match client::priority(&ctx.client, class)
            .await
            .map_err(ReconcileError::kube("read the WorkloadPriorityClass"))?
        {
            Some(value) => Ok(Some((class.clone(), value))),
            None => Err(format!(
                "WorkloadPriorityClass {class} (label {PRIORITY_CLASS_LABEL}) does not exist: create it or fix the label"
            )),
        },
        (_, class) => Ok(class.map(|c| (c.clone(), 0))),
    };
    let desired = shape.map(|shape| {
        let class = priority.as_ref().ok().and_then(Option::as_ref);
        demand::workload_spec(
            &demand(slice, shape),
            queue,
            class.map(|(name, value)| (name.as_str(), *value)),
        )
    });
    let foreign = found
        .as_ref()
        .zip(desired.as_ref())
        .and_then(|(wl, desired)| demand::mismatch(wl, desired, &slice.uid().unwrap_or_default()));
    let gate = match foreign {
        Some(why) => Gate::Foreign {
            why: format!("Workload {workload} is not this slice's: {why}"),
        },
        None => Gate::of(found.as_ref()),
    };
    let position = match gate {
        Gate::Pending { .. } => client::position(&ctx.client, &namespace(slice)?, queue, &workload).await,
        _ => None,
    };
    Ok(Some(Queued {
        workload,
        local_queue: queue.to_string(),
        gate,
        found,
        desired,
        position,
        priority,
    }))
}

/// What the slice holds while it runs, as Kueue counts it.
pub fn demand(slice: &TpuSlice, one_slice: &SliceShape) -> Demand {
    let total = slice.spec.total_shape().unwrap_or_else(|| one_slice.clone());
    let topology = slice
        .spec
        .accelerator_config
        .as_ref()
        .map(|c| c.topology.clone())
        .or_else(|| demand::fixed_topology(one_slice.generation, one_slice.chips));
    Demand::new(&total, topology, slice.spec.preemptible())
}

/// Creates the slice's Workload as [`observe`] described it (owned by the slice: deleted with
/// it). Nothing to create when the spec has no valid shape (plan reports that instead).
pub async fn create_workload(slice: &TpuSlice, ctx: &Context, queued: &Queued) -> Result<()> {
    let Some(spec) = queued.desired.clone() else {
        return Ok(());
    };
    client::create(
        &ctx.client,
        &namespace(slice)?,
        &queued.workload,
        owner_reference(slice)?,
        spec,
    )
    .await
    .map_err(ReconcileError::kube("create the Kueue Workload"))
}

/// Releases the evicted Workload's reservation (the node is gone and its stop counted).
pub async fn release(ctx: &Context, queued: &Queued) -> Result<()> {
    let (Some(wl), Gate::Evicted { reason, message }) = (&queued.found, &queued.gate) else {
        return Ok(());
    };
    client::release(&ctx.client, wl, reason, message, ctx.clock.now())
        .await
        .map_err(ReconcileError::kube("release the evicted Kueue Workload's quota"))
}

/// Deletes a Workload that is not the slice's ([`Gate::Foreign`]); the next pass writes the
/// right one.
pub async fn delete_foreign(slice: &TpuSlice, ctx: &Context, queued: &Queued) -> Result<()> {
    client::delete(&ctx.client, &namespace(slice)?, &queued.workload)
        .await
        .map_err(ReconcileError::kube(
            "delete a Kueue Workload that is not the slice's",
        ))
}

/// A deleted slice whose cloud resources are gone frees its quota at once (the garbage
/// collector would delete the Workload too, a little later). Best effort: a failure leaves it
/// to the collector.
pub async fn release_on_delete(slice: &TpuSlice, ctx: &Context) {
    if local_queue(slice, ctx).is_none() {
        return;
    }
    let Some(namespace) = slice.namespace() else {
        return;
    };
    if let Err(err) = client::delete(&ctx.client, &namespace, &workload_name(slice)).await {
        tracing::debug!(error = %err, "deleting the Kueue Workload; the garbage collector will");
    }
}

fn namespace(slice: &TpuSlice) -> Result<String> {
    slice
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))
}

fn owner_reference(slice: &TpuSlice) -> Result<OwnerReference> {
    let mut owner = slice
        .controller_owner_ref(&())
        .ok_or(ReconcileError::MissingMetadata("uid"))?;
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

/// `status.kueue` after a pass: the Workload, queue and position as read; `stopped` once the
/// node deleted for Kueue is counted (until the next admission); evictions counted once each.
pub fn status(old: &TpuSliceStatus, queued: Option<&Queued>, counted_stop: bool) -> Option<KueueStatus> {
    let queued = queued?;
    let before = old.kueue.clone().unwrap_or_default();
    let admitted = queued.gate.admitted();
    let newly_evicted = matches!(queued.gate, Gate::Evicted { .. }) && counted_stop;
    Some(KueueStatus {
        workload: queued.workload.clone(),
        local_queue: queued.local_queue.clone(),
        cluster_queue: match &queued.gate {
            Gate::Admitted { cluster_queue } => Some(cluster_queue.clone()),
            _ => None,
        },
        position: queued.position,
        admitted,
        evictions: before.evictions + i32::from(newly_evicted),
        stopped: !admitted && (before.stopped || counted_stop),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::TpuSliceSpec;

    #[test]
    fn the_workload_name_is_valid_and_tied_to_the_object() {
        let mut slice = TpuSlice::new(&"a".repeat(250), TpuSliceSpec::default());
        slice.metadata.uid = Some("0123456789".into());
        let name = workload_name(&slice);
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.starts_with("tpuslice-aaaa") && name.ends_with("-01234"),
            "{name}"
        );
    }
}
