//! A slice's capacity: the `spec.capacity` members and the mode decided from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    schema::{DURATION, RESERVATION_NAME},
    tpu_policy::CapacityKind,
};

/// An empty marker object (`spot: {}`), as the GCP APIs use for one-of choices without options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Empty {}

/// Capacity model. Set exactly one of `onDemand`, `spot`, `reserved`, `queued`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Regular on-demand capacity through `nodes.create` (fails fast on a stockout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<Empty>,
    /// Spot capacity (`nodes.create` with `schedulingConfig.spot`): cheaper, may be preempted at
    /// any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<Empty>,
    /// Capacity from a named TPU reservation, requested through a queued resource whose
    /// `reservationName` names it (the only TPU v2 field that carries a reservation); the node is
    /// marked `schedulingConfig.reserved`. The slice waits while the reservation's capacity is in
    /// use and fails if the reservation does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedCapacity>,
    /// Flex-start capacity (`provisioner: ComputeEngine` only): a managed instance group resize
    /// request that Dynamic Workload Scheduler fulfils all at once when capacity frees up, for a
    /// fixed run duration; the slice waits (`Reconciling`, reason `WaitingForCapacity`) until
    /// then, and when the run duration ends the VMs are deleted and the slice reports `Stalled`
    /// with reason `MaxRunDurationExceeded` (the resource stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flex_start: Option<FlexStartCapacity>,
    /// Wait in a queue for capacity (a queued resource) instead of failing on a stockout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedCapacity>,
}

/// Flex-start capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlexStartCapacity {
    /// How long the VMs run once provisioned, 10 minutes to 7 days (e.g. `4h`, `2d`): the resize
    /// request's `requestedRunDuration`.
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub run_duration: String,
}

/// Capacity from a reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservedCapacity {
    /// Reservation name, short (`my-reservation`, meaning
    /// `projects/<the object's project>/locations/<spec.zone>/reservations/my-reservation`, the
    /// object's project being `spec.project` or else its namespace's default) or full
    /// (`projects/<p>/locations/<zone>/reservations/<r>`, the format the TPU API documents). Where
    /// a TpuPolicy governs the namespace, the reservation must be in one of its `allowedProjects`
    /// or listed in its `allowedReservations`.
    #[schemars(length(min = 1, max = 256), regex(pattern = RESERVATION_NAME))]
    pub reservation_name: String,
}

/// A queued resource request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedCapacity {
    /// Give up if capacity was not granted within this duration of the request (e.g. `6h`).
    /// Mutually exclusive with `validUntilTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub valid_until_duration: Option<String>,
    /// Give up if capacity was not granted by this time (RFC 3339, e.g.
    /// `2026-12-01T00:00:00Z`). Mutually exclusive with `validUntilDuration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub valid_until_time: Option<String>,
    /// `Spot` (preemptible, cheaper) or `Guaranteed` (default).
    #[serde(default)]
    pub tier: QueuedTier,
    /// Guaranteed tier only: minimum run time to guarantee (e.g. `4h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub min_duration: Option<String>,
    /// Queue against a reservation (optional), short (`my-reservation`, in the object's project
    /// and `spec.zone`) or full (`projects/<p>/locations/<zone>/reservations/<r>`); checked
    /// against a TpuPolicy as `capacity.reserved.reservationName` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), regex(pattern = RESERVATION_NAME))]
    pub reservation_name: Option<String>,
}

/// Queued resource tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum QueuedTier {
    /// Regular capacity that is not preempted once granted.
    #[default]
    Guaranteed,
    /// Spot capacity: may be reclaimed once granted.
    Spot,
}

/// How a slice's capacity is requested, decided once from `spec.capacity` (the schema lets one
/// member be set; none is on-demand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityMode {
    OnDemand,
    Spot,
    Reserved,
    Queued,
    FlexStart,
}

impl CapacityMode {
    /// Every mode with its `spec.capacity` member, in the order [`TpuSliceSpec::capacity_mode`]
    /// reads them (the first set wins) and the admission policy's CEL tests them: the one
    /// definition both use.
    pub const BY_FIELD: [(&'static str, CapacityMode); 5] = [
        ("queued", Self::Queued),
        ("flexStart", Self::FlexStart),
        ("spot", Self::Spot),
        ("reserved", Self::Reserved),
        ("onDemand", Self::OnDemand),
    ];

    /// The `spec.capacity` member that asks for this mode (`onDemand`, `spot`, ...): how the
    /// stockout memory and the capacity view name a kind.
    pub fn field(self) -> &'static str {
        Self::BY_FIELD
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("onDemand", |(f, _)| f)
    }

    /// The capacity kind policies allow and prices name: flex-start waits for capacity as a
    /// queued resource does (and as Vertex's `FLEX_START` does). The controller's tenancy check
    /// and the admission policy (`crate::admission`) both take it from here.
    pub fn kind(self) -> CapacityKind {
        match self {
            Self::OnDemand => CapacityKind::OnDemand,
            Self::Spot => CapacityKind::Spot,
            Self::Reserved => CapacityKind::Reserved,
            Self::Queued | Self::FlexStart => CapacityKind::Queued,
        }
    }
}
