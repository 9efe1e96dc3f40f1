//! The policy decision: a pure function of (one `TpuPolicy`'s spec, request, namespace usage).

use super::{Request, Rule, TpuPolicySpec, Usage};

mod budget;
mod identity;
mod paths;
mod resources;
mod tpu;

pub use budget::{Suspending, suspending};

use identity::identity;
use resources::{buckets, image, reservation};
use tpu::{chips, namespace_totals};

/// The `allowedServiceAccounts` entry that stands for an object naming no service account.
pub const DEFAULT_ACCOUNT: &str = "default";

/// Google's public image projects a Compute Engine slice may boot from when the policy has no
/// `allowedImageProjects`: Ubuntu, the OS of Google's guides to TPU VMs on Compute Engine
/// (`--image-project=ubuntu-os-cloud`) and of docs/compute-engine.md.
pub const PUBLIC_IMAGE_PROJECTS: &[&str] = &["ubuntu-os-cloud"];

/// Why a request is refused. `retry`: the refusal depends on what else runs (chip quota, budget)
/// and may lift by itself; otherwise only a spec or policy change helps.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    pub message: String,
    pub retry: bool,
}

impl Denial {
    fn fixed(rule: &Rule<'_>, field: &str, message: String) -> Self {
        Self {
            message: format!("denied by TpuPolicy {}, spec.{field}: {message}", rule.name),
            retry: false,
        }
    }

    fn usage(rule: &Rule<'_>, field: &str, message: String) -> Self {
        Self {
            message: format!("denied by TpuPolicy {}, spec.{field}: {message}", rule.name),
            retry: true,
        }
    }
}

/// Whether `value` is in `allowed` (entries ending in `*` match by prefix).
fn matches(allowed: &[String], value: &str) -> bool {
    allowed.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => a == value,
    })
}

fn list(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed.join(", ")
    }
}

/// Checks `req` against `rule`. `usage`: what the rest of the namespace holds now; `None` skips the
/// namespace-wide checks (chip quota, budget), e.g. for a first look before any cloud read.
pub fn evaluate(rule: Option<Rule<'_>>, req: &Request, usage: Option<&Usage>) -> Result<(), Denial> {
    let Some(rule) = rule else {
        return Ok(());
    };
    placement(&rule, req)?;
    identity(&rule, req)?;
    reservation(&rule, req)?;
    image(&rule, req)?;
    buckets(&rule, req)?;
    if usage.is_some() {
        budget::period_budgets(&rule, req)?;
    }
    let Some(tpu) = &req.tpu else {
        return Ok(());
    };
    chips(&rule, req, tpu)?;
    match usage {
        Some(usage) => namespace_totals(&rule, req, tpu, usage),
        None => Ok(()),
    }
}

/// Adoption, project, region and zone.
fn placement(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let what = &req.what;
    if let Some(node) = &req.adopt
        && !p.allow_adoption
    {
        let msg = format!("{what}: this namespace may not adopt existing TPU nodes ({node}); allowed: false");
        return Err(Denial::fixed(rule, "allowAdoption", msg));
    }
    if req.orphan && !p.allow_orphan {
        let msg = format!(
            "{what}: deletionPolicy Orphan would leave it running (and billing) after the object is \
             deleted; allowed: false (use deletionPolicy: Delete)"
        );
        return Err(Denial::fixed(rule, "allowOrphan", msg));
    }
    if let Some(allowed) = &p.allowed_projects
        && !matches(allowed, &req.project)
    {
        let msg = format!(
            "{what} uses project {:?}; allowed: {}",
            req.project,
            list(allowed)
        );
        return Err(Denial::fixed(rule, "allowedProjects", msg));
    }
    if let Some(allowed) = &p.allowed_projects {
        for named in &req.in_projects {
            let project = project_of(&named.value);
            if !matches(allowed, project) {
                let msg = format!(
                    "{what} names {:?} ({}) in project {project:?}; allowed: {}",
                    named.value,
                    named.field,
                    list(allowed)
                );
                return Err(Denial::fixed(rule, "allowedProjects", msg));
            }
        }
    }
    if let Some(allowed) = &p.allowed_regions
        && !matches(allowed, &req.region)
    {
        let msg = format!("{what} uses region {:?}; allowed: {}", req.region, list(allowed));
        return Err(Denial::fixed(rule, "allowedRegions", msg));
    }
    if let (Some(allowed), Some(zone)) = (&p.allowed_zones, &req.zone)
        && !matches(allowed, zone)
    {
        let msg = format!("{what} uses zone {zone:?}; allowed: {}", list(allowed));
        return Err(Denial::fixed(rule, "allowedZones", msg));
    }
    Ok(())
}

/// The project of a resource path `projects/<p>/...` (the whole value when it is not one, so
/// that a malformed path matches no allowed project).
fn project_of(path: &str) -> &str {
    path.strip_prefix("projects/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or(path)
}

/// Only the Cloud Storage rule, for a location named outside a create (a slice's done-uri
/// annotation, read on every pass).
pub fn storage(rule: Rule<'_>, req: &Request) -> Result<(), Denial> {
    buckets(&rule, req)
}

#[cfg(test)]
mod tests;
