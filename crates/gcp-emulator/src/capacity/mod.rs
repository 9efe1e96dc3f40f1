//! Scarcity, below the services: how many TPU chips a zone has for each accelerator and capacity
//! kind over emulated time ([`stock`]), and each project's per-minute API rate quotas
//! ([`quotas`]). Both are off until configured (admin API `stock`, `quotas`; the handle's
//! `set_stock`, `set_rate_quota`), so a world without them behaves as it always did.
//!
//! The services ask: TPU `nodes.create` and queued-resource provisioning, Compute Engine
//! instance capacity (`compute::instances::has_capacity`) ask [`stock::Stock::admits`] with the
//! chips their live resources already hold; the HTTP front end asks
//! [`quotas::RateQuotas::admit`] before a call reaches its service.

pub mod quotas;
pub mod stock;

use serde::{Deserialize, Serialize};

/// How capacity is obtained, the axis stock is kept on: the members of a TpuSlice's
/// `spec.capacity` (and of a capacity plan's rungs), so a test names stock the way the operator
/// names what it asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CapacityKind {
    /// `nodes.create` without `schedulingConfig.spot` / `preemptible` / `reserved`; a Compute
    /// Engine VM with the STANDARD provisioning model.
    OnDemand,
    /// Spot or preemptible: `schedulingConfig.spot` / `preemptible`, a queued resource with
    /// `spot: {}`, a Compute Engine VM with provisioning model SPOT.
    Spot,
    /// A reservation's capacity: `schedulingConfig.reserved`, a queued resource naming
    /// `reservationName`, a Compute Engine VM with a specific reservation affinity.
    Reserved,
    /// A queued resource without `spot` or `reservationName` (the guaranteed tier).
    Queued,
    /// Compute Engine flex-start (provisioning model FLEX_START).
    FlexStart,
}

impl CapacityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => "onDemand",
            Self::Spot => "spot",
            Self::Reserved => "reserved",
            Self::Queued => "queued",
            Self::FlexStart => "flexStart",
        }
    }

    /// The kind of a TPU `Node` created by `nodes.create`, from its `schedulingConfig`.
    pub fn of_node(node: &serde_json::Value) -> Self {
        let s = &node["schedulingConfig"];
        let set = |k: &str| s[k].as_bool().unwrap_or(false);
        if set("spot") || set("preemptible") {
            Self::Spot
        } else if set("reserved") {
            Self::Reserved
        } else {
            Self::OnDemand
        }
    }

    /// The kind of a TPU `QueuedResource`: its tier (`spot`) or its reservation.
    pub fn of_queued_resource(qr: &serde_json::Value) -> Self {
        if qr
            .get("reservationName")
            .and_then(|v| v.as_str())
            .is_some_and(|r| !r.is_empty())
        {
            Self::Reserved
        } else if qr.get("spot").is_some() {
            Self::Spot
        } else {
            Self::Queued
        }
    }

    /// The kind of a Compute Engine instance, from its `scheduling` and `reservationAffinity`.
    pub fn of_instance(body: &serde_json::Value) -> Self {
        let s = &body["scheduling"];
        match s["provisioningModel"].as_str() {
            Some("SPOT") => return Self::Spot,
            Some("FLEX_START") => return Self::FlexStart,
            _ => {}
        }
        if s["preemptible"].as_bool().unwrap_or(false) {
            return Self::Spot;
        }
        match body["reservationAffinity"]["consumeReservationType"].as_str() {
            Some("SPECIFIC_RESERVATION") => Self::Reserved,
            _ => Self::OnDemand,
        }
    }
}

/// The scarcity state the services and the front end consult.
#[derive(Debug, Default)]
pub struct Capacity {
    pub stock: stock::Stock,
    pub quotas: quotas::RateQuotas,
}
