//! `TpuSlice`: one Cloud TPU VM slice, created directly (`nodes.create`) or through a queued
//! resource (`queuedResources.create`) for reserved or queued capacity.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    common::{ContainerSpec, DeletionPolicy},
    schema::{ACCELERATOR_TYPE, DURATION, PROJECT_ID, RFC1035_ID, ZONE},
};

/// Annotation on a `TpuSlice` naming where its workload reports completion (`<uri>_SUCCESS` /
/// `<uri>_FAILED`): the operator passes it to the node (metadata `tpu-operator-done-uri`), and
/// `idleTimeout` counts from the marker. A TrainingPipeline sets it on its training slice.
pub const DONE_URI_ANNOTATION: &str = "tpu-operator.dev/done-uri";

/// Node metadata key carrying [`DONE_URI_ANNOTATION`] to the node: the generated startup script
/// reads it and writes `<uri>_SUCCESS` or `<uri>_FAILED` there (gcp-emulator, playing the
/// workload, reads it too). Admission reserves `tpu-operator-*` metadata keys for the operator.
pub const DONE_URI_METADATA: &str = "tpu-operator-done-uri";
/// Node metadata key of the startup script.
pub const STARTUP_SCRIPT_METADATA: &str = "startup-script";
/// Node metadata key listing (comma-separated, sorted) the other metadata keys the operator set.
/// Only those keys are compared and corrected: anything else on the node belongs to someone else,
/// e.g. the `ssh-keys` entry `gcloud compute tpus tpu-vm ssh` / `scp` add to the node's metadata
/// (<https://cloud.google.com/tpu/docs/configure-networking-access>, "Enable SSH access"). Kept on
/// the node rather than in status so that it survives a lost status and travels with the node.
pub const MANAGED_METADATA_KEY: &str = "tpu-operator-managed-metadata";
/// Multislice: node metadata key telling node `k` that it is slice `k` (`MEGASCALE_SLICE_ID`).
/// The nodes of one queued resource share one node template, so per-node values cannot be in the
/// create request: the operator patches them onto each node once all nodes are READY, and the
/// startup script waits for them.
pub const MEGASCALE_SLICE_ID_METADATA: &str = "tpu-operator-megascale-slice-id";
/// Multislice: node metadata key with `MEGASCALE_COORDINATOR_ADDRESS` (`<ip>:<port>` of slice 0
/// host 0), patched on like [`MEGASCALE_SLICE_ID_METADATA`].
pub const MEGASCALE_COORDINATOR_METADATA: &str = "tpu-operator-megascale-coordinator";

/// A Cloud TPU VM slice. `Ready` while the node is READY and healthy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tpu-operator.dev",
    version = "v1beta1",
    kind = "TpuSlice",
    namespaced,
    status = "TpuSliceStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "tpus",
    shortname = "slice",
    category = "tpu-operator",
    doc = "A Cloud TPU VM slice: one TPU node, created directly or, for reserved and queued capacity, through a queued resource.",
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
    printcolumn(name = "Accelerator", type_ = "string", json_path = ".status.acceleratorType"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".status.zone"),
    printcolumn(name = "Chips", type_ = "integer", json_path = ".status.chips"),
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
pub struct TpuSliceSpec {
    /// GCP project id. Defaults to the operator's configured project (or the namespace's policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = PROJECT_ID))]
    pub project: Option<String>,

    /// Compute zone the TPU lives in, e.g. `us-east5-b` (v6e), `us-central2-b` (v4),
    /// `europe-west4-a` (v5e); with a `capacityPlan`, the zone of rungs that list none.
    /// Immutable.
    #[schemars(length(max = 63), regex(pattern = ZONE))]
    pub zone: String,

    /// TPU accelerator type, e.g. `v6e-8`, `v5litepod-8`, `v5p-8`, `v4-16` (v2-v5p count
    /// TensorCores, v5e/v6e count chips). Set exactly one of `acceleratorType` and
    /// `acceleratorConfig`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), regex(pattern = ACCELERATOR_TYPE))]
    pub accelerator_type: Option<String>,

    /// TPU generation and topology, the alternative to `acceleratorType` (e.g.
    /// `{type: V5P, topology: 2x2x1}`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_config: Option<AcceleratorConfig>,

    /// TPU software version (VM image), e.g. `v2-alpha-tpuv6e`, `tpu-ubuntu2204-base`,
    /// `v2-alpha-tpuv5-lite`. Required with `provisioner: TpuApi`; with `ComputeEngine` the VM
    /// image is `computeEngine.image` instead. Immutable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[a-z0-9][a-z0-9.-]*$"))]
    pub runtime_version: String,

    /// Which Google Cloud API provisions the slice: `TpuApi` (default: a Cloud TPU node, or a
    /// queued resource) or `ComputeEngine` (a single-host slice as one Compute Engine instance
    /// of a TPU machine type, a multi-host slice as a managed instance group with a
    /// HIGH_THROUGHPUT workload policy). Compute Engine is the only way to TPU7x and to
    /// flex-start capacity; docs/compute-engine.md says when to choose which. Immutable.
    #[serde(default)]
    pub provisioner: Provisioner,

    /// Settings only Compute Engine has (`provisioner: ComputeEngine` only; required there).
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_engine: Option<ComputeEngineOptions>,

    /// How capacity is obtained. Defaults to on-demand. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,

