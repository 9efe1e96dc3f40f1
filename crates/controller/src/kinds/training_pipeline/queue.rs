//! A TrainingPipeline queued through Kueue (`kueue.x-k8s.io/queue-name` on the pipeline, or the
//! operator's default queue, with the integration on). Preprocessing holds no TPU and is never
//! gated. Training is gated where its TPUs are:
//!
//! - **Vertex**: the pipeline's own Workload stands for the custom job. It is written when
//!   training is about to start and deleted once the run is over (finished, suspended), so the
//!   team's quota is held exactly while TPUs may be (`plan::kueue_gate`).
//! - **TPU VM**: the slice the pipeline creates is gated as every TpuSlice is, by a Workload of its
//!   own; it carries the pipeline's Kueue labels ([`child_labels`]). No exception is made for a
//!   slice a pipeline owns: an owner reference is not proof (any tenant can write one), and every
//!   slice paying its own way leaves nothing to forge. An eviction deletes the slice's node and
//!   the slice recreates itself when re-admitted, in the same `CHECKPOINT_DIR`, as after a Spot
//!   preemption: the pipeline spends no retry.

use std::collections::BTreeMap;

use kube::ResourceExt;
use tpu_operator_api::training_pipeline::{SchedulingStrategy, TrainingPipeline, TrainingPipelineSpec};

pub use crate::kueue::queued::Queued;
use crate::{
    kueue::{
        PRIORITY_CLASS_LABEL, QUEUE_LABEL,
        demand::{self, Demand},
        queued::{self, Gated},
    },
    reconcile::handles::Io,
    runtime::error::Result,
};

use super::status::training_shape;

impl Gated for TrainingPipeline {
    const WORKLOAD_PREFIX: &'static str = "trainingpipeline";
}

/// Reads the pipeline's Workload ([`queued::observe`]); `None` when Kueue does not gate it, or
/// gates its TPU VM slice instead.
pub async fn observe(tp: &TrainingPipeline, io: &Io<'_>) -> Result<Option<Queued>> {
    if tp.spec.training.vertex.is_none() {
        return Ok(None);
    }
    queued::observe(tp, io, demand(&tp.spec)).await
}

/// What the Vertex job holds while it runs, as Kueue counts it: the worker pool's hosts and chips
/// (Spot when its scheduling strategy is). `None`: no Vertex training, or a shape Vertex would
/// refuse (the plan fails it).
pub fn demand(spec: &TrainingPipelineSpec) -> Option<Demand> {
    let v = spec.training.vertex.as_ref()?;
    let shape = training_shape(spec)?;
    let topology = v
        .tpu_topology
        .clone()
        .or_else(|| demand::fixed_topology(shape.generation, shape.chips));
    let spot = v
        .scheduling
        .as_ref()
        .is_some_and(|s| s.strategy == SchedulingStrategy::Spot);
    Some(Demand::new(&shape, topology, spot))
}

/// The pipeline's Kueue labels, for its TPU VM slice: the slice queues where the pipeline asks,
/// at its priority.
pub fn child_labels(tp: &TrainingPipeline) -> BTreeMap<String, String> {
    [QUEUE_LABEL, PRIORITY_CLASS_LABEL]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), tp.labels().get(key)?.clone())))
        .collect()
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
    fn a_tpu_vm_stage_is_not_the_pipelines_to_count_its_slice_carries_the_labels() {
        let mut tp = TrainingPipeline::new(
            "p",
            spec(
                r#"
region: us-east5
artifacts: {modelDir: "gs://b/m/"}
training:
  tpuVm:
    slice: {zone: us-east5-b, acceleratorType: v6e-8, runtimeVersion: v2-alpha-tpuv6e}
    container: {image: "us-docker.pkg.dev/p/r/t:1"}
"#,
            ),
        );
        assert_eq!(demand(&tp.spec), None);
        tp.metadata.labels = Some(
            [
                (QUEUE_LABEL.to_string(), "tpu".to_string()),
                (PRIORITY_CLASS_LABEL.to_string(), "low".to_string()),
                ("team".to_string(), "a".to_string()),
            ]
            .into(),
        );
        let labels = child_labels(&tp);
        assert_eq!(labels.len(), 2, "{labels:?}");
        assert_eq!(labels[QUEUE_LABEL], "tpu");
    }
}
