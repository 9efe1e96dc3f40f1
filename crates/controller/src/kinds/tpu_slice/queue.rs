//! A TpuSlice queued through Kueue (`kueue.x-k8s.io/queue-name`, with the operator's Kueue
//! integration on): what it holds as Kueue counts it, and its `status.kueue`. The Workload reads
//! and writes are every gated kind's ([`crate::kueue::queued`]).
//!
//! The slice's node exists only while Kueue admits the Workload: pending, nothing is created;
//! evicted, the node is deleted as `spec.suspend` deletes it (whatever the deletion policy), the
//! stop is counted so the next admission creates a new node, and only then is the reservation
//! released (the quota must not go to another team while this node still bills).

use tpu_operator_api::{
    TpuSliceSpec,
    accelerator::SliceShape,
    kueue::KueueStatus,
    tpu_slice::{TpuSlice, TpuSliceStatus},
};

pub use crate::kueue::queued::Queued;
use crate::{
    kueue::{
        Gate,
        demand::{self, Demand},
        queued::{self, Gated},
    },
    reconcile::handles::Io,
    runtime::error::Result,
};

impl Gated for TpuSlice {
    const WORKLOAD_PREFIX: &'static str = "tpuslice";
}

/// Reads the slice's Workload ([`queued::observe`]); `shape`: one slice's shape (`None`: the
/// spec is invalid, which plan reports).
pub async fn observe(slice: &TpuSlice, io: &Io<'_>, shape: Option<&SliceShape>) -> Result<Option<Queued>> {
    queued::observe(slice, io, shape.map(|shape| demand(&slice.spec, shape))).await
}

/// What the slice holds while it runs, as Kueue counts it.
pub fn demand(spec: &TpuSliceSpec, one_slice: &SliceShape) -> Demand {
    let total = spec.total_shape().unwrap_or_else(|| one_slice.clone());
    let topology = spec
        .accelerator_config
        .as_ref()
        .map(|c| c.topology.clone())
        .or_else(|| demand::fixed_topology(one_slice.generation, one_slice.chips));
    Demand::new(&total, topology, spec.preemptible())
}

/// `status.kueue` after a pass: the Workload, queue and position as read; `stopped` once the
/// node deleted for Kueue is counted (until the next admission); evictions counted once each.
pub fn status(old: &TpuSliceStatus, queued: Option<&Queued>, counted_stop: bool) -> Option<KueueStatus> {
    let queued = queued?;
    let before = old.kueue.clone().unwrap_or_default();
    let newly_evicted = matches!(queued.gate, Gate::Evicted { .. }) && counted_stop;
    let stopped = before.stopped || counted_stop;
    Some(queued.status(before, newly_evicted, stopped))
}
