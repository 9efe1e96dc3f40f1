//! The checks of each kind: which TpuPolicy field reads which part of a PreprocessBatch, a
//! TpuSlice and a TrainingPipeline, in the order the policy lists them.

use super::{Check, listed};
use crate::{tpu_slice::CapacityMode, training_pipeline::SchedulingStrategy};

/// A PreprocessBatch: its project and region, its Dataproc batch, and orphaning.
pub(super) fn preprocess_batch_checks() -> Vec<Check> {
    let kind = "PreprocessBatch";
    let mut checks = project_and_region_checks(kind);
    checks.extend(batch_checks(kind, "object.spec"));
    checks.push(orphan_check(kind, "object.spec"));
    checks
}

/// A TpuSlice: the slice spec is the object's spec.
pub(super) fn tpu_slice_checks() -> Vec<Check> {
    slice_checks("TpuSlice", "object.spec")
}

/// A TrainingPipeline: its project and region, its preprocess batch, orphaning, and whichever
/// training target it sets (a Vertex AI job or a TPU VM slice).
pub(super) fn training_pipeline_checks() -> Vec<Check> {
    let pipeline = "TrainingPipeline";
    let mut checks = project_and_region_checks(pipeline);
    checks.extend(batch_checks(pipeline, "object.spec.preprocess"));
    checks.push(orphan_check(pipeline, "object.spec"));
    checks.extend(vertex_checks(pipeline, "object.spec.training.vertex"));
    let slice = "object.spec.training.tpuVm.slice";
    checks.extend(slice_checks(pipeline, slice).into_iter().map(|mut c| {
        c.present = format!("has(object.spec.training.tpuVm) && ({})", c.present);
        c
    }));
    checks
}

/// `spec.project` and `spec.region`, which a PreprocessBatch and a TrainingPipeline both carry.
fn project_and_region_checks(kind: &'static str) -> Vec<Check> {
    vec![
        list_check(kind, "allowedProjects", "project", "object.spec.project"),
        list_check(kind, "allowedRegions", "region", "object.spec.region"),
    ]
}

/// A Vertex AI training job at `vertex`: its capacity (scheduling strategy), service account
/// and network.
fn vertex_checks(kind: &'static str, vertex: &str) -> Vec<Check> {
    let strategy = vertex_capacity(vertex);
    let vertex_account = format!("(has({vertex}.serviceAccount) ? {vertex}.serviceAccount : 'default')");
    vec![
        Check {
            kind,
            field: "allowedCapacity",
            present: format!("has({vertex})"),
            allowed: format!("{strategy} in params.spec.allowedCapacity"),
            asks: strategy.clone(),
            at: "Vertex capacity",
        },
        Check {
            kind,
            field: "allowedServiceAccounts",
            present: format!("has({vertex})"),
            allowed: accounts(&vertex_account),
            asks: vertex_account.clone(),
            at: "Vertex service account",
        },
        network_check(
            kind,
            "allowedNetworks",
            "Vertex network",
            &format!("{vertex}.network"),
            &format!("has({vertex}) && has({vertex}.network)"),
        ),
    ]
}

/// A list check of `value` (a string at `path`, read when `has(path)`), by prefix match.
fn list_check(kind: &'static str, field: &'static str, at: &'static str, path: &str) -> Check {
    Check {
        kind,
        field,
        present: format!("has({path})"),
        allowed: listed(&format!("params.spec.{field}"), path),
        asks: path.to_string(),
        at,
    }
}

/// A TPU slice spec at `slice` (`object.spec` or a pipeline's `object.spec.training.tpuVm.slice`).
fn slice_checks(kind: &'static str, slice: &str) -> Vec<Check> {
    let capacity = slice_capacity(slice);
    let account = format!("(has({slice}.serviceAccount) ? {slice}.serviceAccount.email : 'default')");
    let network = format!(
        "(has({slice}.networkConfig) && has({slice}.networkConfig.network) ? {slice}.networkConfig.network : 'default')"
    );
    vec![
        list_check(kind, "allowedProjects", "project", &format!("{slice}.project")),
        list_check(kind, "allowedZones", "zone", &format!("{slice}.zone")),
        accelerator_check(kind, slice),
        Check {
            kind,
            field: "allowedCapacity",
            // A capacity plan's rungs are judged instead (`plan_capacity_check`).
            present: format!("!has({slice}.capacityPlan)"),
            allowed: format!("{capacity} in params.spec.allowedCapacity"),
            asks: capacity.clone(),
            at: "capacity",
        },
        plan_capacity_check(kind, slice),
        plan_zones_check(kind, slice),
        Check {
            kind,
            field: "allowedServiceAccounts",
            present: "true".into(),
            allowed: accounts(&account),
            asks: account.clone(),
            at: "service account",
        },
        network_check(kind, "allowedNetworks", "network", &network, "true"),
        network_check(
            kind,
            "allowedSubnetworks",
            "subnetwork",
            &format!("{slice}.networkConfig.subnetwork"),
            &format!("has({slice}.networkConfig) && has({slice}.networkConfig.subnetwork)"),
        ),
        Check {
            kind,
            field: "allowAdoption",
            present: format!("has({slice}.adoptNodeId)"),
            allowed: "params.spec.allowAdoption".into(),
            asks: format!("'adopting node ' + {slice}.adoptNodeId"),
            at: "spec.adoptNodeId",
        },
        orphan_check(kind, slice),
    ]
}

