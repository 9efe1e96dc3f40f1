//! The policy decision: a pure function of (one `TpuPolicy`'s spec, request, namespace usage).

use super::{NetworkUse, Request, Rule, TpuPolicySpec, TpuUse, Usage};
use crate::governance::pricing::family_name;

/// The `allowedServiceAccounts` entry that stands for an object naming no service account.
pub const DEFAULT_ACCOUNT: &str = "default";

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

/// A network or subnetwork as a path without scheme and host (`projects/...`): full URLs lose
/// their `https://.../compute/v1/` prefix, paths relative to a project (`global/networks/n`)
/// and bare names get the object's project (and, for a subnetwork, its region).
fn network_path(value: &str, project: &str, region: Option<&str>) -> String {
    let v = match value.find("projects/") {
        Some(i) if value.starts_with("https://") => &value[i..],
        _ => value,
    };
    if v.starts_with("projects/") {
        v.to_string()
    } else if v.contains('/') {
        format!("projects/{project}/{v}")
    } else {
        match region {
            Some(region) => format!("projects/{project}/regions/{region}/subnetworks/{v}"),
            None => format!("projects/{project}/global/networks/{v}"),
        }
    }
}

/// Whether network (`region: None`) or subnetwork `value` is in `allowed`, both read as paths in
/// the object's project and region ([`network_path`]); entries ending in `*` match by prefix.
fn network_allowed(allowed: &[String], value: &str, project: &str, region: Option<&str>) -> bool {
    let value = network_path(value, project, region);
    allowed.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => value.starts_with(&network_path(prefix, project, region)),
        None => network_path(a, project, region) == value,
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

/// The Google identity and the networks the workload runs with (not checked on the first look at
/// an adoption, before the node is read).
fn identity(rule: &Rule<'_>, req: &Request) -> Result<(), Denial> {
    let p: &TpuPolicySpec = rule.policy;
    let what = &req.what;
    if let Some(allowed) = &p.allowed_service_accounts
        && !req.identity_pending
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
    if let Some(allowed) = p.allowed_networks.as_ref().filter(|_| !req.identity_pending) {
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
        if let Some(network) = network
            && !network_allowed(allowed, network, &req.project, None)
        {
            let msg = format!(
                "{what} uses network {:?}; allowed: {}",
                network_path(network, &req.project, None),
                list(allowed)
            );
            return Err(Denial::fixed(rule, "allowedNetworks", msg));
        }
    }
    if let (Some(allowed), Some(subnet)) = (&p.allowed_subnetworks, &req.subnetwork)
        && !req.identity_pending
        && !network_allowed(allowed, subnet, &req.project, Some(&req.region))
    {
        let msg = format!(
            "{what} uses subnetwork {:?}; allowed: {}",
            network_path(subnet, &req.project, Some(&req.region)),
            list(allowed)
        );
        return Err(Denial::fixed(rule, "allowedSubnetworks", msg));
    }
    Ok(())
}

/// The TPU itself: family and size, capacity kind, and the object's own burn rate.
fn chips(rule: &Rule<'_>, req: &Request, tpu: &TpuUse) -> Result<(), Denial> {
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
fn namespace_totals(rule: &Rule<'_>, req: &Request, tpu: &TpuUse, usage: &Usage) -> Result<(), Denial> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::{
        pricing::CapacityKind,
        tenancy::{AcceleratorRule, TpuUse},
    };
    use tpu_operator_api::accelerator::parse_accelerator_type;

    fn team_a() -> TpuPolicySpec {
        TpuPolicySpec {
            default_project: Some("team-a".into()),
            allowed_projects: Some(vec!["team-a".into(), "shared-*".into()]),
            allowed_regions: Some(vec!["us-east5".into(), "us-central2".into()]),
            allowed_zones: Some(vec!["us-east5-b".into(), "us-central2-*".into()]),
            allowed_accelerators: Some(vec![
                AcceleratorRule {
                    family: "v6e".into(),
                    max_chips: Some(8),
                },
                AcceleratorRule {
                    family: "v4".into(),
                    max_chips: None,
                },
            ]),
            allowed_capacity: Some(vec![CapacityKind::Spot, CapacityKind::Queued]),
            max_chips: Some(16),
            max_spend_per_hour_usd: Some(40.0),
            max_object_spend_per_hour_usd: Some(30.0),
            ..Default::default()
        }
    }

    fn slice(project: &str, zone: &str, accel: &str, capacity: CapacityKind) -> Request {
        let shape = parse_accelerator_type(accel).unwrap();
        let per_hour = crate::governance::pricing::PriceTable::default()
            .slice_per_hour(&shape, capacity)
            .0;
        Request {
            what: "TpuSlice".into(),
            project: project.into(),
            region: zone.rsplit_once('-').unwrap().0.into(),
            zone: Some(zone.into()),
            tpu: Some(TpuUse { shape, capacity }),
            per_hour_usd: per_hour,
            ..Default::default()
        }
    }

    fn usage(chips: u32, per_hour_usd: f64) -> Usage {
        Usage {
            chips,
            per_hour_usd,
            holders: vec!["TpuSlice first".into()],
        }
    }

    /// A table case: (request, usage, expected: None = allowed, Some((field, retry, fragment))).
    type Case<'a> = (Request, &'a Usage, Option<(&'a str, bool, &'a str)>);

    /// Evaluates every case against [`team_a`] (named `team-a`): allowed, or denied by `field`
    /// with `retry` and a message containing `fragment`.
    fn check_team_a(cases: Vec<Case<'_>>) {
        let policy = team_a();
        let rule = Rule {
            name: "team-a",
            policy: &policy,
        };
        for (req, usage, want) in cases {
            let got = evaluate(Some(rule), &req, Some(usage));
            match (want, got) {
                (None, Ok(())) => {}
                (Some((field, retry, fragment)), Err(d)) => {
                    assert!(
                        d.message.contains(&format!("TpuPolicy team-a, spec.{field}:")),
                        "{req:?}: {d:?}"
                    );
                    assert!(d.message.contains(fragment), "{req:?}: {}", d.message);
                    assert_eq!(d.retry, retry, "{}", d.message);
                }
                (want, got) => panic!("{req:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn table_projects_regions_and_zones() {
        use CapacityKind::*;
        let none = usage(0, 0.0);
        check_team_a(vec![
            (slice("team-a", "us-east5-b", "v6e-8", Spot), &none, None),
            (slice("shared-x", "us-central2-b", "v4-8", Queued), &none, None),
            (
                slice("other", "us-east5-b", "v6e-8", Spot),
                &none,
                Some((
                    "allowedProjects",
                    false,
                    "project \"other\"; allowed: team-a, shared-*",
                )),
            ),
            (
                slice("team-a", "europe-west4-a", "v6e-8", Spot),
                &none,
                Some(("allowedRegions", false, "region \"europe-west4\"")),
            ),
            (
                slice("team-a", "us-east5-a", "v6e-8", Spot),
                &none,
                Some((
                    "allowedZones",
                    false,
                    "zone \"us-east5-a\"; allowed: us-east5-b, us-central2-*",
                )),
            ),
        ]);
    }

    #[test]
    fn table_accelerators_capacity_and_object_spend() {
        use CapacityKind::*;
        let none = usage(0, 0.0);
        check_team_a(vec![
            (
                slice("team-a", "us-east5-b", "v5p-8", Spot),
                &none,
                Some((
                    "allowedAccelerators",
                    false,
                    "TPU v5p; allowed: v6e up to 8 chips, v4",
                )),
            ),
            (
                slice("team-a", "us-east5-b", "v6e-16", Spot),
                &none,
                Some(("allowedAccelerators", false, "16 chips of v6e")),
            ),
            (
                slice("team-a", "us-east5-b", "v6e-8", OnDemand),
                &none,
                Some((
                    "allowedCapacity",
                    false,
                    "onDemand capacity; allowed: spot, queued",
                )),
            ),
            (
                slice("team-a", "us-central2-b", "v4-32", Queued),
                &none,
                Some((
                    "maxObjectSpendPerHourUsd",
                    false,
                    "$51.52/h; allowed per object: $30.00/h",
                )),
            ),
        ]);
    }

    #[test]
    fn table_namespace_chips_and_budget() {
        use CapacityKind::*;
        let (twelve, eight, spending) = (usage(12, 0.0), usage(8, 0.0), usage(0, 30.0));
        check_team_a(vec![
            (
                slice("team-a", "us-east5-b", "v6e-8", Spot),
                &twelve,
                Some((
                    "maxChips",
                    true,
                    "needs 8 chips and the namespace already uses 12 (TpuSlice first); allowed at once: 16",
                )),
            ),
            (slice("team-a", "us-east5-b", "v6e-8", Spot), &eight, None),
            (
                slice("team-a", "us-east5-b", "v6e-8", Spot),
                &spending,
                Some((
                    "maxSpendPerHourUsd",
                    true,
                    "budget: TpuSlice would add $10.80/h to the $30.00/h",
                )),
            ),
        ]);
    }

    #[test]
    fn no_rule_or_no_usage_skips_checks() {
        let req = slice("anything", "asia-east1-c", "v5p-8", CapacityKind::OnDemand);
        assert!(evaluate(None, &req, Some(&usage(10_000, 1e9))).is_ok());
        let policy = team_a();
        let rule = Rule {
            name: "r",
            policy: &policy,
        };
        let ok = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Spot);
        assert!(evaluate(Some(rule), &ok, None).is_ok(), "quota needs usage");
        // Empty lists allow nothing.
        let closed = TpuPolicySpec {
            allowed_projects: Some(vec![]),
            ..Default::default()
        };
        let rule = Rule {
            name: "closed",
            policy: &closed,
        };
        let d = evaluate(Some(rule), &ok, None).unwrap_err();
        assert!(d.message.contains("allowed: none"), "{}", d.message);
    }

    /// A policy on service accounts, networks and subnetworks only (no adoption).
    fn accounts_and_networks() -> TpuPolicySpec {
        TpuPolicySpec {
            allowed_service_accounts: Some(vec![
                "*@team-a.iam.gserviceaccount.com".into(),
                "shared@platform.iam.gserviceaccount.com".into(),
            ]),
            allowed_networks: Some(vec![
                "team-net".into(),
                "projects/host/global/networks/shared-*".into(),
            ]),
            allowed_subnetworks: Some(vec!["team-*".into()]),
            ..Default::default()
        }
    }

    /// A Dataproc batch that [`accounts_and_networks`] allows.
    fn allowed_batch() -> Request {
        Request {
            what: "Dataproc batch".into(),
            project: "team-a".into(),
            region: "us-east5".into(),
            service_account: Some("etl@team-a.iam.gserviceaccount.com".into()),
            network: NetworkUse::Named("team-net".into()),
            ..Default::default()
        }
    }

    /// `req` against [`accounts_and_networks`] (named `team-a`), the denial as its message.
    fn check_accounts_and_networks(req: &Request) -> Result<(), String> {
        let policy = accounts_and_networks();
        let rule = Rule {
            name: "team-a",
            policy: &policy,
        };
        evaluate(Some(rule), req, None).map_err(|d| d.message)
    }

    #[test]
    fn service_accounts_networks_and_adoption_denied() {
        let ok = allowed_batch();
        assert_eq!(check_accounts_and_networks(&ok), Ok(()));
        for (req, fragment) in [
            (
                Request {
                    service_account: Some("owner@other.iam.gserviceaccount.com".into()),
                    ..ok.clone()
                },
                "allowedServiceAccounts: Dataproc batch runs as service account \"owner@other.iam.gserviceaccount.com\"",
            ),
            (
                Request {
                    service_account: Some("x@evil-team-a.iam.gserviceaccount.com".into()),
                    ..ok.clone()
                },
                "allowedServiceAccounts",
            ),
            (
                Request {
                    service_account: None,
                    ..ok.clone()
                },
                "allowedServiceAccounts: Dataproc batch runs as the service's default service account",
            ),
            (
                Request {
                    network: NetworkUse::Default,
                    ..ok.clone()
                },
                "allowedNetworks: Dataproc batch uses network \"projects/team-a/global/networks/default\"",
            ),
            (
                Request {
                    network: NetworkUse::Named("projects/other/global/networks/team-net".into()),
                    ..ok.clone()
                },
                "allowedNetworks",
            ),
            (
                Request {
                    subnetwork: Some("projects/team-a/regions/us-east5/subnetworks/prod".into()),
                    ..ok.clone()
                },
                "allowedSubnetworks: Dataproc batch uses subnetwork \"projects/team-a/regions/us-east5/subnetworks/prod\"",
            ),
            (
                Request {
                    adopt: Some("projects/team-a/locations/us-east5-b/nodes/n".into()),
                    ..ok.clone()
                },
                "allowAdoption: Dataproc batch: this namespace may not adopt existing TPU nodes",
            ),
        ] {
            let got = check_accounts_and_networks(&req).unwrap_err();
            assert!(
                got.contains(&format!("TpuPolicy team-a, spec.{fragment}")) || got.contains(fragment),
                "{got}"
            );
            assert!(got.starts_with("denied by TpuPolicy team-a, spec."), "{got}");
        }
    }

    #[test]
    fn service_accounts_and_networks_allowed_in_every_form() {
        let ok = allowed_batch();
        for req in [
            Request {
                network: NetworkUse::Named(
                    "https://www.googleapis.com/compute/v1/projects/host/global/networks/shared-1".into(),
                ),
                subnetwork: Some("team-east".into()),
                ..ok.clone()
            },
            Request {
                network: NetworkUse::OfSubnetwork,
                subnetwork: Some("projects/team-a/regions/us-east5/subnetworks/team-1".into()),
                ..ok.clone()
            },
            Request {
                network: NetworkUse::Unused,
                service_account: Some("Shared@Platform.iam.gserviceaccount.com".into()),
                ..ok.clone()
            },
        ] {
            assert_eq!(check_accounts_and_networks(&req), Ok(()), "{req:?}");
        }
    }

    /// A subnetwork alone cannot be checked against a network list.
    #[test]
    fn subnetwork_alone_is_denied_by_a_network_list() {
        let networks_only = TpuPolicySpec {
            allowed_networks: Some(vec!["team-net".into()]),
            allow_adoption: true,
            ..Default::default()
        };
        let rule = Rule {
            name: "r",
            policy: &networks_only,
        };
        let subnet_only = Request {
            network: NetworkUse::OfSubnetwork,
            subnetwork: Some("s".into()),
            adopt: Some("n".into()),
            ..allowed_batch()
        };
        let d = evaluate(Some(rule), &subnet_only, None).unwrap_err();
        assert!(
            d.message
                .contains("spec.allowedNetworks: Dataproc batch names only subnetwork \"s\""),
            "{}",
            d.message
        );
    }

    #[test]
    fn non_tpu_requests_only_check_project_and_location() {
        let policy = team_a();
        let rule = Rule {
            name: "r",
            policy: &policy,
        };
        let batch = Request {
            what: "Dataproc batch".into(),
            project: "team-a".into(),
            region: "us-east5".into(),
            zone: None,
            tpu: None,
            per_hour_usd: 0.0,
            ..Default::default()
        };
        assert!(evaluate(Some(rule), &batch, Some(&usage(16, 40.0))).is_ok());
        let elsewhere = Request {
            region: "europe-west4".into(),
            ..batch
        };
        assert!(evaluate(Some(rule), &elsewhere, None).is_err());
    }
}
