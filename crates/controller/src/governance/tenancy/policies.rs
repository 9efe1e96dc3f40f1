//! Where the policies come from: the cluster's `TpuPolicy` objects and the labels of its
//! namespaces, each kept by a watch, plus what a namespace no policy selects gets.
//!
//! Lookups are synchronous reads of the two caches; the controllers start only after both have
//! listed once ([`Policies::ready`]), so no object is judged against an empty cache (an
//! unlisted policy would otherwise read as "no policy" and let a create through). A change that
//! can widen what a namespace may do (a policy edited or deleted, namespace labels changed)
//! bumps [`Policies::changes`], on which every controller looks at its objects again: refusals
//! are not settled, so only they do a full pass.

use std::{collections::BTreeMap, sync::Arc};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tpu_operator_api::tpu_policy::TpuPolicy;

use super::{Denial, Rule};

/// What a namespace that no `TpuPolicy` selects may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum WithoutPolicy {
    /// Anything the operator's identity can do (a single-team cluster; the default).
    #[default]
    Allow,
    /// Nothing: every object there is refused (`PolicyDenied`) until a policy selects it.
    Deny,
}

/// The policies governing one namespace.
#[derive(Clone, Debug)]
pub enum Governing {
    /// No policy selects it and namespaces without one are allowed everything.
    Unrestricted,
    /// No policy selects it and namespaces without one are refused.
    Refused(String),
    /// These policies, sorted by name; every one applies to `namespace`.
    By {
        policies: Vec<Arc<TpuPolicy>>,
        namespace: String,
    },
}

impl Governing {
    /// The rules to check, in order (empty when unrestricted).
    pub fn rules(&self) -> impl Iterator<Item = Rule<'_>> {
        let (policies, namespace) = match self {
            Self::By { policies, namespace } => (policies.as_slice(), namespace.as_str()),
            _ => (&[][..], ""),
        };
        policies.iter().map(move |p| Rule {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            policy: &p.spec,
            budgets: p.status.as_ref().map_or(&[][..], |s| s.budgets.as_slice()),
            namespace,
        })
    }

    /// The refusal of a namespace without a policy under `Deny`.
    pub fn refusal(&self) -> Option<Denial> {
        match self {
            Self::Refused(namespace) => Some(Denial {
                message: format!(
                    "namespace {namespace:?} is selected by no TpuPolicy and the operator runs with \
                     namespacesWithoutPolicy: Deny; ask a cluster administrator for a TpuPolicy \
                     selecting it (spec.namespaces or spec.namespaceSelector)"
                ),
                retry: false,
            }),
            _ => None,
        }
    }

    /// Whether any governing policy counts usage (a chip quota, an hourly or a period budget).
    pub fn counts_usage(&self) -> bool {
        self.rules().any(|r| {
            r.policy.max_chips.is_some()
                || r.policy.max_spend_per_hour_usd.is_some()
                || r.policy.budgets.as_ref().is_some_and(|b| !b.is_empty())
        })
    }

    /// The default project: from the first policy by name that sets one.
    pub fn default_project(&self) -> Option<&str> {
        self.rules().find_map(|r| r.policy.default_project.as_deref())
    }
}

struct Caches {
    policies: Store<TpuPolicy>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    changes: watch::Receiver<u64>,
    /// Flags set when each cache has listed once. (Not `Store::wait_until_ready`: with several
    /// controllers awaiting it at once, only some waiters were woken.)
    listed: [watch::Receiver<bool>; 2],
    _tasks: AbortOnDrop,
}

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::AbortHandle::abort);
    }
}

/// The cluster's policies, as the controllers consult them.
pub struct Policies {
    caches: Option<Caches>,
    without_policy: WithoutPolicy,
}

impl Default for Policies {
    /// No policy kind watched: every namespace is unrestricted (a `Context` before
    /// [`Policies::watch`], used by tests that are not about tenancy).
    fn default() -> Self {
        Self {
            caches: None,
            without_policy: WithoutPolicy::Allow,
        }
    }
}

