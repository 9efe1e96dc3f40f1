//! Each `TpuPolicy`'s status: the live usage of the namespaces it selects (chips, estimated
//! spend, refused objects), so a tenant can `kubectl get tpupolicies` to see what is left.
//!
//! Refreshed every `poll_capacity` (30 s by default, at least 1 s) and whenever a policy or namespace label changes, by the leader
//! only (it runs with the controllers). Each namespace is listed once per refresh however many
//! policies select it, and a status is written only when it changed, so an idle cluster makes
//! no writes. A cluster without policies makes no calls at all.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use tpu_operator_api::{
    conditions::{self, reasons, types},
    tpu_policy::{NamespaceUsage, TpuPolicy, TpuPolicyStatus},
};

use super::{Tenancy, usage::Listed};
use crate::runtime::{clock::Clock, config::ControllerConfig, shutdown::Shutdown};

/// The least time between two refreshes (the interval is the capacity poll, default 30 s).
const MIN_REFRESH: Duration = Duration::from_secs(1);
/// The field manager of the status writes.
const MANAGER: &str = "tpu-operator";
/// Per-namespace rows kept in one status (the totals count every namespace).
const MAX_ROWS: usize = 100;

/// Writes every policy's status until `shutdown` fires (`config`: the namespace watched and the
/// refresh interval).
pub async fn run(tenancy: Arc<Tenancy>, clock: Arc<dyn Clock>, config: ControllerConfig, shutdown: Shutdown) {
    tenancy.policies.ready().await;
    // Once the policy caches stop (no caches at all, or their watch ended), the stream has ended
    // and must not be polled again: the refresh interval alone drives the report then.
    let mut changes = Some(Box::pin(tenancy.policies.changes()));
    let watched = config.namespace.as_deref();
    loop {
        if let Err(e) = refresh(&tenancy, clock.as_ref(), watched).await {
            tracing::warn!(error = %e, "refreshing TpuPolicy usage");
        }
        let changed = async {
            match changes.as_mut() {
                Some(stream) => stream.next().await,
                None => std::future::pending().await,
            }
        };
        let mut ended = false;
        tokio::select! {
            _ = tokio::time::sleep(config.poll_capacity.max(MIN_REFRESH)) => {}
            change = changed => ended = change.is_none(),
            _ = shutdown.clone() => return,
        }
        if ended {
            changes = None;
        }
    }
}

/// One pass: read each selected namespace once (of `watched` alone, when the operator watches
/// one), write the statuses that changed.
pub async fn refresh(
    tenancy: &Tenancy,
    clock: &dyn Clock,
    watched: Option<&str>,
) -> crate::runtime::error::Result<()> {
    let selections = tenancy.policies.selections();
    let mut rows: HashMap<String, NamespaceUsage> = HashMap::new();
    for (_, namespaces) in &selections {
        for ns in namespaces {
            if rows.contains_key(ns) || watched.is_some_and(|w| w != ns) {
                continue;
            }
            let listed = Listed::read(&tenancy.client, ns, &tenancy.prices).await?;
            rows.insert(ns.clone(), row(ns, &listed, tenancy));
        }
    }
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(clock.now().timestamp()).unwrap_or_default());
    for (policy, namespaces) in selections {
        let selected: Vec<&NamespaceUsage> = namespaces.iter().filter_map(|n| rows.get(n)).collect();
        let status = status_of(&policy, &selected, now.clone());
        if policy.status.as_ref() == Some(&status) {
            continue;
        }
        let name = policy.metadata.name.clone().unwrap_or_default();
        let body = serde_json::json!({
            "apiVersion": "tpu-operator.dev/v1alpha1",
            "kind": "TpuPolicy",
            "status": status,
        });
        Api::<TpuPolicy>::all(tenancy.client.clone())
            .patch_status(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body))
            .await
            .map_err(crate::runtime::error::ReconcileError::kube(
                "write TpuPolicy status",
            ))?;
    }
    Ok(())
}

