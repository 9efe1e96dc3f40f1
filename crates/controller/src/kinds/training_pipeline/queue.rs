//! A TrainingPipeline queued through Kueue (`kueue.x-k8s.io/queue-name` on the pipeline, with
//! the operator's Kueue integration on): its training stage, Vertex job or TPU VM slice, is what
//! its Workload stands for. Preprocessing holds no TPU and is not gated; the Workload is written
//! when training is about to start and deleted once the run is over (finished, suspended), so the
//! team's quota is held exactly while TPUs may be. The TPU VM slice the pipeline creates carries
//! no queue label of its own: the pipeline's Workload already counts it.

use tpu_operator_api::training_pipeline::{SchedulingStrategy, TrainingPipeline, TrainingPipelineSpec};

pub use crate::kueue::queued::Queued;
use crate::{
    kinds::tpu_slice,
    kueue::{
        demand::{self, Demand},
        queued::{self, Gated},
    },
    reconcile::context::Context,
    runtime::error::Result,
};

use super::status::training_shape;

impl Gated for TrainingPipeline {
    const WORKLOAD_PREFIX: &'static str = "trainingpipeline";
}

/// Reads the pipeline's Workload ([`queued::observe`]); `None` when Kueue does not gate it.
pub async fn observe(tp: &TrainingPipeline, ctx: &Context) -> Result<Option<Queued>> {
    queued::observe(tp, ctx, demand(&tp.spec)).await
}

/// What the training stage holds while it runs, as Kueue counts it: the Vertex worker pool's
/// hosts and chips (Spot when its scheduling strategy is), or the TPU VM slice's, as that slice
/// would count standing alone. `None`: the spec has no valid shape (the plan fails it).
pub fn demand(spec: &TrainingPipelineSpec) -> Option<Demand> {
    let shape = training_shape(spec)?;
    if let Some(v) = &spec.training.vertex {
        let topology = v
            .tpu_topology
            .clone()
            .or_else(|| demand::fixed_topology(shape.generation, shape.chips));
        let spot = v
            .scheduling
            .as_ref()
            .is_some_and(|s| s.strategy == SchedulingStrategy::Spot);
        return Some(Demand::new(&shape, topology, spot));
    }
    let slice = &spec.training.tpu_vm.as_ref()?.slice;
    Some(tpu_slice::queue::demand(slice, &shape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::accelerator::TpuGeneration;

    fn spec(yaml: &str) -> TrainingPipelineSpec {
        serde_yaml::from_str(yaml).expect("a pipeline spec")
    }

    #[test]
    fn a_vertex_stage_counts_its_worker_pools_hosts_and_chips() {
        let s = spec(
            r#"
region: us-east5
artifacts: {modelDir: "gs://b/m/"}
training:
  vertex:
    machineType: ct6e-standard-4t
    tpuTopology: 4x4
    container: {image: "us-docker.pkg.dev/p/r/t:1"}
    scheduling: {strategy: Spot}
"#,
        );
        let d = demand(&s).unwrap();
        assert_eq!(
            (d.generation, d.hosts, d.chips, d.topology.as_deref(), d.spot),
            (TpuGeneration::V6e, 4, 16, Some("4x4"), true)
        );
    }

    #[test]
    fn a_tpu_vm_stage_counts_as_its_slice_would() {
        let s = spec(
            r#"
region: us-east5
artifacts: {modelDir: "gs://b/m/"}
training:
  tpuVm:
    slice: {zone: us-east5-b, acceleratorType: v6e-8, runtimeVersion: v2-alpha-tpuv6e}
    container: {image: "us-docker.pkg.dev/p/r/t:1"}
"#,
        );
        let d = demand(&s).unwrap();
        assert_eq!(
            (d.hosts, d.chips, d.topology.as_deref(), d.spot),
            (1, 8, Some("2x4"), false)
        );
    }
}