/// The slice's accelerator type against `allowedAccelerators`: its family (v5e and v5litepod
/// being one) and its chip count (the type's suffix counts cores, two to a chip, except for
/// v5litepod and v6e whose suffix counts chips) at most the entry's `maxChips`.
fn accelerator_check(kind: &'static str, slice: &str) -> Check {
    let family = format!("{slice}.acceleratorType.split('-')[0]");
    let chips =
        format!("(int({slice}.acceleratorType.split('-')[1]) / ({family} in ['v5litepod', 'v6e'] ? 1 : 2))");
    let same_family = format!(
        "(a.family == {family} || (a.family == 'v5e' && {family} == 'v5litepod') || (a.family == 'v5litepod' && {family} == 'v5e'))"
    );
    Check {
        kind,
        field: "allowedAccelerators",
        present: format!("has({slice}.acceleratorType)"),
        allowed: format!(
            "params.spec.allowedAccelerators.exists(a, {same_family} && (!has(a.maxChips) || {chips} <= a.maxChips))"
        ),
        asks: format!("{slice}.acceleratorType"),
        at: "accelerator type",
    }
}

/// `deletionPolicy: Orphan` on the spec at `spec` (closed by default, `allowOrphan`).
fn orphan_check(kind: &'static str, spec: &str) -> Check {
    Check {
        kind,
        field: "allowOrphan",
        present: format!("has({spec}.deletionPolicy) && {spec}.deletionPolicy == 'Orphan'"),
        allowed: "params.spec.allowOrphan".into(),
        asks: "'Orphan (its cloud resources would keep running after deletion)'".into(),
        at: "deletionPolicy",
    }
}

/// Every rung of a capacity plan at `slice`: its kind, as `capacity` is checked.
fn plan_capacity_check(kind: &'static str, slice: &str) -> Check {
    let kinds = format!("{slice}.capacityPlan.rungs.map(r, {})", capacity_kind("r"));
    Check {
        kind,
        field: "allowedCapacity",
        present: format!("has({slice}.capacityPlan)"),
        allowed: format!("{kinds}.all(k, k in params.spec.allowedCapacity)"),
        asks: format!("{kinds}.filter(k, !(k in params.spec.allowedCapacity))[0]"),
        at: "capacityPlan rung",
    }
}

/// Every zone a capacity plan's rungs list, as `zone` is checked (a rung without zones asks in
/// `zone`, which its own check covers).
fn plan_zones_check(kind: &'static str, slice: &str) -> Check {
    let zones = "params.spec.allowedZones";
    let all_listed = |r: &str| format!("{r}.zones.all(z, {})", listed(zones, "z"));
    let first_denied = format!(
        "{slice}.capacityPlan.rungs.filter(r, has(r.zones) && !{})[0].zones.filter(z, !{})[0]",
        all_listed("r"),
        listed(zones, "z")
    );
    Check {
        kind,
        field: "allowedZones",
        present: format!("has({slice}.capacityPlan)"),
        allowed: format!(
            "{slice}.capacityPlan.rungs.all(r, !has(r.zones) || {})",
            all_listed("r")
        ),
        asks: first_denied,
        at: "capacityPlan zone",
    }
}

/// The capacity kind of the slice at `slice`, as a CEL string: generated from
/// [`CapacityMode::BY_FIELD`] and [`CapacityMode::kind`], the definition the controller uses.
fn slice_capacity(slice: &str) -> String {
    format!(
        "(!has({slice}.capacity) ? '{}' : {})",
        CapacityMode::OnDemand.kind().as_str(),
        capacity_kind(&format!("{slice}.capacity"))
    )
}

