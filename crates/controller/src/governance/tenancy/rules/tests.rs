use super::*;
use crate::governance::{
    pricing::CapacityKind,
    tenancy::{AcceleratorRule, NetworkUse, TpuUse},
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
        budgets: &[],
        namespace: "team-a",
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
        budgets: &[],
        namespace: "team-a",
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
        budgets: &[],
        namespace: "team-a",
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
        budgets: &[],
        namespace: "team-a",
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
        budgets: &[],
        namespace: "team-a",
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
        budgets: &[],
        namespace: "team-a",
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

/// Issue 32: references to other resources, judged by what they point at, not their text.
fn hostile(policy: TpuPolicySpec, req: &Request) -> Result<(), String> {
    let rule = Rule {
        name: "team-a",
        policy: &policy,
        budgets: &[],
        namespace: "team-a",
    };
    evaluate(Some(rule), req, None).map_err(|d| d.message)
}

fn named(field: &str, value: &str) -> Option<crate::governance::tenancy::request::Named> {
    Some(crate::governance::tenancy::request::Named {
        field: field.into(),
        value: value.into(),
    })
}

/// Item 11: `..` segments and foreign hosts no longer pass a name pattern.
#[test]
fn network_traversal_and_foreign_hosts_are_refused() {
    let policy = || TpuPolicySpec {
        allowed_networks: Some(vec!["team-a-*".into()]),
        allowed_subnetworks: Some(vec!["team-a-*".into()]),
        ..Default::default()
    };
    let mut ok = allowed_batch();
    ok.network = NetworkUse::Named("team-a-x".into());
    ok.fields.network = "spec.execution.networkUri".into();
    assert_eq!(hostile(policy(), &ok), Ok(()));
    for (network, fragment) in [
        (
            "global/networks/team-a-x/../../../../team-b-train/global/networks/prod",
            "spec.allowedNetworks: Dataproc batch spec.execution.networkUri: \"global/networks/team-a-x/../",
        ),
        (
            "https://evil.example.com/compute/v1/projects/team-a/global/networks/team-a-x",
            "is not a network reference the operator accepts (accepted: NAME, global/networks/NAME",
        ),
        (
            "projects/team-b/global/networks/team-a-x",
            "uses network \"projects/team-b/global/networks/team-a-x\"",
        ),
    ] {
        let req = Request {
            network: NetworkUse::Named(network.into()),
            ..ok.clone()
        };
        let got = hostile(policy(), &req).unwrap_err();
        assert!(got.contains(fragment), "{network}: {got}");
    }
    let req = Request {
        network: NetworkUse::OfSubnetwork,
        subnetwork: Some("regions/us-east5/subnetworks/team-a-1/../../../x".into()),
        ..ok.clone()
    };
    let got = hostile(policy(), &req).unwrap_err();
    assert!(
        got.contains("spec.allowedSubnetworks:") && got.contains("accepted: NAME, regions/REGION"),
        "{got}"
    );
}

/// Item 5: a reservation in another project is refused by `allowedProjects`, a short name is
/// the object's project, and `allowedReservations` alone decides when set.
#[test]
fn reservations_are_checked_with_their_project() {
    let mut req = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Reserved);
    req.reservation = named("spec.capacity.reserved.reservationName", "mine");
    let projects = || TpuPolicySpec {
        allowed_projects: Some(vec!["team-a".into()]),
        ..Default::default()
    };
    assert_eq!(hostile(projects(), &req), Ok(()));
    req.reservation = named(
        "spec.capacity.reserved.reservationName",
        "projects/team-b/locations/us-east5-b/reservations/theirs",
    );
    let got = hostile(projects(), &req).unwrap_err();
    assert!(
            got.contains("spec.allowedProjects: TpuSlice consumes reservation \"projects/team-b/locations/us-east5-b/reservations/theirs\"")
                && got.contains("of project \"team-b\"; allowed: team-a"),
            "{got}"
        );
    let shared = TpuPolicySpec {
        allowed_reservations: Some(vec![
            "projects/platform/locations/us-east5-b/reservations/shared-*".into(),
            "mine".into(),
        ]),
        ..projects()
    };
    assert!(
        hostile(shared.clone(), &req)
            .unwrap_err()
            .contains("spec.allowedReservations:")
    );
    req.reservation = named(
        "x",
        "projects/platform/locations/us-east5-b/reservations/shared-1",
    );
    assert_eq!(hostile(shared.clone(), &req), Ok(()));
    req.reservation = named("x", "mine");
    assert_eq!(hostile(shared.clone(), &req), Ok(()));
    req.reservation = named(
        "x",
        "projects/platform/locations/us-east5-b/reservations/shared-1/../../x",
    );
    assert!(
        hostile(shared, &req)
            .unwrap_err()
            .contains("is not a reservation reference")
    );
    // No policy on projects or reservations: nothing to check.
    assert_eq!(hostile(TpuPolicySpec::default(), &req), Ok(()));
}

