//! Each namespace's own view of its period budgets: the ConfigMap `tpu-operator-budget` in the
//! namespace, one key per policy and period (`<policy>.<Period>`), a line saying what was spent,
//! what remains, what is in force and what comes next. Why a ConfigMap: the namespace's `view`
//! role reads it (no grant on the cluster-scoped `TpuPolicy`, whose status shows every namespace's
//! spend), it needs no new kind installed, and the operator's grant is one name in each namespace
//! (`resourceNames`). It is a view, never read back: the record is the policy's `status.budgets`,
//! so a tenant who edits it misleads only itself until the next write puts it right.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use tpu_operator_api::tpu_policy::BudgetUsage;

use crate::runtime::error::{ReconcileError, Result};

/// The ConfigMap's name, in every namespace a budget applies to.
pub const CONFIGMAP: &str = "tpu-operator-budget";
const MANAGER: &str = "budget-view.tpu-operator.dev";

/// The view's lines by namespace, then by key.
pub type Views = BTreeMap<String, BTreeMap<String, String>>;

/// Adds `policy`'s records to `views`.
pub fn add(views: &mut Views, policy: &str, records: &[BudgetUsage]) {
    for r in records {
        views
            .entry(r.namespace.clone())
            .or_default()
            .insert(format!("{policy}.{:?}", r.period), line(r));
    }
}

/// `spent $812.40 of $1000.00 (81 %), $187.60 left; in force: Notify; next: SpotOnly at $900.00
/// (90 %), expected 2026-11-29T14:00:00Z; period 2026-11-01T00:00:00Z to 2026-12-01T00:00:00Z`.
pub fn line(r: &BudgetUsage) -> String {
    let spent = r.spent_cents();
    let percent = if r.limit_usd > 0.0 {
        (spent / r.limit_usd * 100.0).floor()
    } else {
        0.0
    };
    let in_force: Vec<&str> = r.in_force.iter().map(|a| a.as_str()).collect();
    let in_force = if in_force.is_empty() {
        "nothing".to_owned()
    } else {
        in_force.join(", ")
    };
    let next = match &r.next_action {
        Some(n) => {
            let when = n
                .expected_time
                .as_ref()
                .map_or("not at the current rate".to_owned(), |t| {
                    format!("expected {}", t.0)
                });
            format!(
                "{} at ${:.2} ({} %), {when}",
                n.action.as_str(),
                n.at_usd,
                n.at_percent
            )
        }
        None => "none".to_owned(),
    };
    format!(
        "spent ${spent:.2} of ${:.2} ({percent} %), ${:.2} left; in force: {in_force}; next: {next}; \
         period {} to {}",
        r.limit_usd,
        (r.limit_usd - spent).max(0.0),
        r.period_start.0,
        r.period_end.0,
    )
}

/// Writes `namespace`'s view (server-side apply: keys no longer given are removed).
pub async fn write(client: &kube::Client, namespace: &str, lines: &BTreeMap<String, String>) -> Result<()> {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP,
            "labels": {"app.kubernetes.io/managed-by": "tpu-operator"},
        },
        "data": lines,
    });
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            CONFIGMAP,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ReconcileError::kube(
            "write the namespace's budget view ConfigMap",
        ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use tpu_operator_api::tpu_policy::{BudgetActionKind, BudgetPeriod, NextBudgetAction};

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_line_says_spent_left_in_force_next_and_the_period() {
        let r = BudgetUsage {
            namespace: "team-a".into(),
            period: BudgetPeriod::Month,
            period_start: t("2026-11-01T00:00:00Z"),
            period_end: t("2026-12-01T00:00:00Z"),
            spent_usd: 812.404,
            limit_usd: 1000.0,
            accounted_through: t("2026-11-26T10:00:00Z"),
            in_force: vec![BudgetActionKind::Notify],
            reached_percent: Some(80),
            next_action: Some(NextBudgetAction {
                action: BudgetActionKind::SpotOnly,
                at_percent: 90,
                at_usd: 900.0,
                expected_time: Some(t("2026-11-29T14:00:00Z")),
            }),
        };
        assert_eq!(
            line(&r),
            "spent $812.40 of $1000.00 (81 %), $187.60 left; in force: Notify; next: SpotOnly at \
             $900.00 (90 %), expected 2026-11-29T14:00:00Z; period 2026-11-01T00:00:00Z to \
             2026-12-01T00:00:00Z"
        );
        let mut views = Views::new();
        add(&mut views, "teams", &[r]);
        assert!(views["team-a"].contains_key("teams.Month"));
    }
}
