//! What a `TpuSlice` spec says, derived in one place: its capacity mode and price kind, and its
//! shape.

use super::{Capacity, CapacityMode, Provisioner, QueuedCapacity, QueuedTier, TpuSliceSpec};
use crate::{
    accelerator::{SliceShape, parse_accelerator_type, shape_from_config},
    tpu_policy::CapacityKind,
};

/// What the spec says, derived in one place.
impl TpuSliceSpec {
    pub fn capacity_mode(&self) -> CapacityMode {
        match self.capacity.as_ref() {
            Some(Capacity { queued: Some(_), .. }) => CapacityMode::Queued,
            Some(Capacity {
                flex_start: Some(_), ..
            }) => CapacityMode::FlexStart,
            Some(Capacity { spot: Some(_), .. }) => CapacityMode::Spot,
            Some(Capacity {
                reserved: Some(_), ..
            }) => CapacityMode::Reserved,
            _ => CapacityMode::OnDemand,
        }
    }

    /// `capacity.queued`, when that is the capacity asked for.
    pub fn queued(&self) -> Option<&QueuedCapacity> {
        self.capacity.as_ref().and_then(|c| c.queued.as_ref())
    }

    /// The capacity kind the slice is priced at: a queued resource of the spot tier is spot.
    pub fn price_kind(&self) -> CapacityKind {
        match self.queued() {
            Some(q) if q.tier == QueuedTier::Spot => CapacityKind::Spot,
            _ => self.capacity_mode().kind(),
        }
    }

    /// Whether the slice is requested through a queued resource (`queuedResources.create`) rather
    /// than `nodes.create`: queued capacity, and reserved capacity, because only the queued
    /// resource carries the reservation's name in TPU v2 (`QueuedResource.reservationName`,
    /// "Name of the reservation in which the resource should be provisioned. Format:
    /// projects/{project}/locations/{zone}/reservations/{reservation}", `tpu.v2.json`
    /// rev 20261001; v2 `Node.schedulingConfig` has only the `reserved` flag). Google's guide to
    /// a specific reservation does the same: `gcloud alpha compute tpus queued-resources create
    /// --reservation=...` (<https://cloud.google.com/tpu/docs/consume-reservation>). Spot stays a
    /// plain `nodes.create` with `schedulingConfig.spot`.
    /// On Compute Engine only flex-start waits for capacity (a resize request, read as a queued
    /// resource); a reservation is named on the instance itself (`reservationAffinity`).
    pub fn uses_queued_resource(&self) -> bool {
        match self.provisioner {
            Provisioner::TpuApi => matches!(
                self.capacity_mode(),
                CapacityMode::Queued | CapacityMode::Reserved
            ),
            Provisioner::ComputeEngine => self.capacity_mode() == CapacityMode::FlexStart,
        }
    }

    /// The Compute Engine VM image the slice boots (`computeEngine.image`), with
    /// `provisioner: ComputeEngine` only: the TPU API boots its `runtimeVersion`, and a leftover
    /// `computeEngine` there boots nothing.
    pub fn compute_engine_image(&self) -> Option<&str> {
        match self.provisioner {
            Provisioner::ComputeEngine => self.compute_engine.as_ref().map(|c| c.image.as_str()),
            Provisioner::TpuApi => None,
        }
    }

    /// Whether Google may reclaim the capacity (a preemption is then expected, not a failure).
    /// Flex-start VMs end with their run duration; they are not preempted.
    /// With a capacity plan: whether every rung is (so Kueue counts a planned slice as what it
    /// may run on at most).
    pub fn preemptible(&self) -> bool {
        if let Some(plan) = &self.capacity_plan {
            return !plan.rungs.is_empty() && plan.rungs.iter().all(super::CapacityRung::preemptible);
        }
        match self.capacity_mode() {
            CapacityMode::Spot => true,
            CapacityMode::Queued => self.queued().is_some_and(|q| q.tier == QueuedTier::Spot),
            CapacityMode::OnDemand | CapacityMode::Reserved | CapacityMode::FlexStart => false,
        }
    }