    /// Capacity to try in order instead of one `capacity`: rungs of capacity kinds and zones,
    /// most preferred first, each with how long to wait for it (`waitFor`). The slice runs on the
    /// first that grants capacity, and never holds a request on two rungs at once: the previous
    /// rung's node or queued resource is gone before the next is created. After a lost node
    /// (preempted, suspended, evicted) the plan starts again from its first rung.
    /// `status.capacityPlan` lists every rung and zone tried (docs/capacity.md, "Capacity
    /// plan"). Mutually exclusive with `capacity`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_plan: Option<CapacityPlan>,

    /// Multislice: `nodeCount` slices of this accelerator type, one queued resource per slice, for
    /// one training run across slices over the data center network (JAX multislice). Needs
    /// `provisioner: TpuApi` and `capacity.queued` or `capacity.reserved`. The slice is Ready only
    /// when every node is READY, and no slice's workload starts before. A lost slice is replaced
    /// alone (`maxSliceRestarts`, `status.sliceRestarts`): the others keep their nodes and every
    /// slice's workload starts again once all are READY. The `workload` container gets the
    /// `MEGASCALE_*` environment (docs/training.md, "Multislice"). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multislice: Option<Multislice>,

    /// VPC settings of the TPU VMs. Immutable except `enableExternalIps` and `tags`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<NetworkConfig>,

    /// Service account the TPU VMs run as (the project's default compute service account when
    /// empty). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccount>,

    /// Labels put on the TPU node (and queued resource), next to the operator's identity labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::gcp_labels")]
    pub labels: BTreeMap<String, String>,

    /// Custom node metadata (key/value). `startup-script` and `tpu-operator-*` keys are reserved:
    /// use `startupScript` or `workload`. Only the keys set here (and by the operator) are kept in
    /// sync; keys others add to the node, such as the `ssh-keys` of `gcloud compute tpus tpu-vm
    /// ssh`, are left alone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema::node_metadata")]
    pub metadata: BTreeMap<String, String>,

    /// Startup script run on every TPU VM at boot (node metadata `startup-script`). Mutually
    /// exclusive with `workload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub startup_script: Option<String>,

    /// Container the operator runs on every TPU VM through a generated startup script. Mutually
    /// exclusive with `startupScript`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<ContainerSpec>,

    /// What to do when a spot / preemptible slice is reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionPolicy>,

    /// What to do when Google announces maintenance of the slice's node: ask the workload for a
    /// checkpoint `checkpointLead` before the window and, where Google allows it, start the
    /// maintenance right after that checkpoint is committed (docs/training.md, "Maintenance").
    /// `status.maintenance` shows the announced window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,

    /// Delete (default) or Orphan the TPU node when this resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Pause, as `batch/v1` Job's `suspend`: while true the slice's node (or queued resource) is
    /// deleted and nothing is created, so nothing bills; the object, its name and its settings
    /// stay. Set back to false, a new node is created. Data on the VMs' disks does not survive:
    /// keep what matters in Cloud Storage.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,

    /// Delete the node once it has run this long (e.g. `24h`): a budget guard against forgotten
    /// slices. The resource then reports `Stalled` with reason `MaxRunDurationExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub max_run_duration: Option<String>,

    /// Delete the node this long (e.g. `30m`) after its workload ended, so a finished slice stops
    /// billing; the resource then reports `Stalled` with reason `IdleTimeout` and is not recreated
    /// until the spec changes. The end is the workload's completion marker (`<uri>_SUCCESS` or
    /// `<uri>_FAILED`, written by the operator's startup script when the `workload` container
    /// exits) under the URI of the annotation `tpu-operator.dev/done-uri` (TrainingPipelines set
    /// it on their slices). Without that annotation the operator cannot see activity on the node
    /// and this field has no effect: bound such slices with `maxRunDuration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub idle_timeout: Option<String>,

    /// Adopt an existing TPU node with this id (in `zone`) instead of creating one. The node must
    /// match the spec; the operator labels it and from then on manages (and, with
    /// `deletionPolicy: Delete`, deletes) it. A node carrying another object's or cluster's
    /// `tpu-operator-*` labels is refused, and where the namespace has a tenancy policy adoption
    /// needs its `allowAdoption` and is checked like a create (docs/policy.md). A node the slice
    /// never took over is left in place when the slice is deleted. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = RFC1035_ID))]
    pub adopt_node_id: Option<String>,
}

mod capacity;
mod capacity_plan;
mod derived;
mod maintenance;
mod provisioning;
mod status;

pub use capacity::{
    Capacity, CapacityMode, Empty, FlexStartCapacity, QueuedCapacity, QueuedTier, ReservedCapacity,
};
pub use capacity_plan::{
    AttemptOutcome, CapacityPlan, CapacityPlanStatus, CapacityRung, KEPT_ATTEMPTS, MAX_RUNG_ZONES, MAX_RUNGS,
    PlanPlace, RungAttempt,
};
pub use maintenance::{
    CHECKPOINT_REQUEST_METADATA, DEFAULT_CHECKPOINT_LEAD, MaintenanceSpec, MaintenanceState,
    MaintenanceStatus, StartEarly,
};
pub use provisioning::{
    AcceleratorConfig, ComputeEngineOptions, Multislice, NetworkConfig, PreemptionPolicy, Provisioner,
    ServiceAccount,
};
pub use status::{TpuSlicePhase, TpuSliceStatus};
