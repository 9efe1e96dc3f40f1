//! `TrainingPipeline`: optional Dataproc preprocessing, then training on a TPU slice (TPU VM mode)
//! or as a Vertex AI custom job, with artifacts passed between stages through Cloud Storage.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{
    accelerator::{VertexAcceleratorType, VertexMachineType},
    common::{ContainerSpec, CostEstimate, DeletionPolicy, EnvVar},
    preprocess_batch::BatchTemplate,
    schema::{
        DURATION, GCS_URI, IMAGE, MAX_ARG_LENGTH, MAX_LIST_ITEMS, PROJECT_ID, REGION, SERVICE_ACCOUNT_EMAIL,
        TOPOLOGY,
    },
    tpu_slice::TpuSliceSpec,
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
    version = "v1alpha1",
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

    /// Delete (default) or Orphan the cloud resources when the pipeline is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Pause: no new stage starts and nothing new is created while true. A running stage keeps
    /// running (cancel it by deleting the pipeline).
    #[serde(default)]
    pub suspend: bool,
}

/// Cloud Storage locations. `$(RAW_DATA)`, `$(PROCESSED_DATA)`, `$(MODEL_DIR)` and
/// `$(CHECKPOINT_DIR)` in args, commands and env values are replaced with these.
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

/// A Vertex AI custom job with one TPU worker pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VertexTraining {
    /// TPU machine type: `ct6e-standard-1t|4t|8t` (v6e), `ct5lp-hightpu-1t|4t|8t` (v5e),
    /// `ct5p-hightpu-4t` (v5p), or `cloud-tpu` (v2 / v3 with `acceleratorType` and
    /// `acceleratorCount: 8`).
    pub machine_type: VertexMachineType,
    /// TPU topology, required for every machine type except `cloud-tpu`: `1x1` for `*-1t`,
    /// `2x4` for `*-8t`, `2x2` (one host) or `2x4`, `4x4`, ... (several hosts) for `*-4t`,
    /// 3-D (e.g. `2x2x1`) for `ct5p-hightpu-4t`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8), regex(pattern = TOPOLOGY))]
    pub tpu_topology: Option<String>,
    /// Vertex accelerator enum, only for `cloud-tpu` (TPU_V2 / TPU_V3) and optionally
    /// TPU_V5_LITEPOD with `ct5lp-*`. Vertex has no enum for v5p or v6e.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<VertexAcceleratorType>,
    /// TensorCores for `cloud-tpu` (must be 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2048))]
    pub accelerator_count: Option<i32>,
    /// Worker pool replicas. TPU pools take 1 (multi-host topologies are one replica). Default 1.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1))]
    pub replica_count: i64,
    /// The training container (`containerSpec`). Exactly one of `container` and
    /// `pythonPackageSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// A Python training application run on a prebuilt Vertex container (`pythonPackageSpec`).
    /// Exactly one of `container` and `pythonPackageSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_package_spec: Option<PythonPackageSpec>,
    /// Labels added to the custom job, e.g. `team: ml-platform` for cost attribution (Vertex
    /// label rules: lowercase keys and values, at most 63 characters, at most 16 here). Keys
    /// `managed-by` and `tpu-operator-*` are the operator's identity labels and are refused at
    /// admission, so a user label can never hide or fake the job's owner.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::gcp_labels")]
    pub labels: BTreeMap<String, String>,
    /// Interactive shell access to the workers while the job runs (`enableWebAccess`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_web_access: bool,
    /// Scheduling: timeout, Spot / Flex-start, restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<VertexScheduling>,
    /// Service account the job runs as (the caller needs `iam.serviceAccounts.actAs` on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 254), regex(pattern = SERVICE_ACCOUNT_EMAIL))]
    pub service_account: Option<String>,
    /// VPC network to peer, `projects/<project-number>/global/networks/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^projects/[^/]+/global/networks/[^/]+$"))]
    pub network: Option<String>,
    /// Vertex TensorBoard instance to stream logs to,
    /// `projects/<p>/locations/<l>/tensorboards/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 256),
        regex(pattern = r"^projects/[^/]+/locations/[^/]+/tensorboards/[^/]+$")
    )]
    pub tensorboard: Option<String>,
    /// Boot disk of each worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_disk: Option<BootDisk>,
}

fn one() -> i64 {
    1
}

