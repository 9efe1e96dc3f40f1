//! `PreprocessBatch`: one Dataproc Serverless batch per attempt (Spark preprocessing).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{CostEstimate, DeletionPolicy},
    schema::{
        BUCKET_NAME, DURATION, GCS_URI, IMAGE, MAX_ARG_LENGTH, MAX_LIST_ITEMS, NETWORK_TAG, PROJECT_ID,
        REGION, SERVICE_ACCOUNT_EMAIL,
    },
};

/// The status's own helpers (what it says about its attempts, and changes to it).
mod status;

/// Runtime property carrying the declared output URI to the Spark job (gcp-emulator, playing
/// the job, reads it too).
pub const OUTPUT_PROPERTY: &str = "spark.tpuoperator.outputUri";

/// A Spark batch on Dataproc Serverless. Finished when the batch SUCCEEDED (and its declared
/// output exists), or FAILED / CANCELLED after `maxRetries` retries.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tpu-operator.dev",
    version = "v1beta1",
    kind = "PreprocessBatch",
    namespaced,
    status = "PreprocessBatchStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "ppb",
    category = "tpu-operator",
    doc = "A Spark preprocessing batch on Dataproc Serverless (one batch per attempt).",
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
    printcolumn(name = "Region", type_ = "string", json_path = ".spec.region"),
    printcolumn(name = "Attempts", type_ = "integer", json_path = ".status.attempts"),
    printcolumn(
        name = "Logs",
        type_ = "string",
        json_path = ".status.links.logs",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PreprocessBatchSpec {
    /// GCP project id. Defaults to the operator's configured project (or the namespace's policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = PROJECT_ID))]
    pub project: Option<String>,

    /// Dataproc region, e.g. `us-central1`.
    #[schemars(length(max = 63), regex(pattern = REGION))]
    pub region: String,

    /// The batch workload. Everything in it is immutable after creation.
    #[serde(flatten)]
    pub batch: BatchTemplate,

    /// Delete (default: cancel a running batch, then delete it) or Orphan the Dataproc batches
    /// when this resource is deleted. The only mutable field.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// A Dataproc Serverless batch workload: exactly one of `pyspark`, `spark`, `sparkSql`, `sparkR`,
/// plus runtime and execution settings. Also the `preprocess` stage of a `TrainingPipeline`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchTemplate {
    /// A PySpark job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pyspark: Option<PySparkBatch>,
    /// A Spark (JVM) job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark: Option<SparkBatch>,
    /// A Spark SQL script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark_sql: Option<SparkSqlBatch>,
    /// A SparkR job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spark_r: Option<SparkRBatch>,
    /// Runtime version, Spark properties and custom container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeConfig>,
    /// Service account, network, encryption and TTL of the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionConfig>,
    /// Labels put on the batch, next to the operator's identity labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::gcp_labels")]
    pub labels: BTreeMap<String, String>,
    /// Cloud Storage URIs the batch reads (documentation, and checked to exist before the batch
    /// is created so a typo fails in seconds instead of after Spark starts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub inputs: Vec<String>,
    /// Where the batch writes its result. Success is confirmed by `_SUCCESS` under this prefix;
    /// the operator passes it to Spark as property `spark.tpuoperator.outputUri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = GCS_URI))]
    pub output_uri: Option<String>,
    /// Retries after a FAILED batch (each retry is a new batch with a new id). Default 0.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub max_retries: i32,
}

/// `pysparkBatch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PySparkBatch {
    /// The main Python file, e.g. `gs://demo-bucket/scripts/preprocess.py`.
    #[schemars(length(max = 1024), regex(pattern = r"^gs://.+\.py$"))]
    pub main_python_file_uri: String,
    /// Arguments. `$(RAW_DATA)` and `$(PROCESSED_DATA)` are replaced in pipelines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub args: Vec<String>,
    /// Extra Python files (`.py`, `.egg`, `.zip`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub python_file_uris: Vec<String>,
    /// Jars on the driver and executor classpaths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub jar_file_uris: Vec<String>,
    /// Files placed in each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub file_uris: Vec<String>,
    /// Archives extracted into each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub archive_uris: Vec<String>,
}

/// `sparkBatch`: set exactly one of `mainJarFileUri` and `mainClass`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkBatch {
    /// The jar with the main class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = r"^gs://.+\.jar$"))]
    pub main_jar_file_uri: Option<String>,
    /// The main class (its jar must be in `jarFileUris`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^[A-Za-z_$][A-Za-z0-9_$.]*$"))]
    pub main_class: Option<String>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub args: Vec<String>,
    /// Jars on the driver and executor classpaths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub jar_file_uris: Vec<String>,
    /// Files placed in each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub file_uris: Vec<String>,
    /// Archives extracted into each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub archive_uris: Vec<String>,
}

