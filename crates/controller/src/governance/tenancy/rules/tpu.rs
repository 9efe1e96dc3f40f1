//! The TPU itself (family, size, capacity kind, the object's own spend) and what the namespace
//! would hold with it (chips, hourly budget).

use super::{Denial, list};
use crate::governance::{
    pricing::family_name,
    tenancy::{Request, Rule, TpuPolicySpec, TpuUse, Usage},
};

/// The TPU itself: family and size, capacity kind, and the object's own burn rate.
pub(super) fn chips(rule: &Rule<'_>, req: &Request, tpu: &TpuUse) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let what = &req.what;
    let family = family_name(tpu.shape.generation);
    if let Some(allowed) = &p.allowed_accelerators {
        let describe = || {
            let v: Vec<String> = allowed
                .iter()
                .map(|a| match a.max_chips {
                    Some(n) => format!("{} up to {n} chips", a.family),
                    None => a.family.clone(),
                })
                .collect();
            list(&v)
        };
        let same_family: Vec<_> = allowed
            .iter()
            .filter(|a| crate::governance::pricing::parse_family(&a.family) == Some(tpu.shape.generation))
            .collect();
        if same_family.is_empty() {
            let msg = format!("{what} uses TPU {family}; allowed: {}", describe());
            return Err(Denial::fixed(rule, "allowedAccelerators", msg));
        }
        if !same_family
            .iter()
            .any(|a| a.max_chips.is_none_or(|max| tpu.shape.chips <= max))
        {
            let msg = format!(
                "{what} asks for {} chips of {family}; allowed: {}",
                tpu.shape.chips,
                describe()
            );
            return Err(Denial::fixed(rule, "allowedAccelerators", msg));
        }
    }
    if let Some(allowed) = &p.allowed_capacity
        && !allowed.contains(&tpu.capacity)
    {
        let names: Vec<String> = allowed.iter().map(|c| c.as_str().to_string()).collect();
        let msg = format!(
            "{what} uses {} capacity; allowed: {}",
            tpu.capacity.as_str(),
            list(&names)
        );
        return Err(Denial::fixed(rule, "allowedCapacity", msg));
    }
    if let Some(max) = p.max_object_spend_per_hour_usd
        && req.per_hour_usd > max
    {
        let msg = format!(
            "{what} is estimated at ${:.2}/h; allowed per object: ${max:.2}/h",
            req.per_hour_usd
        );
        return Err(Denial::fixed(rule, "maxObjectSpendPerHourUsd", msg));
    }
    Ok(())
}

/// What the namespace would hold with this object: the chip quota and the hourly budget.
pub(super) fn namespace_totals(
    rule: &Rule<'_>,
    req: &Request,
    tpu: &TpuUse,
    usage: &Usage,
) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let what = &req.what;
    if let Some(max) = p.max_chips
        && usage.chips + tpu.shape.chips > max
    {
        let msg = format!(
            "{what} needs {} chips and the namespace already uses {} ({}); allowed at once: {max}",
            tpu.shape.chips,
            usage.chips,
            usage.describe()
        );
        return Err(Denial::usage(rule, "maxChips", msg));
    }
    if let Some(max) = p.max_spend_per_hour_usd
        && usage.per_hour_usd + req.per_hour_usd > max
    {
        let msg = format!(
            "budget: {what} would add ${:.2}/h to the ${:.2}/h the namespace already runs ({}); \
             budget: ${max:.2}/h. Running objects keep running; new TPU slices and Vertex jobs wait",
            req.per_hour_usd,
            usage.per_hour_usd,
            usage.describe()
        );
        return Err(Denial::usage(rule, "maxSpendPerHourUsd", msg));
    }
    Ok(())
}