/// Watches every `TpuPolicy` into a cache: the cache, a flag set once it has listed, and the
/// watch task. Every change after the first listing may relax a rule, so it calls `bump`.
fn watch_policies(
    client: kube::Client,
    bump: impl Fn() + Send + 'static,
) -> (Store<TpuPolicy>, watch::Receiver<bool>, tokio::task::AbortHandle) {
    let (policies, writer) = reflector::store();
    let policy_events = watcher(Api::<TpuPolicy>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    let (policies_listed, policies_listed_rx) = watch::channel(false);
    let policy_task = tokio::spawn(policy_events.for_each(move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            policies_listed.send_replace(true);
        }
        // Every change after the first listing may relax a rule; the first listing is what
        // `ready` waits for.
        if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) = event {
            bump();
        }
        futures::future::ready(())
    }));
    (policies, policies_listed_rx, policy_task.abort_handle())
}

/// Watches the labels of the namespaces (only `namespace` when the operator watches one) into a
/// cache: the cache, a flag set once it has listed, and the watch task. A label change can
/// change which policies select a namespace, so it calls `bump`.
fn watch_namespace_labels(
    client: kube::Client,
    namespace: Option<&str>,
    bump: impl Fn() + Send + 'static,
) -> (
    Store<PartialObjectMeta<Namespace>>,
    watch::Receiver<bool>,
    tokio::task::AbortHandle,
) {
    let (namespaces, writer) = reflector::store();
    let config = match namespace {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let mut labels_seen: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let namespace_events = watcher(Api::<PartialObjectMeta<Namespace>>::all(client), config)
        .default_backoff()
        .reflect(writer);
    let (namespaces_listed, namespaces_listed_rx) = watch::channel(false);
    let namespace_task = tokio::spawn(namespace_events.for_each(move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            namespaces_listed.send_replace(true);
        }
        // Only a label change can change which policies select a namespace.
        if let Ok(watcher::Event::Apply(ns) | watcher::Event::InitApply(ns)) = &event {
            let previous = labels_seen.insert(ns.name_any(), ns.labels().clone());
            if matches!(event, Ok(watcher::Event::Apply(_))) && previous.as_ref() != Some(ns.labels()) {
                bump();
            }
        }
        futures::future::ready(())
    }));
    (namespaces, namespaces_listed_rx, namespace_task.abort_handle())
}

impl Policies {
    /// Starts watching `TpuPolicy` objects and namespace labels (only `namespace`'s when the
    /// operator watches one namespace). The watches stop when the `Policies` is dropped.
    pub fn watch(client: kube::Client, namespace: Option<&str>, without_policy: WithoutPolicy) -> Self {
        let (changed, changes) = watch::channel(0u64);
        let changed = Arc::new(changed);
        let bump = {
            let changed = changed.clone();
            move || changed.send_modify(|n| *n += 1)
        };

        let (policies, policies_listed, policy_task) = watch_policies(client.clone(), bump.clone());
        let (namespaces, namespaces_listed, namespace_task) = watch_namespace_labels(client, namespace, bump);
        Self {
            caches: Some(Caches {
                policies,
                namespaces,
                changes,
                listed: [policies_listed, namespaces_listed],
                _tasks: AbortOnDrop(vec![policy_task, namespace_task]),
            }),
            without_policy,
        }
    }

    /// Exactly `policies`, and no namespace labels: for unit tests that need a policy without
    /// an API server to watch.
    #[cfg(test)]
    pub(crate) fn fixed(policies: Vec<TpuPolicy>, without_policy: WithoutPolicy) -> Self {
        let (store, mut writer) = reflector::store();
        for policy in policies {
            writer.apply_watcher_event(&watcher::Event::Apply(policy));
        }
        let (namespaces, _) = reflector::store();
        let listed = || watch::channel(true).1;
        Self {
            caches: Some(Caches {
                policies: store,
                namespaces,
                changes: watch::channel(0).1,
                listed: [listed(), listed()],
                _tasks: AbortOnDrop(Vec::new()),
            }),
            without_policy,
        }
    }

    /// Waits until both caches have listed once.
    pub async fn ready(&self) {
        if let Some(c) = &self.caches {
            for listed in &c.listed {
                // Errors only when the watch task ended (the `Policies` is being dropped).
                let _ = listed.clone().wait_for(|done| *done).await;
            }
        }
    }