    /// Multislice: how many slices (nodes) the slice is; `None` for one plain slice.
    pub fn slice_count(&self) -> Option<u32> {
        self.multislice.as_ref().map(|m| m.node_count.max(1) as u32)
    }

    /// One slice's generation, chips and hosts, from whichever of `acceleratorType` and
    /// `acceleratorConfig` is set; `Err` names the field. What a provisioner can build is
    /// checked by the controller.
    pub fn slice_shape(&self) -> Result<SliceShape, String> {
        match (&self.accelerator_type, &self.accelerator_config) {
            (Some(t), None) => parse_accelerator_type(t).map_err(|e| format!("spec.acceleratorType: {e}")),
            (None, Some(c)) => {
                shape_from_config(c.type_, &c.topology).map_err(|e| format!("spec.acceleratorConfig: {e}"))
            }
            _ => Err("set exactly one of spec.acceleratorType and spec.acceleratorConfig".into()),
        }
    }

    /// The chips and hosts of all slices together (a multislice counts every slice, as a
    /// Vertex job counts its replicas); `None` when the spec names no valid shape.
    pub fn total_shape(&self) -> Option<SliceShape> {
        let mut shape = self.slice_shape().ok()?;
        if let Some(n) = self.slice_count() {
            shape.chips *= n;
            shape.hosts *= n;
        }
        Some(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fields: serde_json::Value) -> TpuSliceSpec {
        let mut v = serde_json::json!({"zone": "us-east5-b", "runtimeVersion": "r"});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn capacity_facts_of_each_mode() {
        use CapacityKind as K;
        use CapacityMode as M;
        // (capacity, mode, policy kind, price kind, preemptible, queued resource on the TPU API)
        let cases = [
            (
                serde_json::json!({}),
                M::OnDemand,
                K::OnDemand,
                K::OnDemand,
                false,
                false,
            ),
            (
                serde_json::json!({"spot": {}}),
                M::Spot,
                K::Spot,
                K::Spot,
                true,
                false,
            ),
            (
                serde_json::json!({"reserved": {"reservationName": "r"}}),
                M::Reserved,
                K::Reserved,
                K::Reserved,
                false,
                true,
            ),
            (
                serde_json::json!({"queued": {}}),
                M::Queued,
                K::Queued,
                K::Queued,
                false,
                true,
            ),
            (
                serde_json::json!({"queued": {"tier": "Spot"}}),
                M::Queued,
                K::Queued,
                K::Spot,
                true,
                true,
            ),
            (
                serde_json::json!({"flexStart": {"runDuration": "4h"}}),
                M::FlexStart,
                K::Queued,
                K::Queued,
                false,
                false,
            ),
        ];
        for (capacity, mode, kind, price, preemptible, queued) in cases {
            let s = spec(serde_json::json!({"acceleratorType": "v6e-8", "capacity": capacity}));
            let facts = (
                s.capacity_mode(),
                s.capacity_mode().kind(),
                s.price_kind(),
                s.preemptible(),
                s.uses_queued_resource(),
            );
            assert_eq!(facts, (mode, kind, price, preemptible, queued), "{capacity}");
        }
        // On Compute Engine only flex-start waits for capacity (a resize request).
        let flex = spec(serde_json::json!({
            "acceleratorType": "v6e-8", "provisioner": "ComputeEngine",
            "capacity": {"flexStart": {"runDuration": "4h"}}
        }));
        assert!(flex.uses_queued_resource());
    }

    #[test]
    fn shapes_name_the_field_and_count_every_slice() {
        let multi = spec(serde_json::json!({"acceleratorType": "v6e-16", "multislice": {"nodeCount": 3}}));
        let one = multi.slice_shape().unwrap();
        let all = multi.total_shape().unwrap();
        assert_eq!(
            (multi.slice_count(), all.chips, all.hosts),
            (Some(3), one.chips * 3, one.hosts * 3)
        );
        let bad = spec(serde_json::json!({"acceleratorType": "v6e-3"}));
        assert!(bad.slice_shape().unwrap_err().starts_with("spec.acceleratorType"));
        assert_eq!(bad.total_shape(), None);
        let neither = spec(serde_json::json!({}));
        assert!(neither.slice_shape().unwrap_err().contains("exactly one of"));
    }
}
