//! Policy entries and the references an object names, compared as canonical resource paths.

use super::{Denial, Rule};
use crate::governance::tenancy::references::{self, Kind, Reference};

/// A policy entry (written by the cluster's administrators, so read leniently) as a canonical
/// path: full URLs lose their `https://.../compute/v1/` prefix, paths relative to a project
/// (`global/networks/n`) get the object's project, and bare names become a `kind` in the
/// object's project and `location` (region of a subnetwork, zone of a reservation).
fn entry_path(entry: &str, kind: Kind, project: &str, location: &str) -> String {
    let v = match entry.find("projects/") {
        Some(i) if entry.starts_with("https://") => &entry[i..],
        _ => entry,
    };
    if v.starts_with("projects/") {
        v.to_string()
    } else if v.contains('/') {
        format!("projects/{project}/{v}")
    } else {
        Reference {
            kind,
            project: project.to_owned(),
            location: Some(location.to_owned()),
            name: v.to_owned(),
        }
        .path()
    }
}

/// Whether the parsed reference `value` is in `allowed`, entries read by [`entry_path`] in the
/// object's project and `location`; entries ending in `*` match the canonical path by prefix.
/// Only a strictly parsed value (no `..`, no other host, no extra segment) ever gets here, so a
/// prefix cannot be escaped.
pub(super) fn reference_allowed(
    allowed: &[String],
    value: &Reference,
    project: &str,
    location: &str,
) -> bool {
    let path = value.path();
    allowed.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => path.starts_with(&entry_path(prefix, value.kind, project, location)),
        None => entry_path(a, value.kind, project, location) == path,
    })
}

/// `what` names `value` at `field`, which does not parse: refused by the policy field `policy_field`.
pub(super) fn malformed(
    rule: &Rule<'_>,
    policy_field: &str,
    what: &str,
    field: &str,
    err: references::Malformed,
) -> Denial {
    let at = if field.is_empty() {
        String::new()
    } else {
        format!(" {field}")
    };
    Denial::fixed(rule, policy_field, format!("{what}{at}: {err}"))
}