/// Vertex `pythonPackageSpec`: a Python source distribution run on a prebuilt training image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PythonPackageSpec {
    /// A Vertex prebuilt training container, e.g.
    /// `us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-17.cp310:latest`.
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE))]
    pub executor_image_uri: String,
    /// The package(s) in Cloud Storage, e.g. `gs://bucket/trainer-0.1.tar.gz` (at most 100).
    #[schemars(length(min = 1, max = 100), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub package_uris: Vec<String>,
    /// The module to run, e.g. `trainer.task`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    )]
    pub python_module: String,
    /// Arguments (artifact placeholders such as `$(CHECKPOINT_DIR)` are replaced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub args: Vec<String>,
    /// Environment variables (values expanded like `args`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS))]
    pub env: Vec<EnvVar>,
}

/// Vertex `scheduling`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VertexScheduling {
    /// Maximum run time, e.g. `72h`. When unset (or without `scheduling`) the operator sends
    /// `24h`, not Vertex's own 7-day default, so a hung job stops billing within a day; set it
    /// for longer runs. Vertex ends a job that runs past it, and the pipeline reports Vertex's
    /// message as a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub timeout: Option<String>,
    /// Standard (default), Spot (preemptible) or FlexStart (queued until capacity frees up).
    #[serde(default)]
    pub strategy: SchedulingStrategy,
    /// Restart the whole job when a worker restarts (Vertex `restartJobOnWorkerRestart`); with
    /// checkpoints in `CHECKPOINT_DIR` the restarted job resumes from the newest one.
    #[serde(default)]
    pub restart_job_on_worker_restart: bool,
    /// FlexStart only: how long to wait for capacity (Vertex default 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub max_wait_duration: Option<String>,
}

/// Vertex scheduling strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SchedulingStrategy {
    /// On-demand capacity (`STANDARD`).
    #[default]
    Standard,
    /// Spot capacity (`SPOT`), may be preempted.
    Spot,
    /// Dynamic Workload Scheduler (`FLEX_START`): waits up to `maxWaitDuration` for capacity.
    FlexStart,
}

impl SchedulingStrategy {
    /// Every strategy with its name in `scheduling.strategy`.
    pub const ALL: [(&'static str, SchedulingStrategy); 3] = [
        ("Standard", Self::Standard),
        ("Spot", Self::Spot),
        ("FlexStart", Self::FlexStart),
    ];

    /// The capacity kind policies allow: flex-start is `queued`, as a TpuSlice's
    /// `capacity.flexStart` is. The controller's tenancy check and the admission policy
    /// (`crate::admission`) both take it from here.
    pub fn kind(self) -> crate::tpu_policy::CapacityKind {
        use crate::tpu_policy::CapacityKind;
        match self {
            Self::Standard => CapacityKind::OnDemand,
            Self::Spot => CapacityKind::Spot,
            Self::FlexStart => CapacityKind::Queued,
        }
    }
}

/// Worker boot disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootDisk {
    /// Disk type (Vertex default `pd-ssd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_type: Option<BootDiskType>,
    /// Size in GB (Vertex default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 65536))]
    pub size_gb: Option<i32>,
}

/// Boot disk types Vertex accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BootDiskType {
    /// SSD persistent disk.
    #[serde(rename = "pd-ssd")]
    PdSsd,
    /// Standard persistent disk.
    #[serde(rename = "pd-standard")]
    PdStandard,
    /// Hyperdisk Balanced.
    #[serde(rename = "hyperdisk-balanced")]
    HyperdiskBalanced,
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
}

/// Lifecycle phase of a pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TrainingPipelinePhase {
    /// Not reconciled yet.
    #[default]
    Pending,
    /// The preprocessing batch runs.
    Preprocessing,
    /// Training capacity is being obtained (slice queued / provisioning, job queued).
    Provisioning,
    /// Training runs.
    Training,
    /// Training succeeded and the model exists.
    Succeeded,
    /// A stage failed after its retries.
    Failed,
    /// `spec.suspend` is set.
    Suspended,
    /// Cloud resources are being deleted.
    Deleting,
}

/// Pipeline stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StageName {
    /// Dataproc preprocessing.
    Preprocess,
    /// TPU training.
    Train,
}

