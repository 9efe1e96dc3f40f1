//! Tenancy policy: who may spend what, per namespace.
//!
//! The operator's config holds one [`TenancyPolicy`]; each namespace is governed by one
//! [`NamespacePolicy`] (an exact entry, else the longest `prefix*` entry, else `default`, else
//! none: unrestricted). Every controller asks [`evaluate`] (pure, [`rules`]) before any cloud create
//! with a [`Request`] built from the spec ([`request`]) and, for chip quota and budgets, the
//! namespace's current [`Usage`] ([`usage`], the only part that reads the cluster). A refusal is a
//! [`Denial`] whose message names the rule and what it allows; the controllers report it as
//! `Stalled=True` reason `PolicyDenied` with a Warning event and make no cloud call.
//!
//! See `docs/policy.md` for the reference.

pub mod adoption;
pub mod request;
pub mod rules;
pub mod usage;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};

pub use request::{NetworkUse, Request, TpuUse};
pub use rules::{Denial, evaluate};
pub use usage::Usage;

use crate::{
    context::Context,
    error::Result,
    pricing::{CapacityKind, parse_family},
};

/// The first look, before any cloud read: the rules that depend only on the spec (project,
/// location, accelerator, capacity, per-object spend).
pub fn precheck(ctx: &Context, namespace: &str, requests: &[Request]) -> Result<(), Denial> {
    let Some((name, policy)) = ctx.tenancy.rule_for(namespace) else {
        return Ok(());
    };
    let rule = Rule { name: &name, policy };
    requests.iter().try_for_each(|r| evaluate(Some(rule), r, None))
}

/// The check right before a create: every rule, with the namespace's usage (listed only when the
/// policy has a chip quota or a budget). `exclude`: UIDs whose holdings do not count (the object
/// itself, a pipeline's own children). Call it holding `ctx.admission.lock_if_counted(..)` until
/// the create is recorded in status. The outer `Err` is a failed Kubernetes read.
pub async fn admit(
    ctx: &Context,
    namespace: &str,
    requests: &[Request],
    exclude: &[&str],
) -> Result<Result<(), Denial>> {
    let Some((name, policy)) = ctx.tenancy.rule_for(namespace) else {
        return Ok(Ok(()));
    };
    let rule = Rule { name: &name, policy };
    if let Err(d) = requests.iter().try_for_each(|r| evaluate(Some(rule), r, None)) {
        return Ok(Err(d));
    }
    let counted = requests.iter().any(|r| r.tpu.is_some() || r.per_hour_usd > 0.0);
    if !counted || (policy.max_chips.is_none() && policy.max_spend_per_hour_usd.is_none()) {
        return Ok(Ok(()));
    }
    let usage = usage::namespace_usage(ctx, namespace, exclude).await?;
    Ok(requests
        .iter()
        .try_for_each(|r| evaluate(Some(rule), r, Some(&usage))))
}

/// The `tenancy:` section of the operator config.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenancyPolicy {
    /// Policies by namespace name; a key ending in `*` matches every namespace with that prefix.
    /// An exact name wins over a prefix, a longer prefix over a shorter one.
    #[serde(default)]
    pub namespaces: BTreeMap<String, NamespacePolicy>,
    /// The policy of namespaces no key matches. Absent: those namespaces are unrestricted.
    #[serde(default)]
    pub default: Option<NamespacePolicy>,
}

