//! What a slice asks of the namespace's policy, built from its spec: the create (or adoption)
//! as a [`Request`], and what an adopted node must match ([`Expected`]). A pipeline's training
//! slice asks the same, from the slice spec inside the pipeline.

use tpu_operator_api::tpu_slice::TpuSliceSpec;
use tpu_operator_gcp::tpu_v2::model::Node;

use crate::governance::{
    pricing::PriceTable,
    tenancy::{
        Denial, NetworkUse, Policies, Request, TpuUse,
        adoption::{self, Expected},
        request::{Fields, Named, orphans, region_of_zone, storage_of},
    },
};

/// What policy messages call a slice.
pub const KIND: &str = "TpuSlice";

/// The reservation a slice's capacity names (`capacity.reserved` or `capacity.queued`).
fn reservation(spec: &TpuSliceSpec, at: &str) -> Option<Named> {
    let c = spec.capacity.as_ref()?;
    if let Some(r) = &c.reserved {
        return Some(Named::new(
            format!("{at}.capacity.reserved.reservationName"),
            r.reservation_name.clone(),
        ));
    }
    let r = c.queued.as_ref()?.reservation_name.as_ref()?;
    Some(Named::new(
        format!("{at}.capacity.queued.reservationName"),
        r.clone(),
    ))
}

/// Estimated US dollars per hour of a running slice, with its price key.
pub fn per_hour(spec: &TpuSliceSpec, prices: &PriceTable) -> Option<(f64, String)> {
    let shape = spec.total_shape()?;
    Some(prices.slice_per_hour(&shape, spec.price_kind()))
}

/// A TpuSlice create. `None` when the spec has no valid shape.
pub fn request(spec: &TpuSliceSpec, project: &str, prices: &PriceTable) -> Option<Request> {
    request_at(spec, project, prices, "spec")
}

/// A slice whose spec is at `at` (`spec`, or a pipeline's `spec.training.tpuVm.slice`).
pub fn request_at(spec: &TpuSliceSpec, project: &str, prices: &PriceTable, at: &str) -> Option<Request> {
    let shape = spec.total_shape()?;
    let (per_hour_usd, _) = prices.slice_per_hour(&shape, spec.price_kind());
    Some(Request {
        what: match (spec.slice_count(), spec.accelerator_type.as_deref()) {
            (Some(n), Some(t)) => format!("TpuSlice ({n} x {t} multislice in {})", spec.zone),
            _ => format!("TpuSlice ({} in {})", shape.accelerator_type(), spec.zone),
        },
        project: project.to_owned(),
        region: region_of_zone(&spec.zone).to_owned(),
        zone: Some(spec.zone.clone()),
        tpu: Some(TpuUse {
            shape,
            capacity: spec.capacity_mode().kind(),
        }),
        per_hour_usd,
        service_account: spec.service_account.as_ref().map(|sa| sa.email.clone()),
        network: match spec.network_config.as_ref().and_then(|n| n.network.clone()) {
            Some(n) => NetworkUse::Named(n),
            None => NetworkUse::Default,
        },
        subnetwork: spec.network_config.as_ref().and_then(|n| n.subnetwork.clone()),
        orphan: orphans(spec.deletion_policy),
        fields: Fields {
            network: format!("{at}.networkConfig.network"),
            subnetwork: format!("{at}.networkConfig.subnetwork"),
        },
        reservation: reservation(spec, at),
        image: spec
            .compute_engine_image()
            .map(|image| Named::new(format!("{at}.computeEngine.image"), image.to_owned())),
        storage: storage_of(spec, at),
        ..Request::default()
    })
}

/// The adoption of an existing node by a slice (`spec.adoptNodeId`): the slice's request from
/// its spec, marked as an adoption, for the first look before the node is read.
pub fn adopting(spec: &TpuSliceSpec, project: &str, node: &str, prices: &PriceTable) -> Option<Request> {
    let mut req = request(spec, project, prices)?;
    req.what = format!("TpuSlice adopting node {node}");
    req.adopt = Some(node.to_owned());
    req.identity_pending = true;
    Some(req)
}

/// What the spec says an adopted node is: the node is judged against it.
pub fn expected(spec: &TpuSliceSpec) -> Expected {
    Expected {
        kind: KIND,
        zone: spec.zone.clone(),
        shape: spec.total_shape(),
        price_kind: spec.price_kind(),
        orphan: orphans(spec.deletion_policy),
    }
}

/// What taking over `node` asks of the namespace's policy (see [`adoption::claim`]).
pub fn claim(
    policies: &Policies,
    prices: &PriceTable,
    namespace: &str,
    node: &Node,
    spec: &TpuSliceSpec,
    project: &str,
) -> Result<Vec<Request>, Denial> {
    adoption::claim(policies, prices, namespace, node, &expected(spec), project)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::pricing::CapacityKind;
    use serde_json::json;

    fn spec(accel: &str, capacity: serde_json::Value) -> TpuSliceSpec {
        serde_json::from_value(json!({
            "zone": "us-east5-b", "acceleratorType": accel, "runtimeVersion": "v",
            "capacity": capacity, "adoptNodeId": "n", "deletionPolicy": "Orphan"
        }))
        .unwrap()
    }

    /// An adopted node is judged against what the spec says: its zone, shape and price.
    #[test]
    fn an_adopted_node_must_be_what_the_spec_says() {
        let e = expected(&spec("v6e-8", json!({"spot": {}})));
        assert_eq!(e.zone, "us-east5-b");
        assert_eq!(e.shape.map(|s| s.chips), Some(8));
        assert_eq!(e.price_kind, CapacityKind::Spot);
        assert!(e.orphan);
        let on_demand = expected(&spec("v6e-8", json!({"onDemand": {}})));
        assert_eq!(on_demand.price_kind, CapacityKind::OnDemand);
    }
}