/// What a stage runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StageKind {
    /// An owned PreprocessBatch.
    PreprocessBatch,
    /// An owned TpuSlice (TPU VM mode).
    TpuSlice,
    /// A Vertex AI custom job (no Kubernetes child).
    VertexCustomJob,
}

/// State of a stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StageState {
    /// Not started.
    #[default]
    Pending,
    /// Waiting for capacity.
    Queued,
    /// Running.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Failed after retries.
    Failed,
    /// Cancelled (pipeline deleted or suspended before it ran).
    Cancelled,
    /// Not part of this pipeline (no `preprocess`).
    Skipped,
}

/// One stage of the pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    /// Stage name (list-map key).
    pub name: StageName,
    /// What the stage runs as.
    pub kind: StageKind,
    /// Name of the owned Kubernetes child (`<pipeline>-preprocess`, `<pipeline>-train`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// Full GCP name of the cloud object (batch, node or custom job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp_name: Option<String>,
    /// Stage state.
    #[serde(default)]
    pub state: StageState,
    /// When the stage started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the stage finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Attempts of this stage.
    #[serde(default)]
    pub attempts: i32,
    /// Last message of the stage (failure reason, queue position, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Results of a finished pipeline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineOutputs {
    /// Verified preprocessing output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed_data: Option<String>,
    /// Verified model location (`<modelDir>/model/` for Vertex, `<modelDir>` for TPU VM mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_uri: Option<String>,
}

/// Observed state of a pipeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingPipelineStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: TrainingPipelinePhase,
    /// Ready / Reconciling / Stalled plus Preprocessed, Trained, OutputVerified, Suspended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The stage currently running (or the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_stage: Option<StageName>,
    /// Per-stage progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "stages_schema")]
    pub stages: Vec<StageStatus>,
    /// Full name of the Vertex custom job of the current attempt
    /// (`projects/<number>/locations/<l>/customJobs/<id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_job_name: Option<String>,
    /// When a Vertex `customJobs.create` started whose job no list has shown yet (written before
    /// the call). Until a list of the attempt's jobs shows the recorded job, a job whose create
    /// reply was lost may exist that lists do not show yet, so deleting the pipeline keeps
    /// listing until 5 minutes after this time; otherwise deletion does not wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfirmed_create_time: Option<Time>,
    /// Long-running operation in flight (e.g. a Vertex job delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_operation: Option<String>,
    /// Accelerator of the training stage (e.g. `v6e-4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
    /// TPU chips of the training stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<i32>,
    /// Training attempts made so far.
    #[serde(default)]
    pub attempts: i32,
    /// When the first stage started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the pipeline finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// When cloud resources were reaped after `ttlSecondsAfterFinished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaped_time: Option<Time>,
    /// Verified outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<PipelineOutputs>,
    /// Estimated cost of all stages so far and the current burn rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<CostEstimate>,
    /// Human-readable summary of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Training progress as seen in Cloud Storage: the newest checkpoint of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    /// The `tpu-operator.dev/rerun` annotation value the current run was started for (or the
    /// pipeline was created with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<RerunStatus>,
}

/// The re-run the pipeline last acted on (see the `tpu-operator.dev/rerun` annotation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RerunStatus {
    /// The annotation's value: another value asks for one more run.
    pub value: String,
    /// When the run for this value started (absent for the value the pipeline was created with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Counted training attempts of earlier runs: `maxRetries` applies to the Train stage's
    /// `attempts` minus these.
    #[serde(default)]
    pub earlier_attempts: i32,
}

/// The newest checkpoint under the current attempt's `CHECKPOINT_DIR`, from a listing made at
/// most every `--poll-checkpoints` while training runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointStatus {
    /// The `CHECKPOINT_DIR` the current attempt was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The newest checkpoint: the step directory (`<dir>/<step>/`, `<dir>/step_<n>/`) or, for
    /// names without a step, the newest object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_uri: Option<String>,
    /// When the newest checkpoint was written (its newest object's update time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_time: Option<Time>,
    /// Training step of the newest checkpoint, when its name carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_step: Option<i64>,
    /// When Cloud Storage was last listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_time: Option<Time>,
}

fn stages_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <Vec<StageStatus>>::json_schema(generator);
    schema.insert("x-kubernetes-list-type".into(), serde_json::json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["name"]));
    schema.insert("maxItems".into(), serde_json::json!(2));
    schema
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