/// Item 6: a Compute Engine image of another project is refused; the default allows the
/// object's project and Google's public Ubuntu images.
#[test]
fn images_of_other_projects_are_refused() {
    let mut req = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Spot);
    let at = "spec.computeEngine.image";
    for ok in [
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
        "global/images/mine",
        "https://www.googleapis.com/compute/v1/projects/team-a/global/images/family/f",
    ] {
        req.image = named(at, ok);
        assert_eq!(hostile(TpuPolicySpec::default(), &req), Ok(()), "{ok}");
    }
    req.image = named(at, "projects/team-b/global/images/backdoored");
    let got = hostile(TpuPolicySpec::default(), &req).unwrap_err();
    assert!(
        got.contains(
            "spec.allowedImageProjects: TpuSlice boots image \"projects/team-b/global/images/backdoored\""
        ) && got.contains("allowed: team-a, ubuntu-os-cloud"),
        "{got}"
    );
    let listed = TpuPolicySpec {
        allowed_image_projects: Some(vec!["golden-*".into()]),
        ..Default::default()
    };
    req.image = named(at, "projects/golden-images/global/images/i");
    assert_eq!(hostile(listed.clone(), &req), Ok(()));
    req.image = named(
        at,
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
    );
    assert!(hostile(listed, &req).unwrap_err().contains("allowed: golden-*"));
}

/// Item 10: every Cloud Storage location is in an allowed bucket.
#[test]
fn buckets_outside_the_list_are_refused() {
    let policy = || TpuPolicySpec {
        allowed_buckets: Some(vec!["team-a-*".into()]),
        ..Default::default()
    };
    let mut req = allowed_batch();
    req.storage = vec![crate::governance::tenancy::request::Named {
        field: "spec.inputs[0]".into(),
        value: "gs://team-a-raw/x".into(),
    }];
    assert_eq!(hostile(policy(), &req), Ok(()));
    req.storage.push(crate::governance::tenancy::request::Named {
        field: "spec.artifacts.checkpointDir".into(),
        value: "gs://team-b-ckpt/run/".into(),
    });
    let got = hostile(policy(), &req).unwrap_err();
    assert!(
        got.contains(
            "spec.allowedBuckets: Dataproc batch names bucket \"team-b-ckpt\" (spec.artifacts.checkpointDir"
        ),
        "{got}"
    );
    assert_eq!(hostile(TpuPolicySpec::default(), &req), Ok(()), "absent: any");
}

