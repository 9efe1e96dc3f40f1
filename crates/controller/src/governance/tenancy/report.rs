//! Each `TpuPolicy`'s status: the live usage of the namespaces it selects (chips, estimated
//! spend, refused objects), so a tenant can `kubectl get tpupolicies` to see what is left.
//!
//! Refreshed every `poll_capacity` (30 s by default, at least 1 s) and whenever a policy or namespace label changes, by the leader
//! only (it runs with the controllers). Each namespace is listed once per refresh however many
//! policies select it, and a status is written only when it changed, so an idle cluster makes
//! no writes. A cluster without policies makes no calls at all.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use tpu_operator_api::{
    conditions::{self, reasons, types},
    tpu_policy::{BudgetActionKind, BudgetUsage, NamespaceUsage, TpuPolicy, TpuPolicyStatus, cents},
};

use super::{
    Tenancy, budget_view,
    budgets::{self, Reached},
    usage::Listed,
};
use crate::runtime::{
    clock::Clock,
    config::ControllerConfig,
    events::{EventRecorder, EventType},
    shutdown::Shutdown,
};

/// The least time between two refreshes (the interval is the capacity poll, default 30 s).
const MIN_REFRESH: Duration = Duration::from_secs(1);
/// The field manager of the status writes.
const MANAGER: &str = "tpu-operator";
/// Per-namespace rows kept in one status (the totals count every namespace).
const MAX_ROWS: usize = 100;
/// The longest a budget record goes unwritten while its spend stays within the cent: an idle
/// cluster with budgets writes each policy this often, and a restart meters from at most this far
/// back at the burn rate it then reads.
const RECORD_AT_LEAST: Duration = Duration::from_secs(600);

