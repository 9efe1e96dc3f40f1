//! Tenancy policy: who may spend what, per namespace.
//!
//! Cluster administrators write `TpuPolicy` objects (cluster-scoped, [`policies`] watches them);
//! every policy selecting a namespace governs it, and a namespace no policy selects gets the
//! operator's `namespacesWithoutPolicy` (allow or deny). Every controller asks [`precheck`] and
//! [`admit`] before any cloud create with a [`Request`] its kind builds from the spec
//! ([`request`] is its shape) and, for chip quota and budgets, the namespace's current [`Usage`]
//! ([`usage`], what each kind's objects hold, as the kind prices them). [`evaluate`]
//! ([`rules`]) is the pure decision against one policy; all must allow. A refusal is a
//! [`Denial`] whose message names the policy, the field and what it allows; the controllers
//! report it as `Stalled=True` reason `PolicyDenied` with a Warning event and make no cloud
//! call. [`report`] writes each policy's live usage to its status.
//!
//! See `docs/policy.md` for the reference.

pub mod adoption;
pub mod book;
pub mod budget_view;
pub mod budgets;
pub mod identity;
pub mod orphans;
pub mod policies;
pub mod references;
pub mod report;
pub mod request;
pub mod rules;
pub mod usage;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

pub use policies::{Governing, Policies, WithoutPolicy};
pub use request::{NetworkUse, Request, TpuUse};
pub use rules::{Denial, evaluate};
use tpu_operator_api::DeletionPolicy;
pub use tpu_operator_api::tpu_policy::{AcceleratorRule, BudgetUsage, TpuPolicySpec};
pub use usage::{Holding, HoldingsLister, HoldingsOf, Usage};

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tpu_operator_api::conditions::{find_condition, reasons, types};

use crate::{
    governance::pricing::PriceTable,
    runtime::{config::ControllerConfig, error::Result},
};

/// What tenancy decisions read: the cluster's policies, the namespaces' admissions and usage, the
/// price list, and the client usage is listed with. One per operator process, in the reconcile
/// context; it knows no kind and no context.
pub struct Tenancy {
    pub client: kube::Client,
    /// Who may use what, per namespace: the cluster's `TpuPolicy` objects (none watched:
    /// everything allowed).
    pub policies: Policies,
    /// Policy admissions per namespace: their lock and usage (see [`Admissions`]).
    pub admissions: Admissions,
    /// List prices for cost estimates, budgets and per-object spend limits.
    pub prices: Arc<PriceTable>,
    /// How each kind's objects are listed for a namespace's usage, in the order usage names
    /// them: the kinds' own, given when the process starts (none: nothing is counted).
    pub listers: Vec<Box<dyn HoldingsLister>>,
}

impl Tenancy {
    /// Nothing governed (no policy watched) until [`Tenancy::policies`] is replaced.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            policies: Policies::default(),
            admissions: Admissions::default(),
            prices: Arc::default(),
            listers: Vec::new(),
        }
    }

    /// The namespace's admission lock (see [`Admissions::try_enter`]).
    pub fn try_enter(&self, namespace: &str) -> Result<AdmissionGuard, Busy> {
        self.admissions.try_enter(&self.policies, namespace)
    }
}

/// The first look, before any cloud read: the rules that depend only on the spec (project,
/// location, accelerator, capacity, per-object spend), against every governing policy.
pub fn precheck(tenancy: &Tenancy, namespace: &str, requests: &[Request]) -> Result<(), Denial> {
    let governing = tenancy.policies.governing(namespace);
    check(&governing, requests, None)
}

fn check(governing: &Governing, requests: &[Request], usage: Option<&Usage>) -> Result<(), Denial> {
    if let Some(denial) = governing.refusal() {
        return Err(denial);
    }
    requests.iter().try_for_each(|r| governing.storage_scope(r))?;
    governing
        .rules()
        .try_for_each(|rule| requests.iter().try_for_each(|r| evaluate(Some(rule), r, usage)))
}

/// The Cloud Storage rule alone (`allowedBuckets`) for `req`'s locations, against every governing
/// policy: for a location the operator reads on every pass, not only before a create.
pub fn check_storage(policies: &Policies, namespace: &str, req: &Request) -> Result<(), Denial> {
    let governing = policies.governing(namespace);
    if let Some(denial) = governing.refusal() {
        return Err(denial);
    }
    governing.storage_scope(req)?;
    governing.rules().try_for_each(|rule| rules::storage(rule, req))
}

