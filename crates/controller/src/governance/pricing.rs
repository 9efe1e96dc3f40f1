//! The TPU price table: list prices per chip-hour by TPU generation and capacity kind, and Vertex AI
//! TPU machine types, as built-in defaults overridable in the operator's config.
//!
//! These are **estimates** for budgeting, quotas and alerts, not a bill: public list prices in US
//! dollars (sources and dates in `docs/cost-model.md`), no regional differences, no committed-use
//! or negotiated discounts, no VM / disk / network charges. Pure: no I/O.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tpu_operator_api::{
    accelerator::{SliceShape, TpuGeneration, VertexMachineType},
    common::CostEstimate,
};

use crate::runtime::clock::k8s_time as time;

/// How capacity is paid for (defined with the policy kind, which lists allowed kinds).
pub use tpu_operator_api::tpu_policy::CapacityKind;

/// On-demand and spot price of one TPU chip for one hour, in US dollars.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChipPrice {
    pub on_demand: f64,
    pub spot: f64,
}

/// Price overrides from the operator config (`prices:`); anything not named keeps its default.
///
/// ```yaml
/// prices:
///   tpuChipHourUsd:
///     v6e: {onDemand: 2.97, spot: 1.20}
///   vertexMachineHourUsd:
///     ct6e-standard-4t: 12.5
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceOverrides {
    /// By TPU family: `v2`, `v3`, `v4`, `v5e` (or `v5litepod`), `v5p`, `v6e`, `tpu7x`.
    #[serde(default)]
    pub tpu_chip_hour_usd: BTreeMap<String, ChipPrice>,
    /// By Vertex machine type (`ct6e-standard-4t`, ...): US dollars per machine (host) hour.
    #[serde(default)]
    pub vertex_machine_hour_usd: BTreeMap<String, f64>,
}

/// The price table in effect.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    chips: HashMap<TpuGeneration, ChipPrice>,
    vertex: HashMap<VertexMachineType, f64>,
}

/// Built-in list prices per chip-hour (USD), see `docs/cost-model.md` for sources.
pub const DEFAULT_CHIP_PRICES: [(TpuGeneration, ChipPrice); 7] = [
    (
        TpuGeneration::V2,
        ChipPrice {
            on_demand: 1.125,
            spot: 0.3375,
        },
    ),
    (
        TpuGeneration::V3,
        ChipPrice {
            on_demand: 2.00,
            spot: 0.60,
        },
    ),
    (
        TpuGeneration::V4,
        ChipPrice {
            on_demand: 3.22,
            spot: 0.97,
        },
    ),
    (
        TpuGeneration::V5e,
        ChipPrice {
            on_demand: 1.20,
            spot: 0.60,
        },
    ),
    (
        TpuGeneration::V5p,
        ChipPrice {
            on_demand: 4.20,
            spot: 2.10,
        },
    ),
    (
        TpuGeneration::V6e,
        ChipPrice {
            on_demand: 2.70,
            spot: 1.35,
        },
    ),
    // No public list price for TPU7x was found: a deliberately high placeholder, so budgets err
    // towards refusing; set `tpuChipHourUsd.tpu7x` to the contracted price (docs/cost-model.md).
    (
        TpuGeneration::Tpu7x,
        ChipPrice {
            on_demand: 12.0,
            spot: 6.0,
        },
    ),
];

impl Default for PriceTable {
    fn default() -> Self {
        let chips: HashMap<_, _> = DEFAULT_CHIP_PRICES.into_iter().collect();
        // Vertex TPU machines: chips per host × the generation's on-demand chip price (cloud-tpu:
        // 4 chips of v2 / v3, priced as v3). Vertex publishes its own per-machine prices; override
        // them in the config when they differ.
        let vertex = VertexMachineType::ALL
            .into_iter()
            .map(|m| {
                let info = m.info();
                let generation = info.generation.unwrap_or(TpuGeneration::V3);
                (m, chips[&generation].on_demand * f64::from(info.chips_per_host))
            })
            .collect();
        Self { chips, vertex }
    }
}

/// A TPU family name from the config: the accelerator-type prefix, or `v5e` for `v5litepod`.
pub fn parse_family(name: &str) -> Option<TpuGeneration> {
    let name = name.to_ascii_lowercase();
    TpuGeneration::ALL
        .into_iter()
        .find(|g| g.prefix() == name || (name == "v5e" && *g == TpuGeneration::V5e))
}

/// Display name of a family in messages and price keys (`v5e` rather than `v5litepod`).
pub fn family_name(g: TpuGeneration) -> &'static str {
    match g {
        TpuGeneration::V5e => "v5e",
        other => other.prefix(),
    }
}

