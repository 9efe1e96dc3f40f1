//! What an object asks of the cloud, as the policy sees it: project, location, TPU shape and
//! capacity kind, and the estimated burn rate. Pure: built from specs and the price table.

use tpu_operator_api::{
    accelerator::{SliceShape, VertexAcceleratorType, parse_accelerator_type, shape_from_config},
    tpu_slice::{Capacity, QueuedTier, TpuSliceSpec},
    training_pipeline::{SchedulingStrategy, TrainingPipelineSpec, VertexTraining},
};

use crate::pricing::{CapacityKind, PriceTable};

/// TPU chips an object asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct TpuUse {
    pub shape: SliceShape,
    pub capacity: CapacityKind,
}

/// One prospective cloud create.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// For messages: `TpuSlice`, `Vertex custom job`, `Dataproc batch`.
    pub what: String,
    pub project: String,
    pub region: String,
    pub zone: Option<String>,
    pub tpu: Option<TpuUse>,
    /// Estimated US dollars per hour while it runs (0 when unknown in advance, e.g. Dataproc).
    pub per_hour_usd: f64,
}

/// `us-east5-b` → `us-east5`.
pub fn region_of_zone(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// The slice's shape; `None` when the spec is invalid (the controller reports that itself).
pub fn slice_shape(spec: &TpuSliceSpec) -> Option<SliceShape> {
    match (&spec.accelerator_type, &spec.accelerator_config) {
        (Some(t), None) => parse_accelerator_type(t).ok(),
        (None, Some(c)) => shape_from_config(c.type_, &c.topology).ok(),
        _ => None,
    }
}

/// The capacity kind of a slice, as the policy names it.
pub fn slice_capacity(spec: &TpuSliceSpec) -> CapacityKind {
    match &spec.capacity {
        Some(Capacity { queued: Some(_), .. }) => CapacityKind::Queued,
        Some(Capacity { spot: Some(_), .. }) => CapacityKind::Spot,
        Some(Capacity {
            reserved: Some(_), ..
        }) => CapacityKind::Reserved,
        _ => CapacityKind::OnDemand,
    }
}

/// The capacity kind a slice is priced at (queued spot tier is spot).
pub fn slice_price_kind(spec: &TpuSliceSpec) -> CapacityKind {
    match &spec.capacity {
        Some(Capacity { queued: Some(q), .. }) if q.tier == QueuedTier::Spot => CapacityKind::Spot,
        _ => slice_capacity(spec),
    }
}

/// Estimated US dollars per hour of a running slice, with its price key.
pub fn slice_per_hour(spec: &TpuSliceSpec, prices: &PriceTable) -> Option<(f64, String)> {
    let shape = slice_shape(spec)?;
    Some(prices.slice_per_hour(&shape, slice_price_kind(spec)))
}

/// A TpuSlice create. `None` when the spec has no valid shape.
pub fn tpu_slice(spec: &TpuSliceSpec, project: &str, prices: &PriceTable) -> Option<Request> {
    let shape = slice_shape(spec)?;
    let (per_hour_usd, _) = prices.slice_per_hour(&shape, slice_price_kind(spec));
    Some(Request {
        what: format!("TpuSlice ({} in {})", shape.accelerator_type(), spec.zone),
        project: project.to_owned(),
        region: region_of_zone(&spec.zone).to_owned(),
        zone: Some(spec.zone.clone()),
        tpu: Some(TpuUse {
            shape,
            capacity: slice_capacity(spec),
        }),
        per_hour_usd,
    })
}

/// A Dataproc batch create: project and region only.
pub fn dataproc_batch(project: &str, region: &str) -> Request {
    Request {
        what: "Dataproc batch".into(),
        project: project.to_owned(),
        region: region.to_owned(),
        zone: None,
        tpu: None,
        per_hour_usd: 0.0,
    }
}

/// The TPU shape of a Vertex job (per replica).
pub fn vertex_shape(v: &VertexTraining) -> Option<SliceShape> {
    match v.machine_type.check_topology(v.tpu_topology.as_deref()).ok()? {
        Some(shape) => Some(shape),
        None => {
            let prefix = match v.accelerator_type? {
                VertexAcceleratorType::TPU_V2 => "v2",
                VertexAcceleratorType::TPU_V3 => "v3",
                _ => return None,
            };
            parse_accelerator_type(&format!("{prefix}-{}", v.accelerator_count.unwrap_or(8))).ok()
        }
    }
}

fn vertex_capacity(v: &VertexTraining) -> CapacityKind {
    match v.scheduling.as_ref().map(|s| s.strategy) {
        Some(SchedulingStrategy::Spot) => CapacityKind::Spot,
        Some(SchedulingStrategy::FlexStart) => CapacityKind::Queued,
        Some(SchedulingStrategy::Standard) | None => CapacityKind::OnDemand,
    }
}

/// Estimated US dollars per hour of the pipeline's Vertex job, with its price key.
pub fn vertex_per_hour(v: &VertexTraining, prices: &PriceTable) -> (f64, String) {
    let shape = vertex_shape(v);
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
    let tpu = vertex_shape(v).map(|mut shape| {
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
    })
}

/// Everything a pipeline will create, for the check before it creates anything: its Dataproc
/// batch (when it preprocesses), then its Vertex job or training slice.
pub fn pipeline(spec: &TrainingPipelineSpec, project: &str, prices: &PriceTable) -> Vec<Request> {
    let mut out = Vec::new();
    if spec.preprocess.is_some() {
        out.push(dataproc_batch(project, &spec.region));
    }
    if let Some(job) = vertex_job(spec, project, prices) {
        out.push(job);
    }
    if let Some(slice) = spec
        .training
        .tpu_vm
        .as_ref()
        .and_then(|t| tpu_slice(&t.slice, slice_project(&t.slice, project), prices))
    {
        out.push(slice);
    }
    out
}

fn slice_project<'a>(slice: &'a TpuSliceSpec, pipeline_project: &'a str) -> &'a str {
    slice.project.as_deref().unwrap_or(pipeline_project)
}
