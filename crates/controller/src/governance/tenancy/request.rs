//! What an object asks of the cloud, as the policy sees it: project, location, TPU shape and
//! capacity kind, the Google identity and network it runs with, and the estimated burn rate.
//! Pure: built from specs and the price table.

use tpu_operator_api::{
    DeletionPolicy,
    accelerator::SliceShape,
    preprocess_batch::BatchTemplate,
    tpu_slice::TpuSliceSpec,
    training_pipeline::{SchedulingStrategy, TrainingPipelineSpec, VertexTraining},
};

use crate::governance::pricing::{CapacityKind, PriceTable};

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
    fn new(field: impl Into<String>, value: impl Into<String>) -> Self {
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
fn storage_of(spec: &impl serde::Serialize, at: &str) -> Vec<Named> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(spec) {
        storage_in(&v, at, &mut out);
    }
    out
}

/// The reservation a slice's capacity names (`capacity.reserved` or `capacity.queued`).
fn slice_reservation(spec: &TpuSliceSpec, at: &str) -> Option<Named> {
    let c = spec.capacity.as_ref()?;
    if let Some(r) = &c.reserved {
        return Some(Named::new(
            format!("{at}.capacity.reserved.reservationName"),
            r.reservation_name.clone(),
        ));
    }
    let r = c.queued.as_ref()?.reservation_name.as_ref()?;
    Some(Named::new(
        format!("{at}.capacity.queued.reservationName"),
        r.clone(),
    ))
}

/// Whether `policy` leaves the cloud resources behind when the object is deleted.
pub fn orphans(policy: DeletionPolicy) -> bool {
    policy == DeletionPolicy::Orphan
}