/// What one namespace may use. An absent field does not restrict; an empty list allows nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacePolicy {
    /// Project for objects that name none (before the operator-wide `project`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_project: Option<String>,
    /// GCP projects objects may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_projects: Option<Vec<String>>,
    /// Regions (Dataproc, Vertex, and the region of a TPU zone). `us-*` style prefixes allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_regions: Option<Vec<String>>,
    /// TPU zones. `us-east5-*` style prefixes allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_zones: Option<Vec<String>>,
    /// TPU families and the largest slice of each, in chips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_accelerators: Option<Vec<AcceleratorRule>>,
    /// Capacity kinds: `onDemand`, `spot`, `reserved`, `queued`. A Vertex job is `spot` with
    /// `scheduling.strategy: Spot`, `queued` with `FlexStart`, else `onDemand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_capacity: Option<Vec<CapacityKind>>,
    /// TPU chips in use at once across the namespace (slices running or being created, Vertex TPU
    /// jobs of running pipelines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chips: Option<u32>,
    /// Budget: estimated US dollars per hour of everything running in the namespace. New TPU
    /// slices and Vertex jobs that would exceed it are refused; running ones keep running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_spend_per_hour_usd: Option<f64>,
    /// Estimated US dollars per hour of any one object (TpuSlice, Vertex job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_object_spend_per_hour_usd: Option<f64>,
    /// Whether a `TpuSlice` may take over an existing TPU node (`spec.adoptNodeId`). Default
    /// `false`: a namespace with a policy adopts nothing unless allowed. An allowed adoption is
    /// checked like a create, against the node as it is in the cloud (project, zone, family and
    /// size, capacity, service account, network, chips and budgets); a node carrying another
    /// owner's `tpu-operator-*` labels is never adopted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_adoption: bool,
    /// Google service accounts workloads may run as: TPU VMs (`serviceAccount.email`), Dataproc
    /// batches (`execution.serviceAccount`) and Vertex jobs (`serviceAccount`). Entries are
    /// e-mails, `*@<project>.iam.gserviceaccount.com` style suffix patterns (a leading `*`), or
    /// `default`: an object that names no service account and runs as the service's default
    /// identity (which must be listed to be allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_service_accounts: Option<Vec<String>>,
    /// VPC networks: names (in the object's own project) or full paths
    /// (`projects/<p>/global/networks/<n>`), `*` at the end for a prefix. A TPU slice or Dataproc
    /// batch that names none uses its project's `default` network, which must be allowed; a Vertex
    /// job without `network` is peered with none and is not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_networks: Option<Vec<String>>,
    /// Subnetworks: names (in the object's project and region) or full paths
    /// (`projects/<p>/regions/<r>/subnetworks/<s>`), `*` at the end for a prefix. Checked when an
    /// object names a subnetwork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_subnetworks: Option<Vec<String>>,
}

/// One allowed TPU family.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcceleratorRule {
    /// `v2`, `v3`, `v4`, `v5e` (or `v5litepod`), `v5p`, `v6e`.
    pub family: String,
    /// Largest slice in chips (absent: any size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chips: Option<u32>,
}

/// The policy governing one namespace, with the config path that names it in messages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule<'a> {
    /// E.g. `tenancy.namespaces.team-a`, `tenancy.namespaces.team-*`, `tenancy.default`.
    pub name: &'a str,
    pub policy: &'a NamespacePolicy,
}

impl TenancyPolicy {
    /// The policy of `namespace`: exact key, else the longest matching `prefix*` key, else `default`.
    pub fn rule_for(&self, namespace: &str) -> Option<(String, &NamespacePolicy)> {
        if let Some(p) = self.namespaces.get(namespace) {
            return Some((format!("tenancy.namespaces.{namespace}"), p));
        }
        let prefixed = self
            .namespaces
            .iter()
            .filter_map(|(k, p)| Some((k.strip_suffix('*')?, k, p)))
            .filter(|(prefix, _, _)| namespace.starts_with(prefix))
            .max_by_key(|(prefix, _, _)| prefix.len());
        if let Some((_, key, p)) = prefixed {
            return Some((format!("tenancy.namespaces.{key}"), p));
        }
        self.default.as_ref().map(|p| ("tenancy.default".to_string(), p))
    }

    /// The namespace's default project, if its policy sets one.
    pub fn default_project(&self, namespace: &str) -> Option<&str> {
        self.rule_for(namespace)?.1.default_project.as_deref()
    }

