//! What an object asks of the cloud, as the policy sees it: project, location, TPU shape and
//! capacity kind, the Google identity and network it runs with, and the estimated burn rate.
//! Each kind builds its own requests from its spec (the kinds' `policy` modules); this is their
//! shape and the helpers they share.

use tpu_operator_api::{DeletionPolicy, accelerator::SliceShape};

use crate::governance::pricing::CapacityKind;

/// TPU chips an object asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct TpuUse {
    pub shape: SliceShape,
    pub capacity: CapacityKind,
}

/// The VPC network a workload is attached to, as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NetworkUse {
    /// None of the customer's networks (a Vertex job without `network` peers with none).
    #[default]
    Unused,
    /// Nothing named: the project's `default` network (TPU VMs, Dataproc).
    Default,
    /// This network, short name or full path, as written (or as the node reports it).
    Named(String),
    /// Only a subnetwork is named (Dataproc `subnetworkUri`): the network is the subnetwork's,
    /// which the operator cannot see without a Compute Engine read.
    OfSubnetwork,
}

/// One prospective cloud create (or adoption).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// For messages: `TpuSlice`, `Vertex custom job`, `Dataproc batch`.
    pub what: String,
    pub project: String,
    pub region: String,
    pub zone: Option<String>,
    pub tpu: Option<TpuUse>,
    /// Estimated US dollars per hour while it runs (0 when unknown in advance, e.g. Dataproc).
    pub per_hour_usd: f64,
    /// The Google service account the workload runs as; `None`: the service's default identity.
    pub service_account: Option<String>,
    pub network: NetworkUse,
    /// Subnetwork, short name or full path, when one is named.
    pub subnetwork: Option<String>,
    /// `Some(node)`: not a create but the adoption of this existing TPU node
    /// (`spec.adoptNodeId`); the other fields describe the node as the cloud reports it.
    pub adopt: Option<String>,
    /// The first look at an adoption, before the node is read: the service account and networks
    /// are the node's, not yet known, and are not checked (the spec's are never applied to it).
    pub identity_pending: bool,
    /// The object says `deletionPolicy: Orphan`: what it creates outlives it (and keeps billing).
    pub orphan: bool,
    /// Where the spec names the network and subnetwork (empty: not the spec's, e.g. a node's).
    pub fields: Fields,
    /// The TPU reservation the capacity comes from, when one is named.
    pub reservation: Option<Named>,
    /// The boot image of a Compute Engine slice.
    pub image: Option<Named>,
    /// Every Cloud Storage location the spec names (`gs://` URIs, bucket names).
    pub storage: Vec<Named>,
    /// Other resources the spec names by a path in some project (`projects/<p>/...`, e.g. the
    /// Vertex TensorBoard the job streams to): each must be in an allowed project too.
    pub in_projects: Vec<Named>,
}

/// The spec fields a request's network references come from, for messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    pub network: String,
    pub subnetwork: String,
}

/// A reference to another cloud resource as the spec writes it, and where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    /// The spec field, e.g. `spec.capacity.reserved.reservationName`.
    pub field: String,
    pub value: String,
}

impl Named {
    pub fn new(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: value.into(),
        }
    }
}

/// Every string in `value` that names Cloud Storage (`gs://...`), with its path below `at`
/// (`spec.artifacts.modelDir`, `spec.inputs[0]`, ...): walked from the serialized spec so that
/// no field, present or added later, is missed.
pub fn storage_in(value: &serde_json::Value, at: &str, out: &mut Vec<Named>) {
    match value {
        serde_json::Value::String(s) if s.starts_with("gs://") => out.push(Named::new(at, s.clone())),
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                storage_in(v, &format!("{at}[{i}]"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                storage_in(v, &format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// The Cloud Storage locations of a serializable spec part at `at`.
pub fn storage_of(spec: &impl serde::Serialize, at: &str) -> Vec<Named> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(spec) {
        storage_in(&v, at, &mut out);
    }
    out
}

/// Whether `policy` leaves the cloud resources behind when the object is deleted.
pub fn orphans(policy: DeletionPolicy) -> bool {
    policy == DeletionPolicy::Orphan
}

/// `us-east5-b` → `us-east5`.
pub fn region_of_zone(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}