/// The check right before a create: every rule, with the namespace's usage (read only when a
/// governing policy has a chip quota or a budget; see [`book`]). `holder`: the object making the
/// requests (its own holdings do not count), as usage names it (`TpuSlice a`). An admitted
/// request is in the namespace's usage from now on. Call it holding the guard of [`Admissions::try_enter`] until the create is recorded in
/// status. The outer `Err` is a failed Kubernetes read.
pub async fn admit(
    tenancy: &Tenancy,
    namespace: &str,
    requests: &[Request],
    holder: &Holder<'_>,
) -> Result<Result<(), Denial>> {
    let governing = tenancy.policies.governing(namespace);
    if let Err(d) = check(&governing, requests, None) {
        return Ok(Err(d));
    }
    let counted = requests.iter().any(|r| r.tpu.is_some() || r.per_hour_usd > 0.0);
    if !counted || !governing.counts_usage() {
        return Ok(Ok(()));
    }
    let usage = tenancy
        .admissions
        .book
        .usage(tenancy, namespace, holder.uid)
        .await?;
    if let Err(d) = check(&governing, requests, Some(&usage)) {
        return Ok(Err(d));
    }
    if holder.holds {
        tenancy
            .admissions
            .book
            .admitted(namespace, holding(holder, requests));
    }
    Ok(Ok(()))
}

/// The object an admission is for.
#[derive(Clone, Copy, Debug)]
pub struct Holder<'a> {
    pub uid: &'a str,
    /// As usage lists it: `TpuSlice a`, `Vertex job of TrainingPipeline p`.
    pub what: &'a str,
    /// Whether the object itself holds what it is admitted for. A pipeline's training slice is
    /// held by its child TpuSlice, which is admitted (and counted) on its own: counted for the
    /// pipeline as well, it would be counted twice against the child's own admission.
    pub holds: bool,
}

/// What admitted `requests` will hold, as usage counts it.
fn holding(holder: &Holder<'_>, requests: &[Request]) -> usage::Holding {
    usage::Holding {
        uid: holder.uid.to_owned(),
        what: holder.what.to_owned(),
        chips: requests
            .iter()
            .filter_map(|r| r.tpu.as_ref())
            .map(|t| t.shape.chips)
            .sum(),
        per_hour_usd: requests.iter().map(|r| r.per_hour_usd).sum(),
    }
}

/// The deletion policy a deletion pass follows: the object's, except that `Orphan` counts only
/// while every policy governing the namespace sets `allowOrphan` (an unrestricted namespace may).
/// Admission refuses an `Orphan` create the policy forbids; this closes what admission cannot
/// see: a spec edited to `Orphan` after its create, and a policy tightened since.
pub fn deletion_policy(tenancy: &Tenancy, namespace: &str, spec: DeletionPolicy) -> DeletionPolicy {
    if spec == DeletionPolicy::Delete {
        return spec;
    }
    let governing = tenancy.policies.governing(namespace);
    if governing.refusal().is_none() && governing.rules().all(|r| r.policy.allow_orphan) {
        return spec;
    }
    tracing::info!(
        namespace,
        "deletionPolicy Orphan is not allowed by the namespace's TpuPolicy (allowOrphan); deleting the cloud resources"
    );
    DeletionPolicy::Delete
}

/// When an object the policy refused is looked at again. A refusal that may lift by itself
/// (chip quota, budget) is looked at after `poll_capacity` at first and less often the longer it
/// lasts, up to four times that, spread by a tenth either way, so a thousand refused objects
/// neither come back together nor every 30 s forever; other refusals need a spec or policy change
/// (a policy change wakes every object at once) and wait `poll_stable`. `refused`: the
/// `lastTransitionTime` of the object's `Stalled=True` condition, when it is a refusal already.
pub fn refusal_wait(
    config: &ControllerConfig,
    denial: &Denial,
    refused: &[Condition],
    uid: &str,
    now: DateTime<Utc>,
) -> std::time::Duration {
    if !denial.retry {
        return config.poll_stable;
    }
    let since = find_condition(refused, types::STALLED)
        .filter(|c| c.status == "True" && c.reason == reasons::POLICY_DENIED)
        .and_then(|c| DateTime::<Utc>::from_timestamp(c.last_transition_time.0.as_second(), 0));
    let lasted = since.and_then(|s| (now - s).to_std().ok()).unwrap_or_default();
    let base = config.poll_capacity;
    let wait = (base + lasted / 4).min(base * 4);
    wait.mul_f64(0.9 + 0.2 * crate::runtime::spread::fraction(uid, now.timestamp_millis()))
}