/// What one namespace holds and how many of its objects a policy refuses.
fn row(namespace: &str, listed: &Listed, tenancy: &Tenancy) -> NamespaceUsage {
    let orphans = tenancy.admissions.orphans.holdings(namespace);
    let usage = super::usage::sum(listed.holdings.iter().chain(&orphans), "");
    NamespaceUsage {
        name: namespace.to_owned(),
        chips: usage.chips,
        // Cents: a status that changes with every float rounding would be rewritten each pass.
        spend_per_hour_usd: cents(usage.per_hour_usd),
        refused: listed.refused,
    }
}

/// `usd` rounded to cents, never `-0.0`: an empty `f64` sum is `-0.0` (Rust's float `Sum` starts
/// there), which serializes as `-0.0` and `kubectl get tpupolicies` prints as `-0`.
fn cents(usd: f64) -> f64 {
    // Adding `+0.0` turns `-0.0` into `+0.0` and leaves every other value as it is.
    (usd * 100.0).round() / 100.0 + 0.0
}

/// The status a policy should have, keeping the Ready condition's transition time when it holds.
pub fn status_of(policy: &TpuPolicy, selected: &[&NamespaceUsage], now: Time) -> TpuPolicyStatus {
    let mut rows: Vec<NamespaceUsage> = selected.iter().map(|r| (*r).clone()).collect();
    rows.sort_by(|a, b| {
        b.chips
            .cmp(&a.chips)
            .then(b.spend_per_hour_usd.total_cmp(&a.spend_per_hour_usd))
            .then(a.name.cmp(&b.name))
    });
    let chips = rows.iter().map(|r| r.chips).sum();
    let spend = cents(rows.iter().map(|r| r.spend_per_hour_usd).sum::<f64>());
    let refused = rows.iter().map(|r| r.refused).sum();
    let generation = policy.metadata.generation;
    let mut conditions = policy
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let message = format!("enforced in {} namespaces", rows.len());
    conditions::set_condition(
        &mut conditions,
        conditions::condition(types::READY, true, reasons::ENFORCED, message, generation, now),
    );
    let selected_namespaces = u32::try_from(rows.len()).unwrap_or(u32::MAX);
    rows.truncate(MAX_ROWS);
    TpuPolicyStatus {
        observed_generation: generation,
        conditions,
        selected_namespaces,
        chips,
        spend_per_hour_usd: spend,
        refused,
        namespaces: rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::tpu_policy::TpuPolicy;

    fn row(name: &str, chips: u32, usd: f64, refused: u32) -> NamespaceUsage {
        NamespaceUsage {
            name: name.into(),
            chips,
            spend_per_hour_usd: usd,
            refused,
        }
    }

    #[test]
    fn totals_busiest_first_and_a_stable_ready_condition() {
        let mut p = TpuPolicy::new("teams", Default::default());
        p.metadata.generation = Some(3);
        let (a, b) = (row("team-a", 8, 21.6, 0), row("team-b", 16, 43.2, 2));
        let first = status_of(
            &p,
            &[&a, &b],
            Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap()),
        );
        assert_eq!(
            (first.chips, first.refused, first.selected_namespaces),
            (24, 2, 2)
        );
        assert_eq!(first.spend_per_hour_usd, 64.8);
        assert_eq!(first.namespaces[0].name, "team-b");
        assert_eq!(first.observed_generation, Some(3));
        p.status = Some(first.clone());
        let again = status_of(
            &p,
            &[&a, &b],
            Time(k8s_openapi::jiff::Timestamp::from_second(200).unwrap()),
        );
        assert_eq!(again, first, "nothing changed: nothing to write");
    }

    /// Issue 46: a policy selecting no namespace (or only idle ones) showed `-0` in the USD/h
    /// column, because an empty float sum is `-0.0`.
    #[test]
    fn spend_of_a_policy_with_nothing_running_is_zero_not_negative_zero() {
        let p = TpuPolicy::new("idle", Default::default());
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap());
        let idle = row("team-a", 0, cents(-0.0), 0);
        for selected in [&[][..], &[&idle][..]] {
            let st = status_of(&p, selected, now.clone());
            assert!(st.spend_per_hour_usd.is_sign_positive(), "{selected:?}: {st:?}");
            let json = serde_json::to_value(&st).unwrap();
            assert_eq!(json["spendPerHourUsd"].to_string(), "0.0", "{json}");
        }
        assert!(cents(-0.001).is_sign_positive(), "a rounding to zero is +0 too");
    }
}
