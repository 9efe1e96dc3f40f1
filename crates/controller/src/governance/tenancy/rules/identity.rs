//! The Google identity a workload runs as and the networks it uses.

use super::paths::{malformed, reference_allowed};
use super::{DEFAULT_ACCOUNT, Denial, list};
use crate::governance::tenancy::{NetworkUse, Request, Rule, TpuPolicySpec, references};

/// Whether service account `email` (`None`: the service's default) is in `allowed`: exact
/// e-mails (case-insensitive), `*suffix` patterns, and `default` for no service account.
fn account_allowed(allowed: &[String], email: Option<&str>) -> bool {
    let Some(email) = email.filter(|e| !e.is_empty()) else {
        return allowed.iter().any(|a| a == DEFAULT_ACCOUNT);
    };
    let email = email.to_ascii_lowercase();
    allowed.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        match a.strip_prefix('*') {
            Some(suffix) => email.len() > suffix.len() && email.ends_with(suffix),
            None => a == email,
        }
    })
}

/// The Google identity and the networks the workload runs with (not checked on the first look at
/// an adoption, before the node is read).
pub(super) fn identity(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    if req.identity_pending {
        return Ok(());
    }
    service_account(rule, req)?;
    network(rule, req)?;
    subnetwork(rule, req)
}

/// The service account, named or the service's default, is in `allowedServiceAccounts`.
fn service_account(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let what = &req.what;
    if let Some(allowed) = &rule.policy.allowed_service_accounts
        && !account_allowed(allowed, req.service_account.as_deref())
    {
        let runs_as = match req.service_account.as_deref().filter(|e| !e.is_empty()) {
            Some(email) => format!("service account {email:?}"),
            None => format!(
                "the service's default service account (none named; the entry {DEFAULT_ACCOUNT:?} allows that)"
            ),
        };
        let msg = format!("{what} runs as {runs_as}; allowed: {}", list(allowed));
        return Err(Denial::fixed(rule, "allowedServiceAccounts", msg));
    }
    Ok(())
}

/// The VPC network, named or `default`, is in `allowedNetworks`; a subnetwork named alone passes
/// only when `allowedSubnetworks` checks it.
fn network(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let what = &req.what;
    let Some(allowed) = &p.allowed_networks else {
        return Ok(());
    };
    let network = match &req.network {
        NetworkUse::Unused => None,
        NetworkUse::Default => Some("default"),
        NetworkUse::Named(n) => Some(n.as_str()),
        NetworkUse::OfSubnetwork if p.allowed_subnetworks.is_some() => None,
        NetworkUse::OfSubnetwork => {
            let msg = format!(
                "{what} names only subnetwork {:?}, whose network the operator cannot check; \
                 allowed networks: {} (list the subnetwork in allowedSubnetworks)",
                req.subnetwork.as_deref().unwrap_or_default(),
                list(allowed)
            );
            return Err(Denial::fixed(rule, "allowedNetworks", msg));
        }
    };
    if let Some(network) = network {
        let parsed = references::network(network, &req.project)
            .map_err(|e| malformed(rule, "allowedNetworks", what, &req.fields.network, e))?;
        if !reference_allowed(allowed, &parsed, &req.project, "") {
            let msg = format!(
                "{what} uses network {:?}; allowed: {}",
                parsed.path(),
                list(allowed)
            );
            return Err(Denial::fixed(rule, "allowedNetworks", msg));
        }
    }
    Ok(())
}

/// The subnetwork, in the object's region unless it says otherwise, is in `allowedSubnetworks`.
fn subnetwork(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let what = &req.what;
    if let (Some(allowed), Some(subnet)) = (&rule.policy.allowed_subnetworks, &req.subnetwork) {
        let parsed = references::subnetwork(subnet, &req.project, &req.region)
            .map_err(|e| malformed(rule, "allowedSubnetworks", what, &req.fields.subnetwork, e))?;
        if !reference_allowed(allowed, &parsed, &req.project, &req.region) {
            let msg = format!(
                "{what} uses subnetwork {:?}; allowed: {}",
                parsed.path(),
                list(allowed)
            );
            return Err(Denial::fixed(rule, "allowedSubnetworks", msg));
        }
    }
    Ok(())
}
