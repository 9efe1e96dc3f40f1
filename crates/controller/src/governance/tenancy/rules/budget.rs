//! Period budgets (`spec.budgets`): the actions in force for the namespace, as the policy's
//! status records them, decide whether new work may start. Checked right before a create only:
//! what runs keeps running.

use tpu_operator_api::tpu_policy::{BudgetActionKind, CapacityKind};

use super::{Denial, Request, Rule};

/// Refuses `req` while an action of one of the namespace's budgets forbids it: `RefuseNewWork`
/// and `SuspendAtCheckpoint` any new work, `SpotOnly` TPU capacity other than Spot. Both lift when the period ends.
pub(super) fn period_budgets(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let what = &req.what;
    for usage in rule.budgets.iter().filter(|b| b.namespace == rule.namespace) {
        let spent = format!("the namespace {}", usage.spent_of_budget());
        let refusing = [
            BudgetActionKind::SuspendAtCheckpoint,
            BudgetActionKind::RefuseNewWork,
        ]
        .into_iter()
        .find(|a| usage.enforces(*a));
        if let Some(action) = refusing {
            let running = match action {
                BudgetActionKind::SuspendAtCheckpoint => {
                    "running training pipelines are suspended at their next committed checkpoint"
                }
                _ => "running objects keep running",
            };
            let msg = format!(
                "{what} is new work, and {spent}: {} is in force until the period ends at {}; {running}",
                action.as_str(),
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

/// A `SuspendAtCheckpoint` budget action in force for a namespace: running training pipelines
/// stop at their next committed checkpoint and resume at `until`.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspending {
    /// `TpuPolicy team-a: namespace ml has spent $X of its $Y Day budget`, for status and Events.
    pub budget: String,
    /// The end of the budget's period, when the action lifts.
    pub until: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// The `SuspendAtCheckpoint` action in force for `namespace` among `rules`' budgets, if any
/// (the one whose period ends last, when several are: the run waits for all of them).
pub fn suspending<'a>(rules: impl Iterator<Item = Rule<'a>>) -> Option<Suspending> {
    rules
        .flat_map(|rule| {
            rule.budgets
                .iter()
                .filter(move |b| b.namespace == rule.namespace)
                .filter(|b| b.enforces(BudgetActionKind::SuspendAtCheckpoint))
                .map(move |b| Suspending {
                    budget: format!(
                        "TpuPolicy {}: namespace {} {}",
                        rule.name,
                        b.namespace,
                        b.spent_of_budget()
                    ),
                    until: b.period_end.clone(),
                })
        })
        .max_by_key(|s| s.until.0)
}