    /// Ticks whenever what a namespace may do might have widened.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let receiver = self.caches.as_ref().map(|c| c.changes.clone());
        futures::stream::unfold(receiver, |receiver| async move {
            let mut r = receiver?;
            r.changed().await.ok()?;
            Some(((), Some(r)))
        })
    }

    /// The policies governing `namespace`.
    pub fn governing(&self, namespace: &str) -> Governing {
        let Some(c) = &self.caches else {
            return Governing::Unrestricted;
        };
        let labels = c
            .namespaces
            .get(&reflector::ObjectRef::new(namespace))
            .map(|ns| ns.labels().clone())
            .unwrap_or_default();
        choose(c.policies.state(), namespace, &labels, self.without_policy)
    }

    /// Every policy, and the namespaces each selects now (for the usage report).
    pub fn selections(&self) -> Vec<(Arc<TpuPolicy>, Vec<String>)> {
        let Some(c) = &self.caches else {
            return Vec::new();
        };
        let namespaces = c.namespaces.state();
        c.policies
            .state()
            .into_iter()
            .map(|p| {
                let selected = namespaces
                    .iter()
                    .filter(|ns| p.spec.selects(&ns.name_any(), ns.labels()))
                    .map(|ns| ns.name_any())
                    .collect();
                (p, selected)
            })
            .collect()
    }
}

/// The policies among `all` that govern `namespace` (with `labels`). Pure.
pub fn choose(
    all: Vec<Arc<TpuPolicy>>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    without_policy: WithoutPolicy,
) -> Governing {
    let mut selecting: Vec<Arc<TpuPolicy>> = all
        .into_iter()
        .filter(|p| p.spec.selects(namespace, labels))
        .collect();
    selecting.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    match (selecting.is_empty(), without_policy) {
        (false, _) => Governing::By {
            policies: selecting,
            namespace: namespace.to_owned(),
        },
        (true, WithoutPolicy::Allow) => Governing::Unrestricted,
        (true, WithoutPolicy::Deny) => Governing::Refused(namespace.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The two policies of docs/policy.md's example.
    fn documented() -> Vec<Arc<TpuPolicy>> {
        let doc = include_str!("../../../../../docs/policy.md");
        let yaml = doc
            .split("## Example: two teams\n\n```yaml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/policy.md has the two-team example");
        yaml.split("---\n")
            .map(|d| Arc::new(serde_yaml::from_str::<TpuPolicy>(d).expect("a valid TpuPolicy")))
            .collect()
    }

    #[test]
    fn every_selecting_policy_applies_and_others_get_the_default() {
        let all = documented();
        let research = labels(&[("tier", "research")]);
        let g = choose(all.clone(), "team-a", &labels(&[]), WithoutPolicy::Deny);
        let names: Vec<_> = g.rules().map(|r| r.name.to_string()).collect();
        assert_eq!(names, ["team-a"]);
        assert_eq!(g.default_project(), Some("team-a-train"));
        assert!(g.counts_usage() && g.refusal().is_none());
        let g = choose(all.clone(), "team-a", &research, WithoutPolicy::Deny);
        let names: Vec<_> = g.rules().map(|r| r.name.to_string()).collect();
        assert_eq!(names, ["research", "team-a"], "both apply, sorted by name");
        assert_eq!(
            g.default_project(),
            Some("research-sandbox"),
            "the first by name that sets one"
        );

        let open = choose(all.clone(), "elsewhere", &labels(&[]), WithoutPolicy::Allow);
        assert!(open.rules().next().is_none() && open.refusal().is_none() && !open.counts_usage());
        let closed = choose(all, "elsewhere", &labels(&[]), WithoutPolicy::Deny);
        let denial = closed.refusal().expect("refused");
        assert!(
            denial.message.contains("namespacesWithoutPolicy: Deny") && !denial.retry,
            "{}",
            denial.message
        );
    }

    #[test]
    fn a_namespace_without_policy_under_deny_is_refused_before_any_rule() {
        let g = choose(vec![], "x", &labels(&[]), WithoutPolicy::Deny);
        let req = super::super::Request {
            what: "TpuSlice".into(),
            ..Default::default()
        };
        let err = super::super::check(&g, &[req], None).unwrap_err();
        assert!(
            err.message.contains("selected by no TpuPolicy"),
            "{}",
            err.message
        );
    }
}
