//! Adopting an existing TPU node (`TpuSlice.spec.adoptNodeId`).
//!
//! Adoption hands the slice's owner a node the operator did not create: the operator relabels
//! it, rewrites its metadata (startup script) and deletes it with the slice. So it is judged like
//! a create, against the node as the cloud reports it (shape, capacity, service account,
//! networks; [`requests`]), only where the namespace's policy has `allowAdoption: true`, and never
//! for a node that carries another owner's operator labels ([`ownership`], with or without a
//! policy). What the node must match is the adopting kind's to say ([`Expected`], from its spec).
//! See `docs/policy.md`.

use std::collections::BTreeMap;

use tpu_operator_api::{
    accelerator::{SliceShape, TpuGeneration, parse_accelerator_type, shape_from_config},
    naming::{self, ObjectIdentity, labels},
};
use tpu_operator_gcp::tpu_v2::model::{Node, accelerator_config};

use super::{Denial, NetworkUse, Request, TpuUse, request};
use crate::{
    governance::pricing::{CapacityKind, PriceTable},
    runtime::error::Result,
};

/// Whose node it is, when it is not someone else's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// It carries this slice's identity labels: adopted already (the check was made then).
    Ours,
    /// It carries no operator labels: it may be adopted, after the policy's checks.
    Unclaimed,
}

/// What the adopting object's spec says the node is, as the node is judged against it: the
/// namespace's chip quota and budget count the object by its spec, so the node must match it.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The adopting object's kind, as messages name it (`TpuSlice`).
    pub kind: &'static str,
    /// The zone the spec names (where the node is).
    pub zone: String,
    /// The spec's shape (`None`: it has no valid one).
    pub shape: Option<SliceShape>,
    /// The capacity kind the spec is priced at.
    pub price_kind: CapacityKind,
    /// The spec says `deletionPolicy: Orphan`.
    pub orphan: bool,
}

/// The operator's label keys that name an owner.
const OWNER_KEYS: [&str; 4] = [labels::UID, labels::NAMESPACE, labels::NAME, labels::CLUSTER];

/// Whether `node` (its full name and labels) may be taken over by `identity` (an object of
/// `kind`, as messages name it) in `cluster_id`.
/// A node with any `tpu-operator-*` owner label (or `managed-by=tpu-operator`) that is not
/// exactly this slice's identity belongs to another object or cluster: refused, naming the label
/// and the owner.
pub fn ownership<'a>(
    node: &str,
    node_labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    identity: &ObjectIdentity,
    cluster_id: &str,
    kind: &str,
) -> Result<Ownership, Denial> {
    let have: BTreeMap<&str, &str> = node_labels
        .into_iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let ours = naming::identity_labels(identity, cluster_id);
    let managed = have.get(labels::MANAGED_BY) == Some(&labels::MANAGED_BY_VALUE);
    let claimed = managed || OWNER_KEYS.iter().any(|k| have.contains_key(k));
    if !claimed {
        return Ok(Ownership::Unclaimed);
    }
    let differing = OWNER_KEYS
        .iter()
        .map(|k| (*k, have.get(k).copied(), ours.get(*k).map(String::as_str)))
        .find(|(_, have, want)| have != want);
    let Some((key, value, _)) = differing else {
        return Ok(Ownership::Ours);
    };
    let get = |k: &str| have.get(k).copied().unwrap_or("?");
    let label = match value {
        Some(v) => format!("label {key}={v}"),
        None => format!("operator labels without {key}"),
    };
    let message = format!(
        "adoption refused: node {node} carries {label}: it belongs to another object or cluster \
         (owner: {}/{} uid {} in cluster {}); the operator adopts only nodes without tpu-operator \
         labels or with this {kind}'s own",
        get(labels::NAMESPACE),
        get(labels::NAME),
        get(labels::UID),
        get(labels::CLUSTER),
    );
    Err(Denial {
        message,
        retry: false,
    })
}

fn generation(t: &accelerator_config::Type) -> Option<TpuGeneration> {
    use accelerator_config::Type as T;
    Some(match t {
        T::V2 => TpuGeneration::V2,
        T::V3 => TpuGeneration::V3,
        T::V4 => TpuGeneration::V4,
        T::V5LitePod => TpuGeneration::V5e,
        T::V5P => TpuGeneration::V5p,
        T::V6E => TpuGeneration::V6e,
        _ => return None,
    })
}

