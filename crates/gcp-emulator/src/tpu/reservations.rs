//! TPU reservations as queued resources consume them.
//!
//! What Google documents, and what is imitated here:
//! * `QueuedResource.reservationName`: "Name of the reservation in which the resource should be
//!   provisioned. Format: projects/{project}/locations/{zone}/reservations/{reservation}"
//!   (`tpu.v2.json`, rev 20261001). A name in another shape is refused at create with 400
//!   INVALID_ARGUMENT naming `queued_resource.reservation_name`.
//! * A queued resource is WAITING_FOR_RESOURCES "until there are sufficient free resources to
//!   begin provisioning your request", and FAILED when "the request couldn't be completed
//!   because there's a problem with the request" (<https://cloud.google.com/tpu/docs/queued-resources>,
//!   "Queued resource requests can be in one the following states"). So: a reservation that
//!   exists but whose chips are taken by other queued resources keeps the request waiting (and
//!   `validUntil*` still expires it); a reservation that does not exist fails it, with
//!   `failedData.error` NOT_FOUND. Which code real GCP puts there, and whether it refuses the
//!   create instead, is not recorded anywhere: docs/reliability.md, "Not verified against real
//!   GCP".
//! * Reserved capacity is the customer's own, so stockout faults do not hold back a queued
//!   resource that names a reservation (<https://cloud.google.com/tpu/docs/consume-reservation>).
//!
//! A reservation here is a zone-scoped number of chips of any TPU type, declared by the test or
//! user (`Emulator::create_reservation`, admin `POST reservations`). Real reservations are per
//! accelerator type and count; the emulator does not model that, nor reservation sharing
//! between projects.

use super::Tpu;
use super::queued::QrRec;
use crate::errors::{ApiError, ApiResult, Code};
use serde_json::Value;

/// `projects/{project}/locations/{zone}/reservations/{reservation}`, each segment non-empty.
pub fn name_ok(name: &str) -> bool {
    matches!(
        name.split('/').collect::<Vec<_>>().as_slice(),
        ["projects", p, "locations", z, "reservations", r] if !p.is_empty() && !z.is_empty() && !r.is_empty()
    )
}

/// Checks `reservationName` of a queued resource at create.
pub fn validate(qr: &Value) -> ApiResult<()> {
    match qr.get("reservationName").and_then(Value::as_str) {
        Some(name) if !name_ok(name) => Err(ApiError::invalid_field(
            "queued_resource.reservation_name",
            format!(
                "Invalid value at 'queued_resource.reservation_name': \"{name}\" does not match projects/{{project}}/locations/{{zone}}/reservations/{{reservation}}"
            ),
        )),
        _ => Ok(()),
    }
}

/// The reservation a queued resource names, if any.
pub fn named(rec: &QrRec) -> Option<&str> {
    rec.body
        .get("reservationName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Chips a queued resource asks for (every node of every node spec).
fn chips_of(rec: &QrRec) -> u64 {
    rec.body["tpu"]["nodeSpec"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|spec| {
            let chips = super::nodes::resolve_accel(&spec["node"], "node").map_or(0, |a| a.chips);
            let count = spec["multisliceParams"]["nodeCount"].as_i64().unwrap_or(1).max(1);
            u64::from(chips) * count as u64
        })
        .sum()
}

/// What the reservation decides for a waiting queued resource.
pub enum Verdict {
    /// Enough free chips: provision now.
    Provision,
    /// The chips are taken: keep waiting.
    Wait,
    /// The reservation does not exist: fail with this error.
    Fail(ApiError),
}

/// Decides whether the queued resource `name` (waiting, naming `reservation`) can be provisioned.
pub fn verdict(tpu: &Tpu, name: &str, rec: &QrRec, reservation: &str) -> Verdict {
    let Some(&capacity) = tpu.reservations.get(reservation) else {
        return Verdict::Fail(ApiError::new(
            Code::NotFound,
            format!("Reservation \"{reservation}\" not found"),
        ));
    };
    let used: u64 = tpu
        .qrs
        .iter()
        .filter(|(n, r)| {
            n.as_str() != name
                && named(r) == Some(reservation)
                && ["PROVISIONING", "ACTIVE", "SUSPENDING"].contains(&r.state())
        })
        .map(|(_, r)| chips_of(r))
        .sum();
    if used + chips_of(rec) <= capacity {
        Verdict::Provision
    } else {
        Verdict::Wait
    }
}
