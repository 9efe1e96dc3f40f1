//! Per-zone TPU stock: how many chips of an accelerator a zone can grant for one capacity kind,
//! over emulated time. A zone with no stock entry for what is asked is unlimited (as before);
//! an entry caps the chips that live resources of that (zone, accelerator, kind) may hold at
//! once. Chips come back when the resource holding them goes (deleted, preempted), and the cap
//! itself moves with time: `steps` set it at given offsets (a zone running dry, then restocked),
//! `refill` adds to it at a steady pace (others' capacity coming free) up to `max`.
//!
//! Why chips held by live resources rather than a counter decremented on create: a create that
//! fails later, a node deleted or preempted, a queued resource suspended all give capacity back
//! without every path having to remember to, and the count can never drift from what exists.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::CapacityKind;
use crate::config::humantime_serde_compat;
use crate::errors::{ApiError, Code};

/// One stock entry (admin API `POST stock`, [`crate::Emulator::set_stock`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StockSpec {
    pub zone: String,
    /// An accelerator type (`v6e-8`), a family (`v6e`, matching `v6e-*` and Compute Engine's
    /// `ct6e-*` machine types) or a Compute Engine machine type.
    pub accelerator: String,
    pub kind: CapacityKind,
    /// Chips the zone can grant now (for this accelerator and kind).
    pub chips: u64,
    /// Later changes of the cap, each `after` the entry was set (e.g. `0` now, `64` after 10m).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StockStep>,
    /// A steady refill on top of the cap in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill: Option<Refill>,
}

/// The cap becomes `chips` at `after` from when the entry was set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StockStep {
    #[serde(with = "humantime_serde_compat")]
    pub after: Duration,
    pub chips: u64,
}

/// `chips` more every `every`, counted from the last step in force, up to `max` (unbounded when
/// absent).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Refill {
    pub chips: u64,
    #[serde(with = "humantime_serde_compat")]
    pub every: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// A stock entry and when it was set (its steps and refill count from then).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StockEntry {
    #[serde(flatten)]
    pub spec: StockSpec,
    pub set_at: DateTime<Utc>,
}

fn chrono(d: Duration) -> ChronoDuration {
    ChronoDuration::from_std(d).unwrap_or(ChronoDuration::MAX)
}

impl StockEntry {
    /// The chips the zone can grant at `now` (held ones included).
    pub fn cap_at(&self, now: DateTime<Utc>) -> u64 {
        let mut cap = self.spec.chips;
        let mut since = self.set_at;
        let mut steps: Vec<&StockStep> = self.spec.steps.iter().collect();
        steps.sort_by_key(|s| s.after);
        for step in steps {
            let at = self.set_at + chrono(step.after);
            if at <= now {
                cap = step.chips;
                since = at;
            }
        }
        if let Some(r) = &self.spec.refill
            && !r.every.is_zero()
            && now > since
        {
            let periods = (now - since).num_milliseconds() as u128 / r.every.as_millis().max(1);
            let grown = u128::from(cap) + periods * u128::from(r.chips);
            cap = grown.min(u128::from(r.max.unwrap_or(u64::MAX))) as u64;
        }
        cap
    }

    /// Whether `want` more chips fit next to the `held` ones at `now`.
    pub fn admits(&self, held: u64, want: u64, now: DateTime<Utc>) -> bool {
        held.saturating_add(want) <= self.cap_at(now)
    }
}

/// Every stock entry, one per (zone, accelerator, kind).
#[derive(Debug, Default)]
pub struct Stock {
    entries: Vec<StockEntry>,
}

impl Stock {
    /// Sets (or replaces) the entry for the spec's (zone, accelerator, kind) from `now`.
    pub fn set(&mut self, spec: StockSpec, now: DateTime<Utc>) {
        self.entries.retain(|e| {
            (e.spec.zone.as_str(), e.spec.accelerator.as_str(), e.spec.kind)
                != (spec.zone.as_str(), spec.accelerator.as_str(), spec.kind)
        });
        self.entries.push(StockEntry { spec, set_at: now });
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn entries(&self) -> &[StockEntry] {
        &self.entries
    }

    /// The entry governing `kind` in `zone` for an accelerator `matches` accepts (it is given
    /// each entry's `accelerator` pattern); `None`: unlimited.
    pub fn entry(
        &self,
        zone: &str,
        kind: CapacityKind,
        matches: impl Fn(&str) -> bool,
    ) -> Option<&StockEntry> {
        self.entries
            .iter()
            .find(|e| e.spec.zone == zone && e.spec.kind == kind && matches(&e.spec.accelerator))
    }
}

/// The refusal of a TPU create the zone has no stock for: 429 RESOURCE_EXHAUSTED with the
/// message SkyPilot quotes for TPU code 8 ("There is no more capacity in the zone", PR #1842,
/// ../shared/notes/anchors.md §4) and `ErrorInfo.reason = STOCKOUT`, the out-of-stock example of
/// googleapis `google/rpc/error_details.proto`. The same shape as the `CapacityError` fault with
/// `cause: stockout`, so the operator reads one stockout shape however it was made.
pub fn tpu_stockout(zone: &str, accelerator_type: &str, kind: CapacityKind) -> ApiError {
    let mut e = ApiError::new(
        Code::ResourceExhausted,
        format!(
            "There is no more capacity in the zone \"{zone}\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)"
        ),
    );
    e.details.push(serde_json::json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "STOCKOUT",
        "domain": "tpu.googleapis.com",
        "metadata": {"zone": zone, "acceleratorType": accelerator_type, "capacityKind": kind.as_str()},
    }));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap()
    }

    fn entry(spec: StockSpec) -> StockEntry {
        StockEntry { spec, set_at: at(0) }
    }

    fn spec(chips: u64) -> StockSpec {
        StockSpec {
            zone: "z".into(),
            accelerator: "v6e".into(),
            kind: CapacityKind::Spot,
            chips,
            steps: Vec::new(),
            refill: None,
        }
    }

    #[test]
    fn steps_empty_then_restock_the_zone() {
        let mut s = spec(0);
        s.steps = vec![
            StockStep {
                after: Duration::from_secs(600),
                chips: 16,
            },
            StockStep {
                after: Duration::from_secs(1200),
                chips: 0,
            },
        ];
        let e = entry(s);
        assert_eq!(e.cap_at(at(9)), 0);
        assert_eq!(e.cap_at(at(10)), 16);
        assert!(e.admits(8, 8, at(15)) && !e.admits(9, 8, at(15)));
        assert_eq!(e.cap_at(at(20)), 0);
    }

    #[test]
    fn refill_grows_from_the_last_step_up_to_its_max() {
        let mut s = spec(8);
        s.refill = Some(Refill {
            chips: 8,
            every: Duration::from_secs(300),
            max: Some(24),
        });
        let e = entry(s);
        assert_eq!(e.cap_at(at(4)), 8);
        assert_eq!(e.cap_at(at(5)), 16);
        assert_eq!(e.cap_at(at(60)), 24);
    }

    #[test]
    fn one_entry_per_zone_accelerator_and_kind() {
        let mut stock = Stock::default();
        stock.set(spec(8), at(0));
        stock.set(spec(16), at(1));
        let mut other = spec(4);
        other.kind = CapacityKind::OnDemand;
        stock.set(other, at(1));
        assert_eq!(stock.entries().len(), 2);
        let hit = stock.entry("z", CapacityKind::Spot, |p| p == "v6e").unwrap();
        assert_eq!(hit.spec.chips, 16);
        assert!(stock.entry("z", CapacityKind::Queued, |_| true).is_none());
    }
}
