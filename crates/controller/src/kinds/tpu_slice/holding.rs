//! What a slice holds, as the namespace's usage counts it: its spec's chips at its price while
//! its status says it holds capacity. Governance lists slices through [`HOLDINGS`] without
//! knowing what a slice is.

use kube::ResourceExt;
use tpu_operator_api::tpu_slice::{TpuSlice, TpuSlicePhase, TpuSliceStatus};

use crate::governance::{
    pricing::PriceTable,
    tenancy::{Holding, HoldingsOf},
};

/// How usage lists a namespace's slices.
pub const HOLDINGS: HoldingsOf<TpuSlice> = HoldingsOf {
    action: "list TpuSlices for the namespace's usage",
    holding,
    conditions: |s| s.status.as_ref().map(|st| st.conditions.as_slice()),
};

/// Whether a slice holds (or is being given) TPU capacity: anything between the create call and
/// the node being gone. A slice refused by policy, never reconciled, or failed with nothing left
/// in the cloud holds none.
pub fn holds_capacity(st: &TpuSliceStatus) -> bool {
    use TpuSlicePhase as P;
    match st.phase {
        P::Queued | P::Provisioning | P::Ready | P::Degraded | P::Preempted | P::Recreating | P::Deleting => {
            true
        }
        P::Pending | P::Waiting | P::Suspended | P::Failed => {
            st.node_state.is_some() || st.queued_resource_state.is_some()
        }
    }
}

/// A slice holds its spec's chips, at its price, while its status says it holds capacity.
pub fn holding(s: &TpuSlice, prices: &PriceTable) -> Option<Holding> {
    if !s.status.as_ref().is_some_and(holds_capacity) {
        return None;
    }
    let shape = s.spec.total_shape()?;
    let (per_hour, _) = prices.slice_per_hour(&shape, s.spec.price_kind());
    Some(Holding::new(
        s.uid(),
        format!("TpuSlice {}", s.name_any()),
        shape.chips,
        per_hour,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::tenancy::usage::{Usage, sum};
    use serde_json::json;

    /// What the listed slices hold, but `exclude`'s (the UID of the object being admitted).
    fn tally(slices: &[TpuSlice], exclude: &str, prices: &PriceTable) -> Usage {
        let holdings: Vec<Holding> = slices.iter().filter_map(|s| holding(s, prices)).collect();
        sum(&holdings, exclude)
    }

    fn slice(name: &str, uid: &str, phase: &str, accel: &str, capacity: serde_json::Value) -> TpuSlice {
        serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice",
            "metadata": {"name": name, "uid": uid},
            "spec": {"zone": "us-east5-b", "acceleratorType": accel, "runtimeVersion": "v", "capacity": capacity},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn counts_slices_holding_capacity_and_skips_the_excluded() {
        let slices = vec![
            slice("a", "u-a", "Ready", "v6e-8", json!({"spot": {}})),
            slice("b", "u-b", "Provisioning", "v6e-4", json!({"onDemand": {}})),
            slice("denied", "u-c", "Failed", "v6e-8", json!({})),
            slice("new", "u-d", "Pending", "v6e-8", json!({})),
            slice("me", "u-me", "Ready", "v6e-8", json!({})),
        ];
        let u = tally(&slices, "u-me", &PriceTable::default());
        assert_eq!(u.chips, 12);
        assert!((u.per_hour_usd - (10.8 + 10.8)).abs() < 1e-9, "{u:?}");
        assert_eq!(u.holders.len(), 2, "{u:?}");
        assert!(
            u.describe().contains("TpuSlice a (8 chips, $10.80/h)"),
            "{}",
            u.describe()
        );
    }

    /// ownerReferences are the tenant's to write: one naming the object being admitted does not
    /// take a running slice out of the count (a quota bypass otherwise).
    #[test]
    fn an_owner_reference_to_the_admitted_object_does_not_exclude_a_holder() {
        let mut running = slice("running", "u-run", "Ready", "v6e-8", json!({}));
        running.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "tpu-operator.dev/v1beta1".into(),
                kind: "TpuSlice".into(),
                name: "refused".into(),
                uid: "u-refused".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        let u = tally(&[running], "u-refused", &PriceTable::default());
        assert_eq!(u.chips, 8, "{u:?}");
    }
}