impl PriceTable {
    /// Defaults with `overrides` applied. The error names the unknown family or machine type.
    pub fn with_overrides(overrides: &PriceOverrides) -> Result<Self, String> {
        let mut table = Self::default();
        for (family, price) in &overrides.tpu_chip_hour_usd {
            let g = parse_family(family).ok_or_else(|| {
                format!(
                    "prices.tpuChipHourUsd: unknown TPU family {family:?} (known: v2, v3, v4, v5e, v5p, v6e)"
                )
            })?;
            if !(non_negative(price.on_demand) && non_negative(price.spot)) {
                return Err(format!("prices.tpuChipHourUsd.{family}: prices must be >= 0"));
            }
            table.chips.insert(g, *price);
        }
        for (machine, price) in &overrides.vertex_machine_hour_usd {
            let m = VertexMachineType::ALL
                .into_iter()
                .find(|m| m.as_str() == machine)
                .ok_or_else(|| format!("prices.vertexMachineHourUsd: unknown machine type {machine:?}"))?;
            if !non_negative(*price) {
                return Err(format!(
                    "prices.vertexMachineHourUsd.{machine}: price must be >= 0"
                ));
            }
            table.vertex.insert(m, *price);
        }
        Ok(table)
    }

    /// US dollars per hour of a TPU slice of `shape` on `capacity`, and the price key.
    pub fn slice_per_hour(&self, shape: &SliceShape, capacity: CapacityKind) -> (f64, String) {
        let price = self.chips[&shape.generation];
        let (per_chip, kind) = match capacity {
            CapacityKind::Spot => (price.spot, "spot"),
            CapacityKind::OnDemand | CapacityKind::Reserved | CapacityKind::Queued => {
                (price.on_demand, "on-demand")
            }
        };
        (
            per_chip * f64::from(shape.chips),
            format!("tpu-{}-{kind}", family_name(shape.generation)),
        )
    }

    /// US dollars per hour of a Vertex custom job on `replicas` machines of `machine` (a
    /// multi-host topology runs `chips / chips_per_host` hosts per replica), and the price key.
    /// Spot jobs are priced at the spot chip price.
    pub fn vertex_per_hour(
        &self,
        machine: VertexMachineType,
        shape: Option<&SliceShape>,
        replicas: u32,
        spot: bool,
    ) -> (f64, String) {
        let info = machine.info();
        let hosts = shape.map_or(1, |s| s.chips.div_ceil(info.chips_per_host).max(1));
        let mut per_machine = self.vertex[&machine];
        if spot {
            let generation = info.generation.unwrap_or(TpuGeneration::V3);
            let p = self.chips[&generation];
            if p.on_demand > 0.0 {
                per_machine *= p.spot / p.on_demand;
            }
        }
        let kind = if spot { "spot" } else { "on-demand" };
        (
            per_machine * f64::from(hosts) * f64::from(replicas.max(1)),
            format!("vertex-{}-{kind}", machine.as_str()),
        )
    }
}

/// Accrual is written at most this often while the rate stays the same, so a running slice does
/// not rewrite its status on every poll.
pub const ACCRUAL_STEP_SECS: i64 = 60;

/// Brings a running object's estimate up to `now`: `soFarUsd` grows by the rate in effect since
/// the last accrual (the old `perHourUsd`), then the rate becomes `per_hour_now` (0 when nothing
/// billable runs). `None` while nothing was ever billed. Returns `old` unchanged when less than
/// [`ACCRUAL_STEP_SECS`] passed and the rate did not change.
pub fn accrue(
    old: Option<&CostEstimate>,
    per_hour_now: f64,
    price_key: Option<&str>,
    now: DateTime<Utc>,
) -> Option<CostEstimate> {
    let Some(old) = old else {
        return (per_hour_now > 0.0).then(|| CostEstimate {
            so_far_usd: 0.0,
            per_hour_usd: round_usd(per_hour_now),
            price_key: price_key.map(str::to_owned),
            accrued_through: Some(time(now)),
        });
    };
    let since = old
        .accrued_through
        .as_ref()
        .and_then(|t| DateTime::<Utc>::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now);
    let elapsed = (now - since).num_seconds().max(0);
    let rate_now = round_usd(per_hour_now);
    // Nothing bills and nothing changed (a suspended or failed slice): nothing to accrue, and
    // moving `accruedThrough` alone would rewrite an idle object's status every step.
    let idle = rate_now == 0.0 && old.per_hour_usd == 0.0;
    if (idle || elapsed < ACCRUAL_STEP_SECS) && rate_now == old.per_hour_usd {
        return Some(old.clone());
    }
    Some(CostEstimate {
        so_far_usd: round_usd(old.so_far_usd + old.per_hour_usd * elapsed as f64 / 3600.0),
        per_hour_usd: rate_now,
        price_key: price_key.map(str::to_owned).or_else(|| old.price_key.clone()),
        accrued_through: Some(time(now)),
    })
}

