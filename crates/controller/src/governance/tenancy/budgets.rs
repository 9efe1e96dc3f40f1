//! Metering each policy's period budgets (`spec.budgets`) for the namespaces it selects, on every
//! usage refresh ([`super::report`]). Pure: what to write and which actions just came into force.
//! The arithmetic of one namespace's period is [`BudgetUsage::metered`].

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;
use tpu_operator_api::tpu_policy::{BudgetActionKind, BudgetPeriod, BudgetUsage, TpuPolicy};

/// An action that came into force at this refresh, for its Events.
#[derive(Clone, Debug, PartialEq)]
pub struct Reached {
    pub action: BudgetActionKind,
    pub at_percent: u32,
    pub usage: BudgetUsage,
}

/// `policy`'s budgets for each of `namespaces`, brought up to `now` at the namespaces' burn rates
/// (`rates`, US dollars per hour; a namespace not in it burns nothing). `written`: what this
/// process last wrote for the policy, which a lagging cache may not show yet: of the two
/// records of a namespace's period, the one accounted further is metered on, so no interval is
/// credited twice.
pub fn meter(
    policy: &TpuPolicy,
    namespaces: &[String],
    rates: &HashMap<String, f64>,
    written: &[BudgetUsage],
    now: Timestamp,
) -> (Vec<BudgetUsage>, Vec<Reached>) {
    let recorded = policy.status.as_ref().map_or(&[][..], |s| s.budgets.as_slice());
    let mut usage = Vec::new();
    let mut reached = Vec::new();
    for budget in policy.spec.budgets.iter().flatten() {
        for namespace in namespaces {
            let previous = newest(recorded.iter().chain(written), namespace, budget.period);
            let rate = rates.get(namespace).copied().unwrap_or(0.0);
            let metered = BudgetUsage::metered(previous, namespace, budget, rate, now);
            // Thresholds passed since the record this refresh metered on (all of them in a
            // new period): their Events go out once.
            let before = match previous {
                Some(p) if p.period_start == metered.period_start => p.reached_percent.unwrap_or(0),
                _ => 0,
            };
            let now_at = metered.reached_percent.unwrap_or(0);
            for threshold in budget.thresholds() {
                if threshold.at_percent > before && threshold.at_percent <= now_at {
                    reached.push(Reached {
                        action: threshold.action,
                        at_percent: threshold.at_percent,
                        usage: metered.clone(),
                    });
                }
            }
            usage.push(metered);
        }
    }
    usage.sort_by(|a, b| (&a.namespace, a.period).cmp(&(&b.namespace, b.period)));
    (usage, reached)
}

/// Of `records`, the one of `namespace`'s `period` accounted furthest.
fn newest<'a>(
    records: impl Iterator<Item = &'a BudgetUsage>,
    namespace: &str,
    period: BudgetPeriod,
) -> Option<&'a BudgetUsage> {
    records
        .filter(|r| r.namespace == namespace && r.period == period)
        .max_by_key(|r| (r.period_start.0, r.accounted_through.0))
}

#[cfg(test)]
mod tests;
