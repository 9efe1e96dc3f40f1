//! A namespace's Google identity: the service account the operator acts as for its objects'
//! Cloud Storage reads (`TpuPolicy.spec.googleServiceAccount`), and the default that keeps a
//! governed namespace from reaching buckets through the operator's own identity.
//!
//! Design, as Config Connector's namespaced mode is understood by
//! platform teams: one Google service account per namespace, bound where the platform team binds
//! everything else (the namespace's TpuPolicy), impersonated by the operator's own account
//! (`roles/iam.serviceAccountTokenCreator` on each team account). IAM then decides which buckets
//! a team reaches, and audit logs name the team. A governed namespace with neither an identity
//! nor a bucket list (`allowedBuckets`) is refused every Cloud Storage location: it would read as
//! the operator, which can read every team's buckets. A namespace no policy selects (`local`, a
//! single-team cluster) keeps reading as the operator.

use super::{Denial, Governing, Policies, Request};

/// The spec field that names the identity.
pub const FIELD: &str = "googleServiceAccount";

impl Governing {
    /// The Google service account the namespace's calls act as: the one its policies name (they
    /// must agree), or `None` (the operator's own identity).
    pub fn google_service_account(&self) -> Result<Option<&str>, Denial> {
        let mut named = self
            .rules()
            .filter_map(|r| r.policy.google_service_account.as_deref().map(|sa| (r.name, sa)));
        let Some((first_policy, first)) = named.next() else {
            return Ok(None);
        };
        match named.find(|(_, sa)| *sa != first) {
            None => Ok(Some(first)),
            Some((other_policy, other)) => Err(Denial {
                message: format!(
                    "denied by TpuPolicy {first_policy}, spec.{FIELD}: TpuPolicies {first_policy} \
                     ({first}) and {other_policy} ({other}) both select this namespace with \
                     different service accounts; a namespace acts as one identity: name it in one \
                     policy, or the same in both"
                ),
                retry: false,
            }),
        }
    }

    /// Whether the namespace may name Cloud Storage locations at all: governed namespaces need
    /// an identity of their own or a bucket list (see the module docs). `Ok` when `req` names no
    /// location or the namespace is not governed.
    pub fn storage_scope(&self, req: &Request) -> Result<(), Denial> {
        let Some(named) = req.storage.first() else {
            return Ok(());
        };
        let identity = self.google_service_account()?;
        let mut rules = self.rules().peekable();
        let Some(first) = rules.peek().map(|r| r.name) else {
            return Ok(());
        };
        if identity.is_some() || rules.any(|r| r.policy.allowed_buckets.is_some()) {
            return Ok(());
        }
        Err(Denial {
            message: format!(
                "denied by TpuPolicy {first}, spec.{FIELD}: {} names Cloud Storage location {:?} \
                 ({}), and no TpuPolicy selecting this namespace sets googleServiceAccount or \
                 allowedBuckets, so the operator would read it as itself; set \
                 spec.googleServiceAccount (the operator then acts as that service account here \
                 and IAM decides which buckets it reaches) or spec.allowedBuckets (docs/policy.md)",
                req.what, named.value, named.field
            ),
            retry: false,
        })
    }
}

/// The Google service account `namespace`'s calls act as (`None`: the operator's own). Policies
/// in conflict (refused at admission) give the first by name's: never the operator's identity.
pub fn service_account(policies: &Policies, namespace: &str) -> Option<String> {
    let governing = policies.governing(namespace);
    governing
        .rules()
        .find_map(|r| r.policy.google_service_account.clone())
}
