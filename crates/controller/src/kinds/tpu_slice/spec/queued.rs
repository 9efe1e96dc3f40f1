//! The `QueuedResource` a slice with `capacity.queued` or `capacity.reserved` is created
//! through: its node spec, tier, `validUntil*` constraint and reservation.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    duration::parse_duration,
    tpu_slice::{QueuedCapacity, QueuedTier, TpuSliceSpec},
};
use tpu_operator_gcp::{
    tpu_v2::model::{Node, QueuedResource, queued_resource},
    wkt,
};

/// The `QueuedResource` for `capacity.queued` or `capacity.reserved`: one node spec (`node_id` = the deterministic node
/// id), the tier, the `validUntil*` constraint and an optional reservation.
pub fn queued_resource(
    spec: &TpuSliceSpec,
    node: Node,
    parent: &str,
    node_id: &str,
    project: &str,
) -> Result<QueuedResource, String> {
    let tpu = queued_resource::Tpu::new().set_node_spec([node_spec(node, parent, node_id)]);
    // Reserved capacity: no tier (neither `spot` nor `guaranteed`, as gcloud sends for
    // `--reservation`), the reservation by name, and the node's `schedulingConfig.reserved`.
    if let Some(r) = spec.capacity.as_ref().and_then(|c| c.reserved.as_ref()) {
        return Ok(QueuedResource::new()
            .set_tpu(tpu)
            .set_reservation_name(reservation_name(&r.reservation_name, project, &spec.zone)));
    }
    let q = spec.queued().cloned().unwrap_or_default();
    let mut qr = QueuedResource::new().set_tpu(tpu);
    if let Some(p) = queueing_policy(&q)? {
        qr = qr.set_queueing_policy(p);
    }
    qr = with_tier(qr, &q)?;
    if let Some(r) = &q.reservation_name {
        qr = qr.set_reservation_name(reservation_name(r, project, &spec.zone));
    }
    Ok(qr)
}

/// The one node spec: the node `node_id` under `parent`. A multislice is one queued resource per
/// slice, each with one node (`Create::for_slice`), not one with `multisliceParams`: the TPU
/// service deletes every node of a multislice queued resource when one slice is lost, and one
/// queued resource per slice lets a lost slice be replaced alone.
fn node_spec(node: Node, parent: &str, node_id: &str) -> queued_resource::tpu::NodeSpec {
    queued_resource::tpu::NodeSpec::new()
        .set_parent(parent)
        .set_node_id(node_id)
        .set_node(node)
}

/// How long the request may wait in the queue: `validUntilDuration`, else `validUntilTime`.
fn queueing_policy(q: &QueuedCapacity) -> Result<Option<queued_resource::QueueingPolicy>, String> {
    if let Some(d) = &q.valid_until_duration {
        let d = parse_duration(d).map_err(|e| format!("spec.capacity.queued.validUntilDuration: {e}"))?;
        return Ok(Some(
            queued_resource::QueueingPolicy::new()
                .set_valid_until_duration(wkt::Duration::clamp(d.as_secs() as i64, 0)),
        ));
    }
    if let Some(t) = &q.valid_until_time {
        let t = chrono::DateTime::parse_from_rfc3339(t)
            .map_err(|e| format!("spec.capacity.queued.validUntilTime {t:?}: {e}"))?;
        return Ok(Some(
            queued_resource::QueueingPolicy::new()
                .set_valid_until_time(wkt::Timestamp::clamp(t.timestamp(), 0)),
        ));
    }
    Ok(None)
}

/// The tier: spot, or guaranteed with its optional `minDuration`.
fn with_tier(qr: QueuedResource, q: &QueuedCapacity) -> Result<QueuedResource, String> {
    Ok(match q.tier {
        QueuedTier::Spot => qr.set_spot(queued_resource::Spot::new()),
        QueuedTier::Guaranteed => {
            let mut g = queued_resource::Guaranteed::new();
            if let Some(d) = &q.min_duration {
                let d = parse_duration(d).map_err(|e| format!("spec.capacity.queued.minDuration: {e}"))?;
                g = g.set_min_duration(wkt::Duration::clamp(d.as_secs() as i64, 0));
            }
            qr.set_guaranteed(g)
        }
    })
}

/// Expands a short reservation name to `projects/<p>/locations/<zone>/reservations/<r>`, the
/// format `QueuedResource.reservationName` documents (`tpu.v2.json`).
fn reservation_name(r: &str, project: &str, zone: &str) -> String {
    if r.starts_with("projects/") {
        r.to_string()
    } else {
        format!("projects/{project}/locations/{zone}/reservations/{r}")
    }
}

#[cfg(test)]
mod tests {
    use tpu_operator_api::tpu_slice::{Capacity, Empty};

    use super::*;
    use crate::kinds::tpu_slice::{
        backend::shape,
        spec::{
            desired, node,
            tests::{ident, spec},
        },
    };

    /// `capacity.reserved.reservationName` reaches Google: a queued resource naming the
    /// reservation (the only v2 field that can), with the node marked reserved.
    #[test]
    fn reserved_capacity_goes_through_a_queued_resource_with_the_reservation() {
        let mut s = spec();
        s.capacity = Some(Capacity {
            reserved: Some(tpu_operator_api::tpu_slice::ReservedCapacity {
                reservation_name: "res-a".into(),
            }),
            ..Default::default()
        });
        assert!(s.uses_queued_resource());
        assert!(!s.preemptible());
        let d = desired(&s, &ident(), "c1", None, &Default::default());
        let n = node(&s, &d, &ident());
        let qr = queued_resource(&s, n, "projects/p/locations/us-east5-b", "id-1", "p").unwrap();
        let v = serde_json::to_value(&qr).unwrap();
        assert_eq!(
            v["reservationName"],
            "projects/p/locations/us-east5-b/reservations/res-a"
        );
        assert!(v.get("spot").is_none() && v.get("guaranteed").is_none(), "{v}");
        assert_eq!(v["tpu"]["nodeSpec"][0]["nodeId"], "id-1");
        assert_eq!(
            v["tpu"]["nodeSpec"][0]["node"]["schedulingConfig"]["reserved"],
            true
        );

        let mut spot = spec();
        spot.capacity = Some(Capacity {
            spot: Some(Empty {}),
            ..Default::default()
        });
        assert!(!spot.uses_queued_resource());
    }

    #[test]
    fn queued_resource_maps_tier_validity_and_reservation() {
        let mut s = spec();
        s.capacity = Some(Capacity {
            queued: Some(QueuedCapacity {
                valid_until_duration: Some("6h".into()),
                tier: QueuedTier::Spot,
                reservation_name: Some("res1".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let d = desired(&s, &ident(), "c1", None, &Default::default());
        let n = node(&s, &d, &ident());
        let qr = queued_resource(&s, n, "projects/p/locations/us-east5-b", "id-1", "p").unwrap();
        let v = serde_json::to_value(&qr).unwrap();
        assert_eq!(v["queueingPolicy"]["validUntilDuration"], "21600s");
        assert!(v["spot"].is_object(), "{v}");
        assert_eq!(v["tpu"]["nodeSpec"][0]["nodeId"], "id-1");
        assert_eq!(
            v["reservationName"],
            "projects/p/locations/us-east5-b/reservations/res1"
        );
        assert!(s.preemptible());
        assert_eq!(shape(&s).unwrap().chips, 8);
    }
}