/// Writes every policy's status until `shutdown` fires (`config`: the namespace watched and the
/// refresh interval).
pub async fn run(tenancy: Arc<Tenancy>, clock: Arc<dyn Clock>, config: ControllerConfig, shutdown: Shutdown) {
    tenancy.policies.ready().await;
    let mut metering = Metering::new(&tenancy.client, clock.clone());
    // Once the policy caches stop (no caches at all, or their watch ended), the stream has ended
    // and must not be polled again: the refresh interval alone drives the report then.
    let mut changes = Some(Box::pin(tenancy.policies.changes()));
    let watched = config.namespace.as_deref();
    loop {
        if let Err(e) = refresh(&tenancy, clock.as_ref(), watched, &mut metering).await {
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

/// What the report keeps between refreshes for the period budgets: the last metered record of
/// each policy by UID (written or not, see [`budgets_due`]), the recorder of their Events, and
/// the namespaces' views as written.
struct Metering {
    last: HashMap<String, Vec<BudgetUsage>>,
    recorder: EventRecorder,
    /// What each namespace's budget view last said, as written.
    views: budget_view::Views,
}

impl Metering {
    fn new(client: &kube::Client, clock: Arc<dyn Clock>) -> Self {
        let mut recorder = EventRecorder::new(client.clone(), "tpu-operator", None);
        recorder.set_clock(clock);
        Self {
            last: HashMap::new(),
            recorder,
            views: budget_view::Views::new(),
        }
    }
}

/// One pass: read each selected namespace once (of `watched` alone, when the operator watches
/// one), meter the budgets, publish the Events of the budget actions that came into force, then
/// write the statuses that changed.
async fn refresh(
    tenancy: &Tenancy,
    clock: &dyn Clock,
    watched: Option<&str>,
    metering: &mut Metering,
) -> crate::runtime::error::Result<()> {
    let selections = tenancy.policies.selections();
    let (rows, holders) = read_selected(tenancy, &selections, watched).await?;
    let rates: HashMap<String, f64> = rows
        .iter()
        .map(|(ns, r)| (ns.clone(), r.spend_per_hour_usd))
        .collect();
    let at = k8s_openapi::jiff::Timestamp::from_second(clock.now().timestamp()).unwrap_or_default();
    let now = Time(at);
    let mut views = budget_view::Views::new();
    for (policy, namespaces) in selections {
        // An operator that watches one namespace reports only the policies selecting it: a
        // policy of other namespaces is another operator's to write (a write from here would
        // erase its record with an empty one).
        if watched.is_some() && namespaces.is_empty() {
            continue;
        }
        let name = policy.metadata.name.clone().unwrap_or_default();
        // By UID: a policy deleted and created again under its name starts a record of its own.
        let uid = policy.metadata.uid.clone().unwrap_or_default();
        let metered: Vec<String> = namespaces.into_iter().filter(|n| rows.contains_key(n)).collect();
        let last = metering.last.get(&uid).map_or(&[][..], Vec::as_slice);
        let (budgets, reached) = budgets::meter(&policy, &metered, &rates, last, at);
        let selected: Vec<&NamespaceUsage> = metered.iter().filter_map(|n| rows.get(n)).collect();
        let status = status_of(&policy, &selected, budgets.clone(), now.clone());
        // Announced before the record says it was reached, each Event once by name: a process
        // killed between the two announces again on the next refresh, and the Events already
        // there are left as they are. (The other order would lose an announcement.)
        let mut announced = true;
        for r in &reached {
            announced &= publish_reached(metering, &policy, r, holders.get(&r.usage.namespace)).await;
        }
        // Not recorded as reached until every Event is out: otherwise the next refresh meters
        // the same interval once more and announces again.
        if announced {
            if status_due(policy.status.as_ref(), &status, at) {
                write(tenancy, &name, &status).await?;
            }
            metering.last.insert(uid, budgets.clone());
        }
        budget_view::add(&mut views, &name, &budgets);
    }
    write_views(tenancy, metering, views).await;
    Ok(())
}

/// The usage row and the quota holders of each selected namespace, read once (of `watched` alone,
/// when the operator watches one).
async fn read_selected(
    tenancy: &Tenancy,
    selections: &[(Arc<TpuPolicy>, Vec<String>)],
    watched: Option<&str>,
) -> crate::runtime::error::Result<Selected> {
    let mut rows: HashMap<String, NamespaceUsage> = HashMap::new();
    let mut holders: HashMap<String, Vec<ObjectReference>> = HashMap::new();
    for (_, namespaces) in selections {
        for ns in namespaces {
            if rows.contains_key(ns) || watched.is_some_and(|w| w != ns) {
                continue;
            }
            let listed = Listed::read(&tenancy.client, ns, &tenancy.prices, &tenancy.listers).await?;
            rows.insert(ns.clone(), row(ns, &listed, tenancy));
            holders.insert(ns.clone(), listed.holders);
        }
    }
    Ok((rows, holders))
}

/// Each selected namespace's usage row, and the objects holding its quota.
type Selected = (
    HashMap<String, NamespaceUsage>,
    HashMap<String, Vec<ObjectReference>>,
);

/// Writes the budget views that changed, and empties those of namespaces no budget covers now.
async fn write_views(tenancy: &Tenancy, metering: &mut Metering, mut views: budget_view::Views) {
    let gone: Vec<String> = metering
        .views
        .keys()
        .filter(|ns| !views.contains_key(*ns))
        .cloned()
        .collect();
    for namespace in gone {
        views.insert(namespace, Default::default());
    }
    for (namespace, lines) in views {
        if metering.views.get(&namespace) == Some(&lines) {
            continue;
        }
        // One namespace's failed view (its ConfigMap deleted mid-write, a quota on ConfigMaps)
        // does not hold the others': it is written again at the next refresh.
        if let Err(e) = budget_view::write(&tenancy.client, &namespace, &lines).await {
            tracing::warn!(error = %e, namespace, "writing the budget view");
            continue;
        }
        if lines.is_empty() {
            metering.views.remove(&namespace);
        } else {
            metering.views.insert(namespace, lines);
        }
    }
}

/// Whether `status` must replace `recorded`: anything but the budget record changed, or the
/// record is due ([`budgets_due`]).
fn status_due(
    recorded: Option<&TpuPolicyStatus>,
    status: &TpuPolicyStatus,
    now: k8s_openapi::jiff::Timestamp,
) -> bool {
    let Some(recorded) = recorded else {
        return true;
    };
    if recorded == status {
        return false;
    }
    let same_but_budgets = TpuPolicyStatus {
        budgets: recorded.budgets.clone(),
        ..status.clone()
    };
    *recorded != same_but_budgets || budgets_due(&recorded.budgets, &status.budgets, now)
}

/// Whether the budget record must be written: an action, threshold or period changed, the spend
/// moved by a cent, or the record is older than [`RECORD_AT_LEAST`]. Between writes the metered
/// record is kept in memory ([`Metering`]); a restart meters on from the written one, whose spend
/// and `accountedThrough` were written together, so nothing is credited twice.
fn budgets_due(recorded: &[BudgetUsage], metered: &[BudgetUsage], now: k8s_openapi::jiff::Timestamp) -> bool {
    recorded.len() != metered.len()
        || recorded.iter().zip(metered).any(|(r, m)| {
            (
                &r.namespace,
                r.period,
                &r.period_start,
                &r.in_force,
                r.reached_percent,
            ) != (
                &m.namespace,
                m.period,
                &m.period_start,
                &m.in_force,
                m.reached_percent,
            ) || r.spent_cents() != m.spent_cents()
                || now.as_second() - r.accounted_through.0.as_second() >= RECORD_AT_LEAST.as_secs() as i64
        })
}

async fn write(tenancy: &Tenancy, name: &str, status: &TpuPolicyStatus) -> crate::runtime::error::Result<()> {
    let body = serde_json::json!({
        "apiVersion": TpuPolicy::api_version(&()),
        "kind": TpuPolicy::kind(&()),
        "status": status,
    });
    Api::<TpuPolicy>::all(tenancy.client.clone())
        .patch_status(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body))
        .await
        .map_err(crate::runtime::error::ReconcileError::kube(
            "write TpuPolicy status",
        ))?;
    Ok(())
}

/// One Event on the policy and one on each object of the namespace holding capacity: the
/// namespace's own users see it with their objects, and GitOps notifications pick it up. Each
/// is published once per threshold and period, whichever process publishes it. Whether every
/// one was.
async fn publish_reached(
    metering: &Metering,
    policy: &TpuPolicy,
    r: &Reached,
    holders: Option<&Vec<ObjectReference>>,
) -> bool {
    let u = &r.usage;
    let note = format!(
        "TpuPolicy {}: namespace {} {} ({} % reached): {} until {}",
        policy.metadata.name.as_deref().unwrap_or_default(),
        u.namespace,
        u.spent_of_budget(),
        r.at_percent,
        match r.action {
            BudgetActionKind::Notify => "notified",
            BudgetActionKind::SpotOnly => "new TPU work must use Spot capacity",
            BudgetActionKind::RefuseNewWork => "no new work starts",
            BudgetActionKind::SuspendAtCheckpoint => {
                "no new work starts, and training pipelines are suspended at their next committed checkpoint"
            }
        },
        u.period_end.0,
    );
    let type_ = match r.action {
        BudgetActionKind::Notify => EventType::Normal,
        _ => EventType::Warning,
    };
    let key = format!(
        "budget/{}/{:?}/{}/{}",
        u.namespace, u.period, u.period_start.0, r.at_percent
    );
    let policy_ref = policy.object_ref(&());
    let mut published = true;
    for regarding in std::iter::once(&policy_ref).chain(holders.into_iter().flatten()) {
        match metering
            .recorder
            .publish_once(regarding, type_, reasons::BUDGET_THRESHOLD_REACHED, &note, &key)
            .await
        {
            Ok(()) => {}
            Err(e) if crate::runtime::error::unanswered(&e) => {
                tracing::warn!(error = %e, "publishing a budget Event; trying again at the next refresh");
                published = false;
            }
            // Refused for good (a namespace being deleted, a missing grant): trying again would
            // hold the budget's record back forever.
            Err(e) => {
                tracing::warn!(error = %e, "a budget Event was refused; not publishing it again");
            }
        }
    }
    published
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

/// The status a policy should have, keeping the Ready condition's transition time when it holds.
pub fn status_of(
    policy: &TpuPolicy,
    selected: &[&NamespaceUsage],
    budgets: Vec<BudgetUsage>,
    now: Time,
) -> TpuPolicyStatus {
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
        budgets,
        // A newer release's fields go back as read (see `NewerFields`).
        newer_fields: policy
            .status
            .as_ref()
            .map(|s| s.newer_fields.clone())
            .unwrap_or_default(),
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
            Vec::new(),
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
            Vec::new(),
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
            let st = status_of(&p, selected, Vec::new(), now.clone());
            assert!(st.spend_per_hour_usd.is_sign_positive(), "{selected:?}: {st:?}");
            let json = serde_json::to_value(&st).unwrap();
            assert_eq!(json["spendPerHourUsd"].to_string(), "0.0", "{json}");
        }
        assert!(cents(-0.001).is_sign_positive(), "a rounding to zero is +0 too");
    }
}
