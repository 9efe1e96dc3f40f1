//! Observed state of a pipeline: its phase, each stage's state, outputs, reruns and checkpoints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CostEstimate, Links};

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
    /// Waits for capacity (a stockout), a project quota, or the namespace's TpuPolicy limits:
    /// the Reason column (the Ready condition's reason) says which. A Warning Event is published
    /// when the wait starts and a Normal `WaitEnded` when it ends.
    Waiting,
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
    /// Training on a TPU VM slice with a `capacityPlan`: where its capacity came from, the rung
    /// and zone it landed on (or asks now), and the places before that had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Training on a TPU VM slice: what interrupted the run, counted apart from `attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptions: Option<Interruptions>,
    /// Last message of the stage (failure reason, queue position, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The stage's cloud object: its Cloud Console page and the Logs Explorer query of its logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Links>,
}

/// What interrupted a training slice, each counted apart and spending only its own budget:
/// preemptions spend the slice's `spec.preemption.maxRecreations`, maintenance spends nothing,
/// and neither is a counted attempt (`attempts`, against `maxRetries`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interruptions {
    /// Times the slice was recreated after a preemption.
    #[serde(default)]
    pub preemptions: i32,
    /// Times a maintenance interrupted the slice's node.
    #[serde(default)]
    pub maintenance_restarts: i32,
    /// Multislice: times one slice was lost and replaced alone (all slices together; the
    /// TpuSlice's `status.sliceRestarts` has them by slice).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slice_restarts: i32,
    /// The maintenance announced or under way now, as the slice's `MaintenancePending`
    /// condition says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,
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
    /// The links of the current (or last) stage's cloud object, for `kubectl get -o wide`; each
    /// stage has its own under `stages[].links`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Links>,
    /// Human-readable summary of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Training progress as seen in Cloud Storage: the newest checkpoint of the current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    /// Where the run's wall time and estimated dollars went: queued, provisioning,
    /// preprocessing, productive, lost to interruptions, suspended, failed attempts (the parts
    /// sum to the wall time), and the goodput percentage (`kubectl get -o wide`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_spent: Option<super::TimeSpent>,
    /// The `tpu-operator.dev/rerun` annotation value the current run was started for (or the
    /// pipeline was created with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<RerunStatus>,
    /// The failed run's slice kept for debugging (`spec.training.tpuVm.keepFailedSliceFor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_slice: Option<KeptSlice>,
    /// What `spec.suspend` stopped, and when the pipeline was suspended and resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<SuspensionStatus>,
    /// A `SuspendAtCheckpoint` budget action of the namespace's `TpuPolicy`: when the pipeline
    /// saw it, the checkpoint it was suspended after, and when it resumed (the period ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_suspension: Option<BudgetSuspensionStatus>,
    /// Kueue's view of a Vertex training stage, when the pipeline is queued through Kueue (the
    /// `kueue.x-k8s.io/queue-name` label, or the operator's default queue, with the Kueue
    /// integration on): the Workload that stands for its custom job, its queue, position and
    /// evictions. A TPU VM stage is gated at its slice, which carries the pipeline's Kueue labels
    /// and shows this in its own status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<crate::kueue::KueueStatus>,
    /// Fields a newer release wrote that this one does not know ([`crate::common::NewerFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub newer_fields: crate::common::NewerFields,
}

/// A failed run's TPU VM slice kept for debugging; it bills until it is deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeptSlice {
    /// The kept TpuSlice (`<pipeline>-train`): `kubectl get tpus NAME -o wide` shows its node.
    pub name: String,
    /// When it is deleted.
    pub until: Time,
    /// When it was deleted (the time was up, a re-run was asked for, or someone deleted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_time: Option<Time>,
}

/// The last suspension: suspending a running pipeline stops what bills (the Vertex job is
/// cancelled, the training slice deleted, the preprocessing batch cancelled; checkpoints are
/// kept), and resuming starts a new training attempt from `CHECKPOINT_DIR` that does not count
/// against `maxRetries`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspensionStatus {
    /// When the pipeline was suspended (kept after it resumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_time: Option<Time>,
    /// What suspending stopped, e.g. `custom job .../customJobs/123 (attempt 2) cancelled`;
    /// absent when nothing was running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The training attempt whose job or slice suspending stopped: resuming replaces it with an
    /// attempt that does not count against `maxRetries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_attempt: Option<i32>,
    /// When the pipeline was last resumed (absent while suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_time: Option<Time>,
    /// Training attempts started by resuming: they count neither against `maxRetries` nor
    /// against the limit of uncounted preemptions.
    #[serde(default)]
    pub resumes: i32,
}

/// The last budget suspension (`SuspendAtCheckpoint`). The run keeps training until a committed
/// checkpoint newer than `noticedTime` is listed; then its job is cancelled or its slice
/// deleted, and at `until` (the end of the budget's period) training resumes from that
/// checkpoint with an attempt that does not count against `maxRetries`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSuspensionStatus {
    /// Which budget, and what it had spent: `TpuPolicy team-a: namespace ... has spent $X of
    /// its $Y Day budget`.
    pub budget: String,
    /// When the pipeline first saw the action in force.
    pub noticed_time: Time,
    /// When the budget's period ends and the action lifts.
    pub until: Time,
    /// The committed checkpoint the run was suspended after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// When the run was suspended (what bills stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_time: Option<Time>,
    /// What suspending stopped, e.g. `TpuSlice run-train (attempt 1) deleted with its TPU node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The training attempt stopped: the attempt that resumes it does not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_attempt: Option<i32>,
    /// When training resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_time: Option<Time>,
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

fn is_zero(n: &i32) -> bool {
    *n == 0
}
