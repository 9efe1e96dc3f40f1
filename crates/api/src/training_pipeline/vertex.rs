//! Training as a Vertex AI custom job: machine, accelerator and topology, the program (a
//! container or a Python package), scheduling and boot disk.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    accelerator::{SliceShape, VertexAcceleratorType, VertexMachineType, parse_accelerator_type},
    common::{ContainerSpec, EnvVar},
    schema::{DURATION, GCS_URI, IMAGE, MAX_ARG_LENGTH, MAX_LIST_ITEMS, SERVICE_ACCOUNT_EMAIL, TOPOLOGY},
};

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

impl VertexTraining {
    /// The TPU shape of one replica: the machine type's with `tpuTopology`, or for `cloud-tpu` the
    /// accelerator enum and count (TensorCores, 8 by default). `None` for a shape admission
    /// refuses. The one rule behind quota, cost, Kueue's demand and the printer columns.
    pub fn tpu_shape(&self) -> Option<SliceShape> {
        if let Some(shape) = self
            .machine_type
            .check_topology(self.tpu_topology.as_deref())
            .ok()?
        {
            return Some(shape);
        }
        let prefix = match self.accelerator_type? {
            VertexAcceleratorType::TPU_V2 => "v2",
            VertexAcceleratorType::TPU_V3 => "v3",
            _ => return None,
        };
        parse_accelerator_type(&format!("{prefix}-{}", self.accelerator_count.unwrap_or(8))).ok()
    }
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