/// `sparkSqlBatch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkSqlBatch {
    /// The SQL script.
    #[schemars(length(max = 1024), regex(pattern = GCS_URI))]
    pub query_file_uri: String,
    /// Script variables (`SET name="value";`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::string_map")]
    pub query_variables: BTreeMap<String, String>,
    /// Jars on the Spark classpath.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub jar_file_uris: Vec<String>,
}

/// `sparkRBatch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SparkRBatch {
    /// The main R file.
    #[schemars(length(max = 1024), regex(pattern = r"^gs://.+\.[Rr]$"))]
    pub main_r_file_uri: String,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = MAX_ARG_LENGTH)))]
    pub args: Vec<String>,
    /// Files placed in each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub file_uris: Vec<String>,
    /// Archives extracted into each executor's working directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 1024), regex(pattern = GCS_URI)))]
    pub archive_uris: Vec<String>,
}

/// `runtimeConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    /// Dataproc Serverless runtime version, e.g. `2.2` (Dataproc picks its default when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"))]
    pub version: Option<String>,
    /// Spark properties, e.g. `spark.executor.memory: 4g`. `spark.tpuoperator.*` is reserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::string_map")]
    pub properties: BTreeMap<String, String>,
    /// Custom container image for the Spark runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512), regex(pattern = IMAGE))]
    pub container_image: Option<String>,
}

/// `environmentConfig.executionConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionConfig {
    /// Service account the batch runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 254), regex(pattern = SERVICE_ACCOUNT_EMAIL))]
    pub service_account: Option<String>,
    /// Subnetwork URI or name. Mutually exclusive with `networkUri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^[a-zA-Z0-9/_.:-]+$"))]
    pub subnetwork_uri: Option<String>,
    /// Network URI or name. Mutually exclusive with `subnetworkUri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^[a-zA-Z0-9/_.:-]+$"))]
    pub network_uri: Option<String>,
    /// Network tags for firewall rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 63), regex(pattern = NETWORK_TAG)))]
    pub network_tags: Vec<String>,
    /// Cloud KMS key for encryption,
    /// `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 512),
        regex(pattern = r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")
    )]
    pub kms_key: Option<String>,
    /// Maximum run time before Dataproc terminates the batch, 10m to 14d (Dataproc default 4h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub ttl: Option<String>,
    /// Staging bucket **name** (not a `gs://` URI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 222), regex(pattern = BUCKET_NAME))]
    pub staging_bucket: Option<String>,
}

/// Lifecycle phase of a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PreprocessBatchPhase {
    /// Not reconciled yet.
    #[default]
    Pending,
    /// The batch was submitted and waits to start (Dataproc PENDING).
    Submitted,
    /// Waits for capacity (a stockout), a project quota, or the namespace's TpuPolicy limits:
    /// the Reason column (the Ready condition's reason) says which. A Warning Event is published
    /// when the wait starts and a Normal `WaitEnded` when it ends.
    Waiting,
    /// Spark is running.
    Running,
    /// A failed attempt will be retried.
    Retrying,
    /// The batch succeeded (and its output was verified).
    Succeeded,
    /// The batch failed after its retries, or cannot be created.
    Failed,
    /// The batch is being cancelled.
    Cancelling,
    /// The batch was cancelled.
    Cancelled,
    /// Cloud resources are being deleted.
    Deleting,
}

/// Observed state of a batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreprocessBatchStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: PreprocessBatchPhase,
    /// Ready / Reconciling / Stalled plus OutputVerified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// Full name of the current attempt's batch, `projects/<p>/locations/<r>/batches/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_name: Option<String>,
    /// Dataproc's UUID of the current batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_uuid: Option<String>,
    /// The batch's long-running operation (`projects/<p>/regions/<r>/operations/<id>`); cancelling
    /// it cancels the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_operation: Option<String>,
    /// Dataproc state of the current batch (PENDING, RUNNING, SUCCEEDED, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_state: Option<String>,
    /// Dataproc's state message (the failure reason for FAILED batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_message: Option<String>,
    /// Attempts made so far (1 after the first batch was created).
    #[serde(default)]
    pub attempts: i32,
    /// Full names of the batches of earlier attempts (kept for cleanup and debugging).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_batches: Vec<String>,
    /// When the first attempt was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the batch reached its final state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The verified output prefix (`_SUCCESS` found there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_uri: Option<String>,
    /// Driver output location Dataproc reports (`runtimeInfo.outputUri`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_output_uri: Option<String>,
    /// Estimated cost so far and burn rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<CostEstimate>,
    /// The current batch's Cloud Console page and the Logs Explorer query of its driver output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<crate::common::Links>,
    /// Human-readable summary of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fields a newer release wrote that this one does not know ([`crate::common::NewerFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub newer_fields: crate::common::NewerFields,
}