/// The node's real shape, from `acceleratorType` or `acceleratorConfig`.
fn node_shape(node: &Node) -> Option<SliceShape> {
    if !node.accelerator_type.is_empty() {
        return parse_accelerator_type(&node.accelerator_type).ok();
    }
    let c = node.accelerator_config.as_ref()?;
    shape_from_config(generation(&c.r#type)?, &c.topology).ok()
}

/// The node's capacity kind as the policy names it, and the kind it is priced at.
fn node_capacity(node: &Node) -> (CapacityKind, CapacityKind) {
    let sched = node.scheduling_config.as_ref();
    let spot = sched.is_some_and(|s| s.spot || s.preemptible);
    let price = if spot {
        CapacityKind::Spot
    } else {
        CapacityKind::OnDemand
    };
    let kind = if !node.queued_resource.is_empty() {
        CapacityKind::Queued
    } else if spot {
        CapacityKind::Spot
    } else if sched.is_some_and(|s| s.reserved) {
        CapacityKind::Reserved
    } else {
        CapacityKind::OnDemand
    };
    (kind, price)
}

/// What adopting `node` (in `project` / the spec's zone) gives the slice, as policy requests: the
/// node's shape, capacity, price, service account and primary network, then one request per
/// further network interface. `Err`: the node cannot be judged, or does not match the spec (the
/// namespace's chip quota and budget count every slice by its spec, so a bigger or dearer node
/// than the spec says would hide from them).
pub fn requests(
    node: &Node,
    spec: &Expected,
    project: &str,
    prices: &PriceTable,
) -> Result<Vec<Request>, String> {
    let name = &node.name;
    let zone = &spec.zone;
    let (shape, capacity, per_hour_usd) = priced_as_the_spec(node, spec, prices)?;
    let primary = node.network_config.as_ref();
    let first = Request {
        what: format!(
            "{} adopting node {name} ({} in {zone})",
            spec.kind,
            shape.accelerator_type()
        ),
        project: project.to_owned(),
        region: request::region_of_zone(zone).to_owned(),
        zone: Some(zone.to_owned()),
        tpu: Some(TpuUse { shape, capacity }),
        per_hour_usd,
        service_account: node
            .service_account
            .as_ref()
            .map(|sa| sa.email.clone())
            .filter(|e| !e.is_empty()),
        network: primary.map_or(NetworkUse::Default, |n| network_use(&n.network)),
        subnetwork: primary.and_then(|n| subnetwork_use(&n.subnetwork)),
        adopt: Some(name.clone()),
        identity_pending: false,
        orphan: spec.orphan,
        ..Request::default()
    };
    let more: Vec<Request> = node
        .network_configs
        .iter()
        .map(|n| Request {
            tpu: None,
            per_hour_usd: 0.0,
            network: network_use(&n.network),
            subnetwork: subnetwork_use(&n.subnetwork),
            ..first.clone()
        })
        .collect();
    Ok(std::iter::once(first).chain(more).collect())
}

/// The node's shape, capacity kind and hourly price, when they are the spec's: `Err` when the
/// node's accelerator cannot be told, or its shape or price key differs from the spec's.
fn priced_as_the_spec(
    node: &Node,
    spec: &Expected,
    prices: &PriceTable,
) -> Result<(SliceShape, CapacityKind, f64), String> {
    let name = &node.name;
    let shape = node_shape(node).ok_or_else(|| {
        format!(
            "cannot tell the accelerator of node {name} (acceleratorType {:?})",
            node.accelerator_type
        )
    })?;
    let (capacity, price_kind) = node_capacity(node);
    let (per_hour_usd, key) = prices.slice_per_hour(&shape, price_kind);
    let spec_shape = spec.shape.clone();
    let spec_key = spec_shape
        .as_ref()
        .map(|s| prices.slice_per_hour(s, spec.price_kind).1);
    if spec_shape.as_ref() != Some(&shape) || spec_key.as_deref() != Some(key.as_str()) {
        return Err(format!(
            "node {name} is {} priced as {key}, the spec asks for {} priced as {}: an adopted node \
             must match its spec (the chip quota and budget count the spec)",
            shape.accelerator_type(),
            spec_shape.map_or_else(|| "an invalid shape".to_string(), |s| s.accelerator_type()),
            spec_key.unwrap_or_default(),
        ));
    }
    Ok((shape, capacity, per_hour_usd))
}

/// A node interface's network: empty is the project's `default` network.
fn network_use(network: &str) -> NetworkUse {
    match network {
        "" => NetworkUse::Default,
        n => NetworkUse::Named(n.to_owned()),
    }
}

/// A node interface's subnetwork, when it names one.
fn subnetwork_use(subnetwork: &str) -> Option<String> {
    (!subnetwork.is_empty()).then(|| subnetwork.to_owned())
}

/// What taking over `node` asks of the namespace's policy: the requests a create of the node as
/// the cloud reports it would make, admitted with usage like a create; or the refusal, when the
/// node breaks a rule by what it is. No policy: as `namespacesWithoutPolicy` says.
pub fn claim(
    policies: &super::Policies,
    prices: &PriceTable,
    namespace: &str,
    node: &Node,
    spec: &Expected,
    project: &str,
) -> Result<Vec<super::Request>, Denial> {
    let governing = policies.governing(namespace);
    let Some(rule) = governing.rules().next() else {
        return governing.refusal().map_or(Ok(Vec::new()), Err);
    };
    requests(node, spec, project, prices).map_err(|message| Denial {
        message: format!("denied by TpuPolicy {}, spec.allowAdoption: {message}", rule.name),
        retry: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_gcp::tpu_v2::model::{NetworkConfig, SchedulingConfig, ServiceAccount};

    fn id() -> ObjectIdentity {
        ObjectIdentity::new("team-a", "train", "3f2a9c4e-1b2d-4c5e-8f90-a1b2c3d4e5f6")
    }

    fn owned_by(id: &ObjectIdentity, cluster: &str) -> BTreeMap<String, String> {
        naming::identity_labels(id, cluster)
    }

    #[test]
    fn foreign_labels_are_refused_naming_label_and_owner() {
        let me = id();
        let unlabelled = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        assert_eq!(
            ownership("n", &unlabelled, &me, "c1", "TpuSlice"),
            Ok(Ownership::Unclaimed)
        );
        assert_eq!(
            ownership("n", &owned_by(&me, "c1"), &me, "c1", "TpuSlice"),
            Ok(Ownership::Ours)
        );

        let other = ObjectIdentity::new("team-b", "theirs", "0badc0de-0000-4000-8000-000000000000");
        let d = ownership("n", &owned_by(&other, "c1"), &me, "c1", "TpuSlice").unwrap_err();
        assert!(
            d.message
                .contains("carries label tpu-operator-uid=0badc0de-0000-4000-8000-000000000000")
                && d.message.contains("owner: team-b/theirs")
                && d.message.ends_with("or with this TpuSlice's own"),
            "{}",
            d.message
        );
        let d = ownership("n", &owned_by(&me, "c2"), &me, "c1", "TpuSlice").unwrap_err();
        assert!(d.message.contains("tpu-operator-cluster=c2"), "{}", d.message);
        let bare = BTreeMap::from([("managed-by".to_string(), "tpu-operator".to_string())]);
        let d = ownership("n", &bare, &me, "c1", "TpuSlice").unwrap_err();
        assert!(
            d.message.contains("operator labels without tpu-operator-uid"),
            "{}",
            d.message
        );
    }

    /// What a slice's spec in us-east5-b says: `accel`, priced at `price_kind`.
    fn spec(accel: &str, price_kind: CapacityKind) -> Expected {
        Expected {
            kind: "TpuSlice",
            zone: "us-east5-b".into(),
            shape: parse_accelerator_type(accel).ok(),
            price_kind,
            orphan: false,
        }
    }

    #[test]
    fn the_node_is_judged_as_it_is_and_must_match_the_spec() {
        let node = Node::new()
            .set_name("projects/p/locations/us-east5-b/nodes/n")
            .set_accelerator_type("v6e-8")
            .set_scheduling_config(SchedulingConfig::new().set_spot(true))
            .set_service_account(ServiceAccount::new().set_email("sa@p.iam.gserviceaccount.com"))
            .set_network_config(
                NetworkConfig::new()
                    .set_network("projects/p/global/networks/default")
                    .set_subnetwork("projects/p/regions/us-east5/subnetworks/default"),
            );
        let prices = PriceTable::default();
        let spot = spec("v6e-8", CapacityKind::Spot);
        let reqs = requests(&node, &spot, "p", &prices).unwrap();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(
            r.adopt.as_deref(),
            Some("projects/p/locations/us-east5-b/nodes/n")
        );
        assert_eq!(r.tpu.as_ref().unwrap().capacity, CapacityKind::Spot);
        assert_eq!(r.service_account.as_deref(), Some("sa@p.iam.gserviceaccount.com"));
        assert_eq!(
            r.network,
            NetworkUse::Named("projects/p/global/networks/default".into())
        );
        assert!((r.per_hour_usd - 10.8).abs() < 1e-9);

        let err = requests(&node, &spec("v6e-4", CapacityKind::Spot), "p", &prices).unwrap_err();
        assert!(
            err.contains("node projects/p/locations/us-east5-b/nodes/n is v6e-8"),
            "{err}"
        );
        let on_demand = spec("v6e-8", CapacityKind::OnDemand);
        assert!(requests(&node, &on_demand, "p", &prices).is_err());
    }
}
