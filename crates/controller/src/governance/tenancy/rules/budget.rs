//! Period budgets (`spec.budgets`): the actions in force for the namespace, as the policy's
//! status records them, decide whether new work may start. Checked right before a create only:
//! what runs keeps running.

use tpu_operator_api::tpu_policy::{BudgetActionKind, CapacityKind};

use super::{Denial, Request, Rule};

/// Refuses `req` while an action of one of the namespace's budgets forbids it: `RefuseNewWork`
/// any new work, `SpotOnly` TPU capacity other than Spot. Both lift when the period ends.
pub(super) fn period_budgets(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let what = &req.what;
    for usage in rule.budgets.iter().filter(|b| b.namespace == rule.namespace) {
        let spent = format!("the namespace {}", usage.spent_of_budget());
        if usage.enforces(BudgetActionKind::RefuseNewWork) {
            let msg = format!(
                "{what} is new work, and {spent}: RefuseNewWork is in force until the period ends \
                 at {}. Running objects keep running",
                usage.period_end.0
            );
            return Err(Denial::usage(rule, "budgets", msg));
        }
        let not_spot = req.tpu.as_ref().is_some_and(|t| t.capacity != CapacityKind::Spot);
        if usage.enforces(BudgetActionKind::SpotOnly) && not_spot {
            let capacity = req.tpu.as_ref().map_or("", |t| t.capacity.as_str());
            let msg = format!(
                "{what} uses {capacity} capacity, and {spent}: SpotOnly is in force until the \
                 period ends at {}; use Spot capacity (spec.capacity.spot) or wait",
                usage.period_end.0
            );
            return Err(Denial::usage(rule, "budgets", msg));
        }
    }
    Ok(())
}
