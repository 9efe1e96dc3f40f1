//! What a pipeline holds, as the namespace's usage counts it: its Vertex job's chips and spend
//! while the job may bill (a TPU VM slice is a TpuSlice of its own, counted as one; its
//! preprocessing a PreprocessBatch). Governance lists pipelines through [`HOLDINGS`] without
//! knowing what a pipeline is.

use kube::ResourceExt;
use tpu_operator_api::training_pipeline::{
    StageName, StageState, StageStatus, TrainingPipeline, TrainingPipelinePhase,
};

use super::policy;
use crate::governance::{
    pricing::PriceTable,
    tenancy::{Holding, HoldingsOf},
};

/// How usage lists a namespace's pipelines.
pub const HOLDINGS: HoldingsOf<TrainingPipeline> = HoldingsOf {
    action: "list TrainingPipelines for the namespace's usage",
    holding,
    conditions: |tp| tp.status.as_ref().map(|st| st.conditions.as_slice()),
};

/// A pipeline's Vertex job holds its replicas' chips while it may bill (see [`job_bills`]).
pub fn holding(tp: &TrainingPipeline, prices: &PriceTable) -> Option<Holding> {
    let (Some(v), Some(st)) = (&tp.spec.training.vertex, &tp.status) else {
        return None;
    };
    let train = st.stages.iter().find(|s| s.name == StageName::Train)?;
    let cancelling = job_bills(st.phase, train)?;
    let replicas = u32::try_from(v.replica_count.max(1)).unwrap_or(1);
    let chips = v.tpu_shape().map_or(0, |s| s.chips * replicas);
    let (per_hour, _) = policy::vertex_per_hour(v, prices);
    let what = if cancelling {
        format!("Vertex job of TrainingPipeline {}, cancelling", tp.name_any())
    } else {
        format!("Vertex job of TrainingPipeline {}", tp.name_any())
    };
    Some(Holding::new(tp.uid(), what, chips, per_hour))
}

/// Whether the training stage's Vertex job may bill now (`Some(cancelling)`), from status alone:
/// queued or running; or cancelled by suspend or a Kueue eviction (state `Cancelled` with a job
/// name) and not yet seen ended (no `endTime`: the planner sets it once the job has ended); or the
/// pipeline being deleted with a job its finalizer waits for (deletion cancels every job and
/// waits until each has ended). A job cancelling bills until Vertex says it has ended.
fn job_bills(phase: TrainingPipelinePhase, train: &StageStatus) -> Option<bool> {
    let has_job = train.gcp_name.is_some();
    match (phase, train.state) {
        (TrainingPipelinePhase::Succeeded | TrainingPipelinePhase::Failed, _) => None,
        (TrainingPipelinePhase::Deleting, StageState::Cancelled) if has_job => Some(true),
        (_, StageState::Running | StageState::Queued) => Some(false),
        (_, StageState::Cancelled) if has_job && train.end_time.is_none() => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::tenancy::usage::{Usage, sum};
    use serde_json::json;

    /// What the listed pipelines hold, but `exclude`'s (the UID of the object being admitted).
    fn tally(pipelines: &[TrainingPipeline], exclude: &str, prices: &PriceTable) -> Usage {
        let holdings: Vec<Holding> = pipelines.iter().filter_map(|tp| holding(tp, prices)).collect();
        sum(&holdings, exclude)
    }

    #[test]
    fn running_vertex_pipelines_count_their_chips() {
        let tp: TrainingPipeline = serde_json::from_value(json!({
            "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
            "metadata": {"name": "p", "uid": "u-p"},
            "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://b/m/"},
                     "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x4",
                                             "container": {"image": "i"}}}},
            "status": {"phase": "Training", "stages": [{"name": "Train", "kind": "VertexCustomJob", "state": "Running"}]}
        }))
        .unwrap();
        let u = tally(std::slice::from_ref(&tp), "", &PriceTable::default());
        assert_eq!(u.chips, 8, "{u:?}");
        assert!((u.per_hour_usd - 21.6).abs() < 1e-9, "{u:?}");
        assert_eq!(tally(&[tp], "u-p", &PriceTable::default()).chips, 0);
    }

    /// A job suspend or an eviction cancelled counts until its end is recorded, and
    /// every job a deleting pipeline waits for counts.
    #[test]
    fn a_cancelling_vertex_job_counts_until_it_has_ended() {
        let pipeline = |phase: &str, state: &str, end: Option<&str>| -> TrainingPipeline {
            let mut stage = json!({"name": "Train", "kind": "VertexCustomJob", "state": state,
                                   "gcpName": "projects/p/locations/us-east5/customJobs/1"});
            if let Some(end) = end {
                stage["endTime"] = json!(end);
            }
            serde_json::from_value(json!({
                "apiVersion": "tpu-operator.dev/v1beta1", "kind": "TrainingPipeline",
                "metadata": {"name": "p", "uid": "u-p"},
                "spec": {"region": "us-east5", "artifacts": {"modelDir": "gs://b/m/"},
                         "training": {"vertex": {"machineType": "ct6e-standard-4t", "tpuTopology": "2x4",
                                                 "container": {"image": "i"}}}},
                "status": {"phase": phase, "stages": [stage]}
            }))
            .unwrap()
        };
        let chips = |tp: TrainingPipeline| tally(&[tp], "", &PriceTable::default());
        let cancelling = chips(pipeline("Suspended", "Cancelled", None));
        assert_eq!(cancelling.chips, 8, "{cancelling:?}");
        assert!(cancelling.describe().contains("cancelling"), "{cancelling:?}");
        assert_eq!(chips(pipeline("Waiting", "Cancelled", None)).chips, 8, "evicted");
        let ended = Some("2026-03-02T09:00:00Z");
        assert_eq!(chips(pipeline("Suspended", "Cancelled", ended)).chips, 0);
        assert_eq!(chips(pipeline("Deleting", "Cancelled", ended)).chips, 8);
        assert_eq!(chips(pipeline("Deleting", "Running", ended)).chips, 8);
        assert_eq!(chips(pipeline("Failed", "Failed", ended)).chips, 0);
    }
}
