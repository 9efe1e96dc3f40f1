//! Tenancy policy: who may spend what, per namespace.
//!
//! Cluster administrators write `TpuPolicy` objects (cluster-scoped, [`policies`] watches them);
//! every policy selecting a namespace governs it, and a namespace no policy selects gets the
//! operator's `namespacesWithoutPolicy` (allow or deny). Every controller asks [`precheck`] and
//! [`admit`] before any cloud create with a [`Request`] built from the spec ([`request`]) and,
//! for chip quota and budgets, the namespace's current [`Usage`] ([`usage`]). [`evaluate`]
//! ([`rules`]) is the pure decision against one policy; all must allow. A refusal is a
//! [`Denial`] whose message names the policy, the field and what it allows; the controllers
//! report it as `Stalled=True` reason `PolicyDenied` with a Warning event and make no cloud
//! call. [`report`] writes each policy's live usage to its status.
//!
//! See `docs/policy.md` for the reference.

pub mod adoption;
pub mod policies;
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
pub use tpu_operator_api::tpu_policy::{AcceleratorRule, TpuPolicySpec};
pub use usage::Usage;

use crate::runtime::{context::Context, error::Result};

/// The first look, before any cloud read: the rules that depend only on the spec (project,
/// location, accelerator, capacity, per-object spend), against every governing policy.
pub fn precheck(ctx: &Context, namespace: &str, requests: &[Request]) -> Result<(), Denial> {
    let governing = ctx.policies.governing(namespace);
    check(&governing, requests, None)
}

fn check(governing: &Governing, requests: &[Request], usage: Option<&Usage>) -> Result<(), Denial> {
    if let Some(denial) = governing.refusal() {
        return Err(denial);
    }
    governing
        .rules()
        .try_for_each(|rule| requests.iter().try_for_each(|r| evaluate(Some(rule), r, usage)))
}

/// The check right before a create: every rule, with the namespace's usage (listed only when a
/// governing policy has a chip quota or a budget). `exclude`: UIDs whose holdings do not count
/// (the object itself, a pipeline's own children). Call it holding
/// `ctx.admission.lock_if_counted(..)` until the create is recorded in status. The outer `Err` is
/// a failed Kubernetes read.
pub async fn admit(
    ctx: &Context,
    namespace: &str,
    requests: &[Request],
    exclude: &[&str],
) -> Result<Result<(), Denial>> {
    let governing = ctx.policies.governing(namespace);
    if let Err(d) = check(&governing, requests, None) {
        return Ok(Err(d));
    }
    let counted = requests.iter().any(|r| r.tpu.is_some() || r.per_hour_usd > 0.0);
    if !counted || !governing.counts_usage() {
        return Ok(Ok(()));
    }
    let usage = usage::namespace_usage(ctx, namespace, exclude).await?;
    Ok(check(&governing, requests, Some(&usage)))
}

/// The policy a rule comes from, as messages name it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule<'a> {
    /// The `TpuPolicy`'s name.
    pub name: &'a str,
    pub policy: &'a TpuPolicySpec,
}

/// Serializes admissions per namespace: the usage read, the create call and the status write that
/// records it happen under one lock, so two objects created at once cannot both fit under a quota
/// that has room for one. Only the leader runs controllers, so an in-process lock is enough.
#[derive(Debug, Default)]
pub struct AdmissionLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl AdmissionLocks {
    /// The namespace's lock when its policy counts usage (a chip quota or a budget); `None`
    /// otherwise: without a limit to share there is nothing to serialize, and serializing every
    /// create of a namespace made submitting 10,000 objects take minutes.
    pub async fn lock_if_counted(
        &self,
        policies: &Policies,
        namespace: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        if !policies.governing(namespace).counts_usage() {
            return None;
        }
        Some(self.lock(namespace).await)
    }

    pub async fn lock(&self, namespace: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .0
            .lock()
            .expect("admission locks poisoned")
            .entry(namespace.to_owned())
            .or_default()
            .clone();
        lock.lock_owned().await
    }
}
