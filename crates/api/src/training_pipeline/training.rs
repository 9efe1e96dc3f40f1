//! The training stage: exactly one of a Vertex AI custom job and a TPU VM slice.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{StageKind, VertexTraining};
use crate::{common::ContainerSpec, schema::DURATION, tpu_slice::TpuSliceSpec};

/// Training stage: exactly one of `vertex` and `tpuVm`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Training {
    /// Train as a Vertex AI custom job (one TPU worker pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vertex: Option<VertexTraining>,
    /// Train on a TPU VM slice the pipeline owns (`<name>-train` TpuSlice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu_vm: Option<TpuVmTraining>,
    /// Report a run whose newest checkpoint under `checkpointDir` (or, before the first one, the
    /// start of the run) is older than this, e.g. `45m`: condition `ProgressStalled`, a Warning
    /// Event and the `tpu_operator_training_stalled` metric. Nothing is cancelled. Unset: not
    /// watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub progress_deadline: Option<String>,
}

/// Where a pipeline trains: which of `spec.training.vertex` and `spec.training.tpuVm` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainingMode {
    Vertex,
    TpuVm,
}

impl TrainingMode {
    /// The kind of resource the training stage runs as.
    pub fn stage_kind(self) -> StageKind {
        match self {
            TrainingMode::Vertex => StageKind::VertexCustomJob,
            TrainingMode::TpuVm => StageKind::TpuSlice,
        }
    }
}

impl Training {
    /// The training mode; `Err` names the fields when neither or both are set (admission refuses
    /// that, but an object stored before the rule existed can still carry it).
    pub fn mode(&self) -> Result<TrainingMode, &'static str> {
        match (&self.vertex, &self.tpu_vm) {
            (Some(_), None) => Ok(TrainingMode::Vertex),
            (None, Some(_)) => Ok(TrainingMode::TpuVm),
            _ => Err("spec.training: set exactly one of vertex and tpuVm"),
        }
    }
}

/// Training on a TPU VM slice owned by the pipeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TpuVmTraining {
    /// The slice to create (`<name>-train`), as a TpuSlice spec. Leave its `startupScript` and
    /// `workload` empty: the pipeline runs `container` on it.
    pub slice: TpuSliceSpec,
    /// The training container, run on every host of the slice.
    pub container: ContainerSpec,
    /// Keep the slice of a failed run this long (e.g. `2h`) instead of deleting it at once, so
    /// its VMs and `docker logs` can be looked at. The kept slice bills and counts against the
    /// namespace's quota and budget; it is deleted when the time is up, on a re-run, or when the
    /// pipeline is deleted (`status.keptSlice` says which slice and until when). Unset: a
    /// failed run's slice is deleted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub keep_failed_slice_for: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_training_mode_is_the_one_target_set_and_names_the_fields_otherwise() {
        let vertex: VertexTraining =
            serde_json::from_value(serde_json::json!({"machineType": "ct5lp-hightpu-4t"})).unwrap();
        let tpu_vm = TpuVmTraining::default();
        let training = |vertex: Option<VertexTraining>, tpu_vm: Option<TpuVmTraining>| Training {
            vertex,
            tpu_vm,
            ..Training::default()
        };
        let mode = training(Some(vertex.clone()), None).mode();
        assert_eq!(mode, Ok(TrainingMode::Vertex));
        assert_eq!(mode.unwrap().stage_kind(), StageKind::VertexCustomJob);
        let mode = training(None, Some(tpu_vm.clone())).mode();
        assert_eq!(mode, Ok(TrainingMode::TpuVm));
        assert_eq!(mode.unwrap().stage_kind(), StageKind::TpuSlice);
        for neither_or_both in [training(None, None), training(Some(vertex), Some(tpu_vm))] {
            let err = neither_or_both.mode().unwrap_err();
            assert!(err.contains("spec.training") && err.contains("vertex") && err.contains("tpuVm"));
        }
    }
}
