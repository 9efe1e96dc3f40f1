//! The cloud resources a spec consumes besides the TPU: a reservation, a boot image, and Cloud
//! Storage buckets.

use super::paths::{malformed, reference_allowed};
use super::{Denial, PUBLIC_IMAGE_PROJECTS, list, matches};
use crate::governance::tenancy::{Request, Rule, TpuPolicySpec, references};

/// The TPU reservation the capacity comes from: listed in `allowedReservations` when the policy
/// has that list, else in one of `allowedProjects` (a short name is in the object's project and
/// zone, as the controller expands it).
pub(super) fn reservation(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let Some(named) = &req.reservation else {
        return Ok(());
    };
    let field = match (&p.allowed_reservations, &p.allowed_projects) {
        (Some(_), _) => "allowedReservations",
        (None, Some(_)) => "allowedProjects",
        (None, None) => return Ok(()),
    };
    let what = &req.what;
    let zone = req.zone.as_deref().unwrap_or_default();
    let parsed = references::reservation(&named.value, &req.project, zone)
        .map_err(|e| malformed(rule, field, what, &named.field, e))?;
    if let Some(allowed) = &p.allowed_reservations {
        if !reference_allowed(allowed, &parsed, &req.project, zone) {
            let msg = format!(
                "{what} consumes reservation {:?} ({}); allowed: {}",
                parsed.path(),
                named.field,
                list(allowed)
            );
            return Err(Denial::fixed(rule, field, msg));
        }
    } else if let Some(allowed) = &p.allowed_projects
        && !matches(allowed, &parsed.project)
    {
        let msg = format!(
            "{what} consumes reservation {:?} ({}) of project {:?}; allowed: {} \
             (a reservation of another project must be listed in allowedReservations)",
            parsed.path(),
            named.field,
            parsed.project,
            list(allowed)
        );
        return Err(Denial::fixed(rule, field, msg));
    }
    Ok(())
}

/// The boot image of a Compute Engine slice: from one of `allowedImageProjects`, or, without
/// that list, from the object's own project or [`PUBLIC_IMAGE_PROJECTS`].
pub(super) fn image(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let Some(named) = &req.image else {
        return Ok(());
    };
    let field = "allowedImageProjects";
    let what = &req.what;
    let parsed = references::image(&named.value, &req.project)
        .map_err(|e| malformed(rule, field, what, &named.field, e))?;
    let (ok, allowed) = match &rule.policy.allowed_image_projects {
        Some(allowed) => (matches(allowed, &parsed.project), list(allowed)),
        None => {
            let defaults: Vec<String> = std::iter::once(req.project.clone())
                .chain(PUBLIC_IMAGE_PROJECTS.iter().map(|p| p.to_string()))
                .collect();
            (
                defaults.contains(&parsed.project),
                format!(
                    "{} (the default: the object's project and Google's public images)",
                    list(&defaults)
                ),
            )
        }
    };
    if !ok {
        let msg = format!(
            "{what} boots image {:?} ({}) of project {:?}; allowed: {allowed}",
            parsed.path(),
            named.field,
            parsed.project
        );
        return Err(Denial::fixed(rule, field, msg));
    }
    Ok(())
}

/// Every Cloud Storage location the spec names is in a bucket of `allowedBuckets`.
pub(super) fn buckets(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let Some(allowed) = &rule.policy.allowed_buckets else {
        return Ok(());
    };
    let what = &req.what;
    for named in &req.storage {
        let msg = match references::bucket(&named.value) {
            Some(bucket) if matches(allowed, bucket) => continue,
            Some(bucket) => format!(
                "{what} names bucket {bucket:?} ({} = {:?}); allowed: {}",
                named.field,
                named.value,
                list(allowed)
            ),
            None => format!(
                "{what} {}: {:?} names no bucket (accepted: gs://BUCKET/PATH, BUCKET a Cloud Storage bucket name)",
                named.field, named.value
            ),
        };
        return Err(Denial::fixed(rule, "allowedBuckets", msg));
    }
    Ok(())
}
