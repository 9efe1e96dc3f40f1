//! TPU capacity against the zone's stock ([`crate::capacity::stock`]): the chips live nodes of a
//! (zone, accelerator, kind) hold, and whether a create or a queued resource's provisioning fits.

use super::Tpu;
use super::catalog;
use crate::capacity::CapacityKind;
use crate::cloud::Cloud;
use crate::faults::accel_matches;

/// The zone of a TPU resource name (`projects/p/locations/<zone>/...`).
fn zone_of(name: &str) -> &str {
    name.split('/').nth(3).unwrap_or("")
}

/// Chips held in `zone` by live nodes of `kind` whose accelerator `pattern` covers. A preempted
/// or terminated node holds none: its capacity went back to the zone.
pub fn held_chips(tpu: &Tpu, zone: &str, kind: CapacityKind, pattern: &str) -> u64 {
    tpu.nodes
        .iter()
        .filter(|(name, rec)| {
            rec.kind == kind && zone_of(name) == zone && !matches!(rec.state(), "PREEMPTED" | "TERMINATED")
        })
        .filter_map(|(_, rec)| rec.body["acceleratorType"].as_str())
        .filter(|t| accel_matches(pattern, t))
        .filter_map(catalog::by_type)
        .map(|a| u64::from(a.chips))
        .sum()
}

/// Whether `zone` can grant `chips` more chips of `accelerator_type` as `kind` now: true without
/// a stock entry for them (unlimited).
pub fn admits(
    w: &Cloud,
    tpu: &Tpu,
    zone: &str,
    accelerator_type: &str,
    kind: CapacityKind,
    chips: u64,
) -> bool {
    let Some(entry) = w
        .capacity
        .stock
        .entry(zone, kind, |pattern| accel_matches(pattern, accelerator_type))
    else {
        return true;
    };
    let held = held_chips(tpu, zone, kind, &entry.spec.accelerator);
    entry.admits(held, chips, w.now)
}