/// Every project a spec names is checked, not only the one the job runs in: a Vertex job's
/// TensorBoard in another project is refused by `allowedProjects`, one in an allowed project is
/// not.
#[test]
fn a_tensorboard_in_another_project_is_refused() {
    let mut req = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Spot);
    let policy = || TpuPolicySpec {
        allowed_projects: Some(vec!["team-a".into()]),
        ..Default::default()
    };
    req.in_projects = vec![crate::governance::tenancy::request::Named {
        field: "spec.training.vertex.tensorboard".into(),
        value: "projects/team-a/locations/us-east5/tensorboards/1".into(),
    }];
    assert_eq!(hostile(policy(), &req), Ok(()));
    req.in_projects[0].value = "projects/team-b/locations/us-east5/tensorboards/7".into();
    let got = hostile(policy(), &req).unwrap_err();
    assert!(
        got.contains("spec.allowedProjects:")
            && got.contains("spec.training.vertex.tensorboard")
            && got.contains("in project \"team-b\"; allowed: team-a"),
        "{got}"
    );
}

/// A period budget's actions, as the policy's status records them for the namespace: SpotOnly
/// refuses other capacity, RefuseNewWork everything, both only right before a create, and another
/// namespace's record changes nothing.
#[test]
fn period_budget_actions_in_force_refuse_new_work() {
    use tpu_operator_api::tpu_policy::{BudgetActionKind::*, BudgetPeriod, BudgetUsage};
    let policy = team_a();
    let record = |namespace: &str, in_force| BudgetUsage {
        namespace: namespace.into(),
        period: BudgetPeriod::Month,
        period_start: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-01T00:00:00Z".parse().unwrap(),
        ),
        period_end: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-12-01T00:00:00Z".parse().unwrap(),
        ),
        spent_usd: 912.345,
        limit_usd: 1000.0,
        accounted_through: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-26T00:00:00Z".parse().unwrap(),
        ),
        in_force,
        reached_percent: Some(90),
        next_action: None,
    };
    let spot_only = [
        record("team-b", vec![RefuseNewWork]),
        record("team-a", vec![Notify, SpotOnly]),
    ];
    let refuse = [record("team-a", vec![Notify, SpotOnly, RefuseNewWork])];
    let rule = |budgets| Rule {
        name: "team-a",
        policy: &policy,
        budgets,
        namespace: "team-a",
    };
    let queued = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Queued);
    let spot = slice("team-a", "us-east5-b", "v6e-8", CapacityKind::Spot);
    let idle = usage(0, 0.0);
    let d = evaluate(Some(rule(&spot_only)), &queued, Some(&idle)).unwrap_err();
    assert!(d.retry, "lifts when the period ends");
    assert!(d.message.contains("spec.budgets:"), "{}", d.message);
    assert!(
        d.message.contains("spent $912.35 of its $1000.00 Month budget"),
        "{}",
        d.message
    );
    assert!(
        d.message.contains("SpotOnly") && d.message.contains("2026-12-01T00:00:00Z"),
        "{}",
        d.message
    );
    assert_eq!(evaluate(Some(rule(&spot_only)), &spot, Some(&idle)), Ok(()));
    assert_eq!(
        evaluate(Some(rule(&spot_only)), &queued, None),
        Ok(()),
        "a first look refuses nothing: only a create is new work"
    );
    let d = evaluate(Some(rule(&refuse)), &spot, Some(&idle)).unwrap_err();
    assert!(d.message.contains("RefuseNewWork"), "{}", d.message);
    assert_eq!(evaluate(Some(rule(&[])), &queued, Some(&idle)), Ok(()));
    // SuspendAtCheckpoint refuses new work too, and hands running pipelines their hold.
    let suspend = [record("team-a", vec![Notify, SuspendAtCheckpoint])];
    let d = evaluate(Some(rule(&suspend)), &spot, Some(&idle)).unwrap_err();
    assert!(
        d.message.contains("SuspendAtCheckpoint is in force"),
        "{}",
        d.message
    );
    let hold = super::suspending(std::iter::once(rule(&suspend))).unwrap();
    assert_eq!(hold.until, suspend[0].period_end);
    assert!(
        hold.budget
            .starts_with("TpuPolicy team-a: namespace team-a has spent $912.35")
    );
    assert_eq!(super::suspending(std::iter::once(rule(&refuse))), None);
    assert_eq!(super::suspending(std::iter::once(rule(&spot_only))), None);
}