    /// Checks what serde cannot: known TPU families, non-negative budgets. The error names the
    /// offending key.
    pub fn validate(&self) -> Result<(), String> {
        let entries = self
            .namespaces
            .iter()
            .map(|(k, p)| (format!("tenancy.namespaces.{k}"), p))
            .chain(self.default.iter().map(|p| ("tenancy.default".to_string(), p)));
        for (name, p) in entries {
            for a in p.allowed_accelerators.iter().flatten() {
                if parse_family(&a.family).is_none() {
                    return Err(format!(
                        "{name}.allowedAccelerators: unknown TPU family {:?} (known: v2, v3, v4, v5e, v5p, v6e)",
                        a.family
                    ));
                }
            }
            for a in p.allowed_service_accounts.iter().flatten() {
                if let Err(why) = rules::check_account_pattern(a) {
                    return Err(format!("{name}.allowedServiceAccounts: {a:?}: {why}"));
                }
            }
            for (field, list) in [
                ("allowedNetworks", &p.allowed_networks),
                ("allowedSubnetworks", &p.allowed_subnetworks),
            ] {
                if let Some(bad) = list
                    .iter()
                    .flatten()
                    .find(|e| e.is_empty() || e.trim_end_matches('*').contains('*'))
                {
                    return Err(format!(
                        "{name}.{field}: {bad:?}: `*` is allowed only at the end (a prefix)"
                    ));
                }
            }
            for (field, v) in [
                ("maxSpendPerHourUsd", p.max_spend_per_hour_usd),
                ("maxObjectSpendPerHourUsd", p.max_object_spend_per_hour_usd),
            ] {
                if v.is_some_and(|v| !crate::pricing::non_negative(v)) {
                    return Err(format!("{name}.{field}: must be a number >= 0"));
                }
            }
        }
        Ok(())
    }
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
        policy: &TenancyPolicy,
        namespace: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let (_, rule) = policy.rule_for(namespace)?;
        if rule.max_chips.is_none() && rule.max_spend_per_hour_usd.is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> TenancyPolicy {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[tokio::test]
    async fn creates_are_serialized_only_where_usage_is_counted() {
        let p = policy("namespaces:\n  capped: {maxChips: 8}\n  open: {allowedCapacity: [spot]}\n");
        let locks = AdmissionLocks::default();
        assert!(locks.lock_if_counted(&p, "open").await.is_none());
        assert!(locks.lock_if_counted(&p, "unlisted").await.is_none());
        let held = locks.lock_if_counted(&p, "capped").await;
        assert!(held.is_some());
        let second = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            locks.lock_if_counted(&p, "capped"),
        );
        assert!(second.await.is_err(), "a second admission waits for the first");
    }

    #[test]
    fn exact_beats_longest_prefix_beats_default() {
        let p = policy(
            "namespaces:\n  team-a: {defaultProject: a}\n  team-*: {defaultProject: t}\n  team-b-*: {defaultProject: tb}\ndefault: {defaultProject: d}\n",
        );
        for (ns, rule, project) in [
            ("team-a", "tenancy.namespaces.team-a", "a"),
            ("team-c", "tenancy.namespaces.team-*", "t"),
            ("team-b-1", "tenancy.namespaces.team-b-*", "tb"),
            ("other", "tenancy.default", "d"),
        ] {
            let (name, np) = p.rule_for(ns).unwrap();
            assert_eq!(
                (name.as_str(), np.default_project.as_deref()),
                (rule, Some(project))
            );
        }
        assert!(TenancyPolicy::default().rule_for("x").is_none());
    }

    #[test]
    fn the_documented_example_is_a_valid_policy() {
        let doc = include_str!("../../../../docs/policy.md");
        let yaml = doc
            .split("```yaml\n# operator.yaml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/policy.md has the operator.yaml example");
        let config: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let p: TenancyPolicy = serde_yaml::from_value(config["tenancy"].clone()).unwrap();
        p.validate().unwrap();
        let (_, team_a) = p.rule_for("team-a").unwrap();
        assert!(team_a.allow_adoption);
        assert!(
            team_a
                .allowed_service_accounts
                .as_ref()
                .unwrap()
                .contains(&"default".to_string())
        );
    }

    #[test]
    fn unknown_keys_and_families_are_refused_with_their_name() {
        let err = serde_yaml::from_str::<TenancyPolicy>("namespaces: {a: {maxChip: 3}}").unwrap_err();
        assert!(err.to_string().contains("maxChip"), "{err}");
        let p = policy("namespaces: {a: {allowedAccelerators: [{family: v9}]}}");
        assert!(
            p.validate()
                .unwrap_err()
                .contains("tenancy.namespaces.a.allowedAccelerators")
        );
        let p = policy("default: {maxSpendPerHourUsd: -1}");
        assert!(
            p.validate()
                .unwrap_err()
                .contains("tenancy.default.maxSpendPerHourUsd")
        );
        assert!(
            policy("namespaces: {a: {allowedAccelerators: [{family: v5litepod}]}}")
                .validate()
                .is_ok()
        );
        let p = policy("namespaces: {a: {allowedServiceAccounts: [\"admin*\"]}}");
        assert!(
            p.validate()
                .unwrap_err()
                .contains("tenancy.namespaces.a.allowedServiceAccounts: \"admin*\"")
        );
        let p = policy("namespaces: {a: {allowedNetworks: [\"*-prod\"]}}");
        assert!(
            p.validate()
                .unwrap_err()
                .contains("tenancy.namespaces.a.allowedNetworks")
        );
    }
}