/// The capacity kind of the capacity object at `capacity` (`spec.capacity`, or a plan's rung).
fn capacity_kind(capacity: &str) -> String {
    let mut cel = String::from("(");
    // `onDemand: {}` is what no member means too: the fallback covers it.
    for (field, mode) in CapacityMode::BY_FIELD
        .into_iter()
        .filter(|(_, m)| *m != CapacityMode::OnDemand)
    {
        cel.push_str(&format!(
            "has({capacity}.{field}) ? '{}' : ",
            mode.kind().as_str()
        ));
    }
    cel.push_str(&format!("'{}')", CapacityMode::OnDemand.kind().as_str()));
    cel
}

/// The capacity kind of the Vertex job at `vertex`, as a CEL string: generated from
/// [`SchedulingStrategy::kind`], the definition the controller uses.
fn vertex_capacity(vertex: &str) -> String {
    let mut cel = String::from("(");
    for (name, strategy) in SchedulingStrategy::ALL {
        cel.push_str(&format!(
            "has({vertex}.scheduling) && {vertex}.scheduling.strategy == '{name}' ? '{}' : ",
            strategy.kind().as_str()
        ));
    }
    cel.push_str(&format!("'{}')", SchedulingStrategy::default().kind().as_str()));
    cel
}

/// Exact e-mails, `*@domain` suffixes, `default` for none.
fn accounts(account: &str) -> String {
    format!(
        "params.spec.allowedServiceAccounts.exists(a, a == {account} || (a.startsWith('*') && {account} != 'default' && {account}.endsWith(a.split('*')[1])))"
    )
}

/// Networks: admission decides only plain names against plain-name entries; a path on either
/// side (`projects/p/global/networks/n`, relative to the object's project or not) is the
/// controller's, which normalises both.
fn network_check(
    kind: &'static str,
    field: &'static str,
    at: &'static str,
    value: &str,
    present: &str,
) -> Check {
    Check {
        kind,
        field,
        present: present.to_string(),
        allowed: format!(
            "{value}.contains('/') || params.spec.{field}.exists(a, a.contains('/')) || {}",
            listed(&format!("params.spec.{field}"), value)
        ),
        asks: value.to_string(),
        at,
    }
}

/// Dataproc execution settings at `batch` (a PreprocessBatch's `object.spec`, a pipeline's `object.spec.preprocess`).
fn batch_checks(kind: &'static str, batch: &str) -> Vec<Check> {
    let exec = format!("{batch}.execution");
    let account = format!("(has({exec}) && has({exec}.serviceAccount) ? {exec}.serviceAccount : 'default')");
    vec![
        Check {
            kind,
            field: "allowedServiceAccounts",
            present: format!("has({batch})"),
            allowed: accounts(&account),
            asks: account.clone(),
            at: "Dataproc service account",
        },
        network_check(
            kind,
            "allowedNetworks",
            "Dataproc network",
            &format!("{exec}.networkUri"),
            &format!("has({batch}) && has({exec}) && has({exec}.networkUri) && !has({exec}.subnetworkUri)"),
        ),
        network_check(
            kind,
            "allowedSubnetworks",
            "Dataproc subnetwork",
            &format!("{exec}.subnetworkUri"),
            &format!("has({batch}) && has({exec}) && has({exec}.subnetworkUri)"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Flex-start is `queued` at admission as in the controller (it was `onDemand` here).
    #[test]
    fn capacity_kinds_come_from_the_api_definition() {
        let cel = slice_capacity("s");
        assert!(cel.contains("has(s.capacity.flexStart) ? 'queued'"), "{cel}");
        for (field, mode) in CapacityMode::BY_FIELD
            .into_iter()
            .filter(|(_, m)| *m != CapacityMode::OnDemand)
        {
            let want = format!("has(s.capacity.{field}) ? '{}'", mode.kind().as_str());
            assert!(cel.contains(&want), "{cel}");
        }
        let cel = vertex_capacity("v");
        assert!(
            cel.contains("v.scheduling.strategy == 'FlexStart' ? 'queued'"),
            "{cel}"
        );
        assert!(cel.ends_with("'onDemand')"), "{cel}");
        // The order the controller reads `spec.capacity` in is the order CEL tests it.
        let spec = |capacity: Value| -> crate::tpu_slice::TpuSliceSpec {
            serde_json::from_value(json!({"zone": "us-east5-b", "capacity": capacity})).unwrap()
        };
        for (field, mode) in CapacityMode::BY_FIELD {
            let body = if field == "flexStart" {
                json!({"runDuration": "1h"})
            } else if field == "reserved" {
                json!({"reservationName": "r"})
            } else {
                json!({})
            };
            assert_eq!(spec(json!({field: body})).capacity_mode(), mode, "{field}");
        }
    }
}