/// The policy a rule comes from, as messages name it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule<'a> {
    /// The `TpuPolicy`'s name.
    pub name: &'a str,
    pub policy: &'a TpuPolicySpec,
    /// The policy's record of spend per namespace and period (its `status.budgets`).
    pub budgets: &'a [BudgetUsage],
    /// The namespace the rule is applied to.
    pub namespace: &'a str,
}

/// Admissions per namespace: a lock under which the usage read, the create call and the status
/// write that records it happen, so two objects created at once cannot both fit under a quota
/// that has room for one, and the [`book`] of what the namespace holds. Only the leader runs
/// controllers, so in-process state is enough.
#[derive(Debug, Default)]
pub struct Admissions {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub book: book::UsageBook,
    /// What the namespaces' orphaned cloud resources hold (counted with their usage).
    pub orphans: orphans::OrphanBook,
}

/// The namespace's admission lock, held until a create is in status (`None`: the namespace counts
/// no usage, so nothing is serialized).
pub type AdmissionGuard = Option<tokio::sync::OwnedMutexGuard<()>>;

/// Another object of the namespace is being admitted: look again in [`Busy::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

impl Busy {
    /// Soon, spread so that the objects that found the lock taken do not come back together:
    /// for the object `uid` at `now` (milliseconds of the controllers' clock).
    pub fn wait(uid: &str, now: i64) -> std::time::Duration {
        crate::runtime::spread::between(
            uid,
            now,
            std::time::Duration::from_millis(250),
            std::time::Duration::from_millis(1_000),
        )
    }
}

impl Admissions {
    /// The namespace's lock when its policy counts usage (a chip quota or a budget); `Ok(None)`
    /// otherwise: without a limit to share there is nothing to serialize, and serializing every
    /// create of a namespace made submitting 10,000 objects take minutes. Never waits: while
    /// another object of the namespace holds it, `Err(Busy)`, and the caller requeues. A worker
    /// waiting here was a worker no other namespace could use.
    pub fn try_enter(&self, policies: &Policies, namespace: &str) -> Result<AdmissionGuard, Busy> {
        if !policies.governing(namespace).counts_usage() {
            return Ok(None);
        }
        let lock = self
            .locks
            .lock()
            .expect("admission locks poisoned")
            .entry(namespace.to_owned())
            .or_default()
            .clone();
        lock.try_lock_owned().map(Some).map_err(|_| Busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn refused_at(at: DateTime<Utc>) -> Vec<Condition> {
        vec![Condition {
            type_: types::STALLED.into(),
            status: "True".into(),
            reason: reasons::POLICY_DENIED.into(),
            message: "quota".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(at.timestamp()).unwrap(),
            ),
            observed_generation: None,
        }]
    }

    #[test]
    fn refused_objects_back_off_and_spread_out() {
        let config = ControllerConfig::default();
        let quota = Denial {
            message: "quota".into(),
            retry: true,
        };
        let now = Utc::now();
        let first = refusal_wait(&config, &quota, &[], "uid-1", now);
        assert!(
            first >= Duration::from_secs(27) && first <= Duration::from_secs(33),
            "{first:?}"
        );
        let hour = refusal_wait(
            &config,
            &quota,
            &refused_at(now - chrono::Duration::hours(1)),
            "uid-1",
            now,
        );
        assert!(
            hour >= Duration::from_secs(108) && hour <= Duration::from_secs(132),
            "{hour:?}"
        );
        let waits: std::collections::BTreeSet<_> = (0..20)
            .map(|i| refusal_wait(&config, &quota, &[], &format!("uid-{i}"), now))
            .collect();
        assert!(waits.len() > 1, "spread across objects");
        let fixed = Denial {
            retry: false,
            ..quota
        };
        assert_eq!(
            refusal_wait(&config, &fixed, &[], "uid-1", now),
            config.poll_stable
        );
    }
}
