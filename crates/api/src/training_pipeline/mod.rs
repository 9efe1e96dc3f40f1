//! `TrainingPipeline`: optional Dataproc preprocessing, then training on a TPU slice (TPU VM mode)
//! or as a Vertex AI custom job, with artifacts passed between stages through Cloud Storage.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::DeletionPolicy,
    preprocess_batch::BatchTemplate,
    schema::{GCS_URI, PROJECT_ID, REGION},
};

/// Label on every Vertex job: which training attempt of the pipeline it is (1-based). With the
/// UID label it identifies the job of an attempt, so a create retried after a crash adopts it.
pub const ATTEMPT_LABEL: &str = "tpu-operator-attempt";
/// Label on owned children naming the pipeline (for `kubectl get -l`).
pub const PIPELINE_LABEL: &str = "tpu-operator.dev/pipeline";
/// The environment variable (and `$(…)` variable) naming the attempt's checkpoint directory in
/// the training workload (`artifacts.checkpointDir`).
pub const CHECKPOINT_DIR_ENV: &str = "CHECKPOINT_DIR";
/// Annotation asking for one new run of a finished pipeline: a value other than
/// `status.rerun.value` starts one new run once the pipeline is Succeeded or Failed (and not
/// suspended), e.g. `kubectl annotate tpl NAME tpu-operator.dev/rerun=$(date +%s) --overwrite`.
/// The value present when the pipeline is created is the first run's.
pub const RERUN_ANNOTATION: &str = "tpu-operator.dev/rerun";