/// `us-east5-b` → `us-east5`.
pub fn region_of_zone(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// Estimated US dollars per hour of a running slice, with its price key.
pub fn slice_per_hour(spec: &TpuSliceSpec, prices: &PriceTable) -> Option<(f64, String)> {
    let shape = spec.total_shape()?;
    Some(prices.slice_per_hour(&shape, spec.price_kind()))
}

/// A TpuSlice create. `None` when the spec has no valid shape.
pub fn tpu_slice(spec: &TpuSliceSpec, project: &str, prices: &PriceTable) -> Option<Request> {
    slice_at(spec, project, prices, "spec")
}

/// A slice whose spec is at `at` (`spec`, or a pipeline's `spec.training.tpuVm.slice`).
fn slice_at(spec: &TpuSliceSpec, project: &str, prices: &PriceTable, at: &str) -> Option<Request> {
    let shape = spec.total_shape()?;
    let (per_hour_usd, _) = prices.slice_per_hour(&shape, spec.price_kind());
    Some(Request {
        what: match (spec.slice_count(), spec.accelerator_type.as_deref()) {
            (Some(n), Some(t)) => format!("TpuSlice ({n} x {t} multislice in {})", spec.zone),
            _ => format!("TpuSlice ({} in {})", shape.accelerator_type(), spec.zone),
        },
        project: project.to_owned(),
        region: region_of_zone(&spec.zone).to_owned(),
        zone: Some(spec.zone.clone()),
        tpu: Some(TpuUse {
            shape,
            capacity: spec.capacity_mode().kind(),
        }),
        per_hour_usd,
        service_account: spec.service_account.as_ref().map(|sa| sa.email.clone()),
        network: match spec.network_config.as_ref().and_then(|n| n.network.clone()) {
            Some(n) => NetworkUse::Named(n),
            None => NetworkUse::Default,
        },
        subnetwork: spec.network_config.as_ref().and_then(|n| n.subnetwork.clone()),
        orphan: orphans(spec.deletion_policy),
        fields: Fields {
            network: format!("{at}.networkConfig.network"),
            subnetwork: format!("{at}.networkConfig.subnetwork"),
        },
        reservation: slice_reservation(spec, at),
        image: spec
            .compute_engine_image()
            .map(|image| Named::new(format!("{at}.computeEngine.image"), image.to_owned())),
        storage: storage_of(spec, at),
        ..Request::default()
    })
}

/// The adoption of an existing node by a slice (`spec.adoptNodeId`): the slice's request from
/// its spec, marked as an adoption, for the first look before the node is read.
pub fn adopting_slice(
    spec: &TpuSliceSpec,
    project: &str,
    node: &str,
    prices: &PriceTable,
) -> Option<Request> {
    let mut req = tpu_slice(spec, project, prices)?;
    req.what = format!("TpuSlice adopting node {node}");
    req.adopt = Some(node.to_owned());
    req.identity_pending = true;
    Some(req)
}

/// A Dataproc batch create: project and region only.
pub fn dataproc_batch(project: &str, region: &str) -> Request {
    Request {
        what: "Dataproc batch".into(),
        project: project.to_owned(),
        region: region.to_owned(),
        network: NetworkUse::Default,
        ..Request::default()
    }
}

/// A Dataproc batch create with its execution settings: project, region, service account and
/// network (`networkUri` or `subnetworkUri`; the subnetwork wins if both slipped through, as in
/// the request the operator sends).
pub fn batch(project: &str, region: &str, template: &BatchTemplate) -> Request {
    batch_at(project, region, template, "spec")
}

/// A batch whose template is at `at` (`spec`, or a pipeline's `spec.preprocess`).
fn batch_at(project: &str, region: &str, template: &BatchTemplate, at: &str) -> Request {
    let mut req = dataproc_batch(project, region);
    req.storage = storage_of(template, at);
    req.fields = Fields {
        network: format!("{at}.execution.networkUri"),
        subnetwork: format!("{at}.execution.subnetworkUri"),
    };
    let Some(e) = &template.execution else {
        return req;
    };
    if let Some(b) = &e.staging_bucket {
        req.storage
            .push(Named::new(format!("{at}.execution.stagingBucket"), b.clone()));
    }
    req.service_account = e.service_account.clone();
    (req.network, req.subnetwork) = match (&e.subnetwork_uri, &e.network_uri) {
        (Some(subnet), _) => (NetworkUse::OfSubnetwork, Some(subnet.clone())),
        (None, Some(net)) => (NetworkUse::Named(net.clone()), None),
        (None, None) => (NetworkUse::Default, None),
    };
    req
}

/// The job's capacity kind: [`SchedulingStrategy::kind`], the definition admission uses too.
fn vertex_capacity(v: &VertexTraining) -> CapacityKind {
    v.scheduling
        .as_ref()
        .map_or(SchedulingStrategy::default(), |s| s.strategy)
        .kind()
}

/// Estimated US dollars per hour of the pipeline's Vertex job, with its price key.
pub fn vertex_per_hour(v: &VertexTraining, prices: &PriceTable) -> (f64, String) {
    let shape = v.tpu_shape();
    let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
    prices.vertex_per_hour(
        v.machine_type,
        shape.as_ref(),
        replicas,
        vertex_capacity(v) == CapacityKind::Spot,
    )
}

/// The Vertex job of a pipeline in Vertex mode (chips = all replicas).
pub fn vertex_job(spec: &TrainingPipelineSpec, project: &str, prices: &PriceTable) -> Option<Request> {
    let v = spec.training.vertex.as_ref()?;
    let tpu = v.tpu_shape().map(|mut shape| {
        let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
        shape.chips *= replicas;
        TpuUse {
            shape,
            capacity: vertex_capacity(v),
        }
    });
    Some(Request {
        what: format!(
            "Vertex custom job ({} in {})",
            v.machine_type.as_str(),
            spec.region
        ),
        project: project.to_owned(),
        region: spec.region.clone(),
        zone: None,
        tpu,
        per_hour_usd: vertex_per_hour(v, prices).0,
        service_account: v.service_account.clone(),
        network: v.network.clone().map_or(NetworkUse::Unused, NetworkUse::Named),
        orphan: orphans(spec.deletion_policy),
        fields: Fields {
            network: "spec.training.vertex.network".into(),
            subnetwork: String::new(),
        },
        in_projects: v
            .tensorboard
            .iter()
            .map(|t| Named::new("spec.training.vertex.tensorboard", t.clone()))
            .collect(),
        ..Request::default()
    })
}

/// Everything a pipeline will create, for the check before it creates anything: its Dataproc
/// batch (when it preprocesses), then its Vertex job or training slice.
pub fn pipeline(spec: &TrainingPipelineSpec, project: &str, prices: &PriceTable) -> Vec<Request> {
    let mut out = Vec::new();
    if let Some(template) = &spec.preprocess {
        out.push(batch_at(project, &spec.region, template, "spec.preprocess"));
    }
    if let Some(job) = vertex_job(spec, project, prices) {
        out.push(job);
    }
    if let Some(slice) = spec.training.tpu_vm.as_ref().and_then(|t| {
        let project = slice_project(&t.slice, project);
        match &t.slice.adopt_node_id {
            Some(id) => {
                let node = format!("projects/{project}/locations/{}/nodes/{id}", t.slice.zone);
                adopting_slice(&t.slice, project, &node, prices)
            }
            None => slice_at(&t.slice, project, prices, "spec.training.tpuVm.slice"),
        }
    }) {
        out.push(slice);
    }
    // The pipeline's policy is its children's (an `Orphan` slice spec orphans the slice alone).
    for r in &mut out {
        r.orphan |= orphans(spec.deletion_policy);
    }
    pipeline_storage(spec, &mut out);
    out
}

/// Every Cloud Storage location of a pipeline (artifacts, packages, the batch's and the
/// slice's), checked once: on its first request.
fn pipeline_storage(spec: &TrainingPipelineSpec, out: &mut [Request]) {
    for r in out.iter_mut() {
        r.storage.clear();
    }
    let Some(first) = out.first_mut() else {
        return;
    };
    first.storage = storage_of(spec, "spec");
    if let Some(b) = spec
        .preprocess
        .as_ref()
        .and_then(|p| p.execution.as_ref()?.staging_bucket.clone())
    {
        first
            .storage
            .push(Named::new("spec.preprocess.execution.stagingBucket", b));
    }
}

fn slice_project<'a>(slice: &'a TpuSliceSpec, pipeline_project: &'a str) -> &'a str {
    slice.project.as_deref().unwrap_or(pipeline_project)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pipeline_spec(training: serde_json::Value) -> TrainingPipelineSpec {
        serde_json::from_value(json!({
            "region": "us-east5",
            "artifacts": {"modelDir": "gs://b/m/", "processedData": "gs://b/p/"},
            "preprocess": {"pyspark": {"mainPythonFileUri": "gs://b/s.py"},
                           "execution": {"serviceAccount": "etl@p.iam.gserviceaccount.com",
                                         "subnetworkUri": "team-sub"}},
            "training": training,
        }))
        .unwrap()
    }

    #[test]
    fn pipelines_carry_the_identity_and_network_of_everything_they_create() {
        let prices = PriceTable::default();
        let spec = pipeline_spec(json!({"tpuVm": {
            "slice": {"zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v",
                      "adoptNodeId": "theirs"},
            "container": {"image": "i"}}}));
        let reqs = pipeline(&spec, "p", &prices);
        assert_eq!(reqs.len(), 2, "{reqs:#?}");
        let batch = &reqs[0];
        assert_eq!(
            batch.service_account.as_deref(),
            Some("etl@p.iam.gserviceaccount.com")
        );
        assert_eq!(
            (&batch.network, batch.subnetwork.as_deref()),
            (&NetworkUse::OfSubnetwork, Some("team-sub"))
        );
        let slice = &reqs[1];
        assert_eq!(
            slice.adopt.as_deref(),
            Some("projects/p/locations/us-east5-b/nodes/theirs")
        );
        assert!(
            slice.identity_pending,
            "the node's identity is judged once it is read"
        );

        let spec = pipeline_spec(json!({"vertex": {
            "machineType": "ct6e-standard-4t", "tpuTopology": "2x2", "container": {"image": "i"},
            "serviceAccount": "t@p.iam.gserviceaccount.com"}}));
        let job = vertex_job(&spec, "p", &prices).unwrap();
        assert_eq!(
            job.service_account.as_deref(),
            Some("t@p.iam.gserviceaccount.com")
        );
        assert_eq!(job.network, NetworkUse::Unused, "no peering: no network of ours");
        assert_eq!(
            tpu_slice(
                &serde_json::from_value(
                    json!({"zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v"})
                )
                .unwrap(),
                "p",
                &prices
            )
            .unwrap()
            .network,
            NetworkUse::Default
        );
    }
}