/// `v >= 0` and not NaN.
pub fn non_negative(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// Rounded to a hundredth of a cent, so float noise never causes a status write.
pub fn round_usd(usd: f64) -> f64 {
    (usd * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::accelerator::parse_accelerator_type;

    #[test]
    fn slices_are_priced_per_chip_by_generation_and_capacity() {
        let t = PriceTable::default();
        for (accel, capacity, usd, key) in [
            ("v6e-8", CapacityKind::OnDemand, 21.6, "tpu-v6e-on-demand"),
            ("v6e-8", CapacityKind::Spot, 10.8, "tpu-v6e-spot"),
            ("v6e-8", CapacityKind::Queued, 21.6, "tpu-v6e-on-demand"),
            ("v4-16", CapacityKind::Reserved, 8.0 * 3.22, "tpu-v4-on-demand"),
            ("v5litepod-4", CapacityKind::OnDemand, 4.8, "tpu-v5e-on-demand"),
            ("v5p-8", CapacityKind::OnDemand, 16.8, "tpu-v5p-on-demand"),
            ("v3-8", CapacityKind::Spot, 2.4, "tpu-v3-spot"),
            ("v2-8", CapacityKind::OnDemand, 4.5, "tpu-v2-on-demand"),
        ] {
            let shape = parse_accelerator_type(accel).unwrap();
            let (got, got_key) = t.slice_per_hour(&shape, capacity);
            assert!((got - usd).abs() < 1e-9, "{accel} {capacity:?}: {got} != {usd}");
            assert_eq!(got_key, key);
        }
    }

    #[test]
    fn overrides_replace_defaults_and_unknown_names_are_errors() {
        let o: PriceOverrides = serde_json::from_value(serde_json::json!({
            "tpuChipHourUsd": {"v5e": {"onDemand": 1.0, "spot": 0.5}},
            "vertexMachineHourUsd": {"ct6e-standard-4t": 12.0}
        }))
        .unwrap();
        let t = PriceTable::with_overrides(&o).unwrap();
        let shape = parse_accelerator_type("v5litepod-8").unwrap();
        assert_eq!(t.slice_per_hour(&shape, CapacityKind::Spot).0, 4.0);
        let shape = parse_accelerator_type("v6e-8").unwrap();
        let (usd, key) = t.vertex_per_hour(VertexMachineType::Ct6eStandard4t, Some(&shape), 1, false);
        assert_eq!((usd, key.as_str()), (24.0, "vertex-ct6e-standard-4t-on-demand"));
        let bad: PriceOverrides =
            serde_json::from_value(serde_json::json!({"tpuChipHourUsd": {"v9": {"onDemand": 1, "spot": 1}}}))
                .unwrap();
        assert!(PriceTable::with_overrides(&bad).unwrap_err().contains("v9"));
    }

    #[test]
    fn accrual_follows_the_rate_in_effect_and_is_throttled() {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        assert_eq!(accrue(None, 0.0, None, t0), None, "nothing billed yet");
        let start = accrue(None, 21.6, Some("tpu-v6e-on-demand"), t0).unwrap();
        assert_eq!((start.so_far_usd, start.per_hour_usd), (0.0, 21.6));
        assert_eq!(
            accrue(Some(&start), 21.6, None, at(30)),
            Some(start.clone()),
            "throttled"
        );
        let hour = accrue(Some(&start), 21.6, None, at(3600)).unwrap();
        assert_eq!(
            (hour.so_far_usd, hour.price_key.as_deref()),
            (21.6, Some("tpu-v6e-on-demand"))
        );
        // The node went away: the half hour before is billed at the old rate, then nothing.
        let stopped = accrue(Some(&hour), 0.0, None, at(5400)).unwrap();
        assert_eq!((stopped.so_far_usd, stopped.per_hour_usd), (32.4, 0.0));
        let later = accrue(Some(&stopped), 0.0, None, at(90_000)).unwrap();
        assert_eq!(later.so_far_usd, 32.4);
    }

    #[test]
    fn vertex_defaults_follow_chip_prices() {
        let t = PriceTable::default();
        let shape = parse_accelerator_type("v6e-8").unwrap();
        // ct6e-standard-4t with a 2x4 topology = 2 hosts of 4 chips = 8 chips × 2.70.
        let (usd, _) = t.vertex_per_hour(VertexMachineType::Ct6eStandard4t, Some(&shape), 1, false);
        assert!((usd - 21.6).abs() < 1e-9, "{usd}");
        let (spot, _) = t.vertex_per_hour(VertexMachineType::Ct6eStandard4t, Some(&shape), 1, true);
        assert!((spot - 10.8).abs() < 1e-9, "{spot}");
        // cloud-tpu: one v3-8 machine (4 chips).
        let (usd, _) = t.vertex_per_hour(VertexMachineType::CloudTpu, None, 1, false);
        assert!((usd - 8.0).abs() < 1e-9, "{usd}");
    }
}