/// Preprocess on Dataproc Serverless (optional), then train on Cloud TPU; the model lands in
/// `artifacts.modelDir`. Finished when training SUCCEEDED, or FAILED after `maxRetries`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tpu-operator.dev",
    version = "v1beta1",
    kind = "TrainingPipeline",
    namespaced,
    status = "TrainingPipelineStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "tpl",
    shortname = "pipeline",
    category = "tpu-operator",
    doc = "A Cloud TPU training pipeline: Dataproc Serverless preprocessing, then training on a TPU VM slice or as a Vertex AI custom job.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Stage", type_ = "string", json_path = ".status.currentStage"),
    printcolumn(name = "Accelerator", type_ = "string", json_path = ".status.acceleratorType"),
    printcolumn(name = "Chips", type_ = "integer", json_path = ".status.chips", priority = 1),
    printcolumn(
        name = "Last Ckpt",
        type_ = "date",
        json_path = ".status.checkpoint.latestTime"
    ),
    printcolumn(
        name = "Ckpt Step",
        type_ = "integer",
        json_path = ".status.checkpoint.latestStep",
        priority = 1
    ),
    printcolumn(
        name = "Goodput%",
        type_ = "integer",
        json_path = ".status.timeSpent.goodputPercent",
        priority = 1
    ),
    printcolumn(
        name = "Logs",
        type_ = "string",
        json_path = ".status.links.logs",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TrainingPipelineSpec {
    /// GCP project id for every stage. Defaults to the operator's configured project (or the
    /// namespace's policy). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = PROJECT_ID))]
    pub project: Option<String>,

    /// Region of the Dataproc batch and the Vertex job, e.g. `us-central1`. A TPU VM slice names
    /// its own zone. Immutable.
    #[schemars(length(max = 63), regex(pattern = REGION))]
    pub region: String,

    /// Cloud Storage locations passed between stages. Immutable.
    pub artifacts: Artifacts,

    /// Preprocessing stage: a Dataproc Serverless batch (a `PreprocessBatch` spec without
    /// project / region, which come from the pipeline). Creates `<name>-preprocess`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<BatchTemplate>,

    /// Training stage: exactly one of `vertex` and `tpuVm`. Immutable.
    pub training: Training,

    /// Seconds after the pipeline finished (succeeded or failed) to delete its cloud resources
    /// (slice, batch, job records). The pipeline object itself stays for its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31536000))]
    pub ttl_seconds_after_finished: Option<i64>,

    /// Retries of the training stage after a failure (preemptions and waiting for capacity do
    /// not count). Default 0. Raising it on a pipeline Failed for `RetriesExhausted` resumes
    /// training with a new attempt.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub max_retries: i32,

    /// How a failed training attempt is treated by its exit code: fail the run at once, retry
    /// without spending `maxRetries`, or count (the default). See `RetryPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,

    /// Delete (default) or Orphan the cloud resources when the pipeline is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Pause, as `batch/v1` Job's `suspend`: while true nothing new is created and what bills is
    /// stopped (the running Vertex job is cancelled, the training slice deleted, a running
    /// preprocessing batch cancelled); checkpoints are kept. Set back to false, training resumes
    /// from `CHECKPOINT_DIR` with an attempt that does not count against `maxRetries`.
    #[serde(default)]
    pub suspend: bool,
}

/// Cloud Storage locations. `$(RAW_DATA)`, `$(PROCESSED_DATA)`, `$(MODEL_DIR)` and
/// `$(CHECKPOINT_DIR)` in args, commands and env values are replaced with these. The URIs
/// themselves may hold `$(PIPELINE_NAME)`, `$(PIPELINE_NAMESPACE)` and `$(PIPELINE_UID)` (in the
/// path, not the bucket), replaced with the pipeline's own, so variants made with
/// `metadata.generateName` get a directory each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifacts {
    /// Raw input data, read by preprocessing, e.g. `gs://demo-bucket/raw/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = GCS_URI))]
    pub raw_data: Option<String>,
    /// Preprocessing output / training input, e.g. `gs://demo-bucket/processed/`. Required with
    /// a `preprocess` stage (it is the batch's declared output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = GCS_URI))]
    pub processed_data: Option<String>,
    /// Training output directory (Vertex `baseOutputDirectory`; the model is written to
    /// `<modelDir>/model/`), e.g. `gs://demo-bucket/models/run-1/`.
    #[schemars(length(max = 1024), regex(pattern = GCS_URI))]
    pub model_dir: String,
    /// Where training writes and finds its checkpoints, e.g. `gs://demo-bucket/ckpt/run-1/`.
    /// Default `<modelDir>/checkpoints/` (Vertex's own `AIP_CHECKPOINT_DIR`). The training
    /// container gets it as the environment variable `CHECKPOINT_DIR` and as `$(CHECKPOINT_DIR)`;
    /// it is the same for every incarnation of an attempt (a preempted slice or job recreated)
    /// and, with `checkpointsOnRetry: Resume`, for every retry. The newest checkpoint under it is
    /// shown in `status.checkpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), regex(pattern = GCS_URI))]
    pub checkpoint_dir: Option<String>,
    /// What a retry (a counted attempt after a failure) sees as `CHECKPOINT_DIR`: `Resume`
    /// (default) the same directory, so it continues from the newest checkpoint; `StartClean` a
    /// directory of its own, `<checkpointDir>/attempt-<n>/` (n = the counted attempt, from 1),
    /// so it starts from scratch and earlier attempts' checkpoints stay as they were.
    #[serde(default)]
    pub checkpoints_on_retry: CheckpointsOnRetry,
}

/// What a retried training attempt does with the checkpoints of the failed one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CheckpointsOnRetry {
    /// The retry gets the same `CHECKPOINT_DIR` and resumes from the newest checkpoint.
    #[default]
    Resume,
    /// Every counted attempt gets `<checkpointDir>/attempt-<n>/` and starts from scratch.
    StartClean,
}

pub mod placeholders;
mod retry;
mod stages;
mod status;
mod time_spent;
mod training;
mod vertex;

pub use retry::{ExitCodeOperator, ExitCodes, RetryAction, RetryPolicy, RetryRule};
pub use status::{
    BudgetSuspensionStatus, CheckpointStatus, Interruptions, KeptSlice, PipelineOutputs, RerunStatus,
    StageKind, StageName, StageState, StageStatus, SuspensionStatus, TrainingPipelinePhase,
    TrainingPipelineStatus,
};
pub use time_spent::{AttemptShares, Part as TimePart, Step as TimeStep, TimeShare, TimeSpent};
pub use training::{TpuVmTraining, Training, TrainingMode};
pub use vertex::{
    BootDisk, BootDiskType, PythonPackageSpec, SchedulingStrategy, VertexScheduling, VertexTraining,
};
