//! Estimated Dataproc Serverless spend of an object, across all its attempts.
//!
//! List prices of the Standard compute tier, used for budgeting and alerts, not billing. Dataproc
//! reports the total usage of a batch only once it is terminal, so the estimate grows per finished
//! attempt; while a batch runs, its current DCU count gives the burn rate.

use tpu_operator_api::common::CostEstimate;

use super::observe::Usage;

/// Price-table entry named in `status.estimatedCost.priceKey`.
pub const PRICE_KEY: &str = "dataproc-serverless-standard";
/// US dollars per DCU-hour (Standard tier).
pub const DCU_HOUR_USD: f64 = 0.06;
/// US dollars per GB-month of shuffle storage (Standard tier); a month is 730 hours.
pub const SHUFFLE_GB_MONTH_USD: f64 = 0.04;

/// Cost of a finished attempt's usage.
pub fn attempt_usd(usage: &Usage) -> f64 {
    usage.dcu_seconds / 3600.0 * DCU_HOUR_USD
        + usage.shuffle_gb_seconds / (730.0 * 3600.0) * SHUFFLE_GB_MONTH_USD
}

/// The new estimate: `previous` carries the finished attempts; a batch whose attempt is settled
/// (read for the last time) adds its total, a running one only sets the burn rate.
pub fn estimate(previous: Option<&CostEstimate>, usage: &Usage, settled: bool) -> CostEstimate {
    let carried = previous.map_or(0.0, |c| c.so_far_usd);
    let (so_far_usd, per_hour_usd) = if settled {
        (carried + attempt_usd(usage), 0.0)
    } else {
        (carried, usage.current_dcu * DCU_HOUR_USD)
    };
    CostEstimate {
        so_far_usd: round_cents(so_far_usd),
        per_hour_usd: round_cents(per_hour_usd),
        price_key: Some(PRICE_KEY.to_string()),
        accrued_through: None,
    }
}

/// Rounded to a hundredth of a cent, so tiny float noise never causes a status write.
fn round_cents(usd: f64) -> f64 {
    (usd * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_attempts_add_up_and_running_ones_set_the_rate() {
        // 12 DCUs for 2 minutes = 0.4 DCU-hours = $0.024 (+ shuffle 200 GB for 120 s).
        let finished = Usage {
            dcu_seconds: 12.0 * 120.0,
            shuffle_gb_seconds: 200.0 * 120.0,
            current_dcu: 0.0,
        };
        let first = estimate(None, &finished, true);
        assert_eq!(first.so_far_usd, 0.0244);
        assert_eq!(first.per_hour_usd, 0.0);
        assert_eq!(first.price_key.as_deref(), Some(PRICE_KEY));

        let running = Usage {
            current_dcu: 12.0,
            ..Usage::default()
        };
        let during = estimate(Some(&first), &running, false);
        assert_eq!((during.so_far_usd, during.per_hour_usd), (0.0244, 0.72));

        let second = estimate(Some(&during), &finished, true);
        assert_eq!(second.so_far_usd, 0.0488);
    }
}
