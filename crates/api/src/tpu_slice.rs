//! `TpuSlice`: one Cloud TPU VM slice, created directly (`nodes.create`) or through a queued
//! resource (`queuedResources.create`) for reserved or queued capacity.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    accelerator::{SliceShape, TpuGeneration, parse_accelerator_type, shape_from_config},
    common::{ContainerSpec, CostEstimate, DeletionPolicy},
    schema::{
        ACCELERATOR_TYPE, DURATION, MAX_LIST_ITEMS, NETWORK_TAG, PROJECT_ID, RFC1035_ID,
        SERVICE_ACCOUNT_EMAIL, TOPOLOGY, ZONE,
    },
    tpu_policy::CapacityKind,
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
    version = "v1alpha1",
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
    printcolumn(name = "Accelerator", type_ = "string", json_path = ".status.acceleratorType"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".spec.zone"),
    printcolumn(name = "Chips", type_ = "integer", json_path = ".status.chips"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TpuSliceSpec {
    /// GCP project id. Defaults to the operator's configured project (or the namespace's policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = PROJECT_ID))]
    pub project: Option<String>,

    /// Compute zone the TPU lives in, e.g. `us-east5-b` (v6e), `us-central2-b` (v4),
    /// `europe-west4-a` (v5e). Immutable.
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

    /// Multislice: `nodeCount` slices of this accelerator type, provisioned all or nothing as one
    /// queued resource (`multisliceParams`), for one training run across slices over the data
    /// center network (JAX multislice). Needs `provisioner: TpuApi` and `capacity.queued` or
    /// `capacity.reserved`. The slice is Ready only when every node is READY; a preemption of
    /// any node recreates the whole queued resource. The `workload` container gets the
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

    /// Delete (default) or Orphan the TPU node when this resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

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

/// The API that provisions a slice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Provisioner {
    /// The Cloud TPU API (`tpu.googleapis.com/v2`): nodes and queued resources.
    #[default]
    TpuApi,
    /// Compute Engine (`compute.googleapis.com/compute/v1`): instances, instance templates,
    /// workload policies, managed instance groups and resize requests.
    ComputeEngine,
}

/// Compute Engine settings of a slice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputeEngineOptions {
    /// Boot disk image of every TPU VM: an image or image family URL, e.g.
    /// `projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts` (the TPU API's
    /// `runtimeVersion` has no meaning on Compute Engine).
    #[schemars(
        length(min = 1, max = 512),
        regex(
            pattern = r"^(https://www\.googleapis\.com/compute/v1/)?(projects/[a-z][-a-z0-9.:]*/)?global/images/([a-z]([-a-z0-9]*[a-z0-9])?|family/[a-z]([-a-z0-9]*[a-z0-9])?)$"
        )
    )]
    pub image: String,
    /// Boot disk size in GB (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 65536))]
    pub boot_disk_size_gb: Option<i64>,
}

/// Several slices of one accelerator type as one queued resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Multislice {
    /// How many slices (TPU nodes), at least 2: the queued resource's
    /// `multisliceParams.nodeCount`. The nodes are `<id>-0` .. `<id>-<nodeCount-1>`, and node
    /// `k` is slice `k` (`MEGASCALE_SLICE_ID`).
    #[schemars(range(max = 256))]
    pub node_count: i32,
}

/// TPU generation plus topology, as in the TPU API's `AcceleratorConfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorConfig {
    /// TPU generation: V2, V3, V4, V5LITE_POD (v5e), V5P or V6E.
    #[serde(rename = "type")]
    pub type_: TpuGeneration,
    /// Chip topology: `AxB` for V2, V3, V5LITE_POD, V6E (v5e/v6e: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8,
    /// 8x16, 16x16) and `AxBxC` for V4 and V5P (e.g. `2x2x1`).
    #[schemars(length(max = 8), regex(pattern = TOPOLOGY))]
    pub topology: String,
}

/// An empty marker object (`spot: {}`), as the GCP APIs use for one-of choices without options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Empty {}

/// Capacity model. Set exactly one of `onDemand`, `spot`, `reserved`, `queued`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Regular on-demand capacity through `nodes.create` (fails fast on a stockout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<Empty>,
    /// Spot capacity (`nodes.create` with `schedulingConfig.spot`): cheaper, may be preempted at
    /// any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<Empty>,
    /// Capacity from a named TPU reservation, requested through a queued resource whose
    /// `reservationName` names it (the only TPU v2 field that carries a reservation); the node is
    /// marked `schedulingConfig.reserved`. The slice waits while the reservation's capacity is in
    /// use and fails if the reservation does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedCapacity>,
    /// Flex-start capacity (`provisioner: ComputeEngine` only): a managed instance group resize
    /// request that Dynamic Workload Scheduler fulfils all at once when capacity frees up, for a
    /// fixed run duration; the slice waits (`Reconciling`, reason `WaitingForCapacity`) until
    /// then, and when the run duration ends the VMs are deleted and the slice reports `Stalled`
    /// with reason `MaxRunDurationExceeded` (the resource stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flex_start: Option<FlexStartCapacity>,
    /// Wait in a queue for capacity (a queued resource) instead of failing on a stockout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedCapacity>,
}

/// Flex-start capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlexStartCapacity {
    /// How long the VMs run once provisioned, 10 minutes to 7 days (e.g. `4h`, `2d`): the resize
    /// request's `requestedRunDuration`.
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub run_duration: String,
}

/// Capacity from a reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservedCapacity {
    /// Reservation name, short (`my-reservation`, meaning
    /// `projects/<the object's project>/locations/<spec.zone>/reservations/my-reservation`, the
    /// object's project being `spec.project` or else its namespace's default) or full
    /// (`projects/<p>/locations/<zone>/reservations/<r>`, the format the TPU API documents). Where
    /// a TpuPolicy governs the namespace, the reservation must be in one of its `allowedProjects`
    /// or listed in its `allowedReservations`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^(projects/[^/]+/locations/[^/]+/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    )]
    pub reservation_name: String,
}

/// A queued resource request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedCapacity {
    /// Give up if capacity was not granted within this duration of the request (e.g. `6h`).
    /// Mutually exclusive with `validUntilTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub valid_until_duration: Option<String>,
    /// Give up if capacity was not granted by this time (RFC 3339, e.g.
    /// `2026-12-01T00:00:00Z`). Mutually exclusive with `validUntilDuration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub valid_until_time: Option<String>,
    /// `Spot` (preemptible, cheaper) or `Guaranteed` (default).
    #[serde(default)]
    pub tier: QueuedTier,
    /// Guaranteed tier only: minimum run time to guarantee (e.g. `4h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION))]
    pub min_duration: Option<String>,
    /// Queue against a reservation (optional), short (`my-reservation`, in the object's project
    /// and `spec.zone`) or full (`projects/<p>/locations/<zone>/reservations/<r>`); checked
    /// against a TpuPolicy as `capacity.reserved.reservationName` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub reservation_name: Option<String>,
}

/// Queued resource tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum QueuedTier {
    /// Regular capacity that is not preempted once granted.
    #[default]
    Guaranteed,
    /// Spot capacity: may be reclaimed once granted.
    Spot,
}

/// How a slice's capacity is requested, decided once from `spec.capacity` (the schema lets one
/// member be set; none is on-demand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityMode {
    OnDemand,
    Spot,
    Reserved,
    Queued,
    FlexStart,
}

impl CapacityMode {
    /// Every mode with its `spec.capacity` member, in the order [`TpuSliceSpec::capacity_mode`]
    /// reads them (the first set wins) and the admission policy's CEL tests them: the one
    /// definition both use.
    pub const BY_FIELD: [(&'static str, CapacityMode); 5] = [
        ("queued", Self::Queued),
        ("flexStart", Self::FlexStart),
        ("spot", Self::Spot),
        ("reserved", Self::Reserved),
        ("onDemand", Self::OnDemand),
    ];

    /// The capacity kind policies allow and prices name: flex-start waits for capacity as a
    /// queued resource does (and as Vertex's `FLEX_START` does). The controller's tenancy check
    /// and the admission policy (`crate::admission`) both take it from here.
    pub fn kind(self) -> CapacityKind {
        match self {
            Self::OnDemand => CapacityKind::OnDemand,
            Self::Spot => CapacityKind::Spot,
            Self::Reserved => CapacityKind::Reserved,
            Self::Queued | Self::FlexStart => CapacityKind::Queued,
        }
    }
}

/// What the spec says, derived in one place.
impl TpuSliceSpec {
    pub fn capacity_mode(&self) -> CapacityMode {
        match self.capacity.as_ref() {
            Some(Capacity { queued: Some(_), .. }) => CapacityMode::Queued,
            Some(Capacity {
                flex_start: Some(_), ..
            }) => CapacityMode::FlexStart,
            Some(Capacity { spot: Some(_), .. }) => CapacityMode::Spot,
            Some(Capacity {
                reserved: Some(_), ..
            }) => CapacityMode::Reserved,
            _ => CapacityMode::OnDemand,
        }
    }

    /// `capacity.queued`, when that is the capacity asked for.
    pub fn queued(&self) -> Option<&QueuedCapacity> {
        self.capacity.as_ref().and_then(|c| c.queued.as_ref())
    }

    /// The capacity kind the slice is priced at: a queued resource of the spot tier is spot.
    pub fn price_kind(&self) -> CapacityKind {
        match self.queued() {
            Some(q) if q.tier == QueuedTier::Spot => CapacityKind::Spot,
            _ => self.capacity_mode().kind(),
        }
    }

    /// Whether the slice is requested through a queued resource (`queuedResources.create`) rather
    /// than `nodes.create`: queued capacity, and reserved capacity, because only the queued
    /// resource carries the reservation's name in TPU v2 (`QueuedResource.reservationName`,
    /// "Name of the reservation in which the resource should be provisioned. Format:
    /// projects/{project}/locations/{zone}/reservations/{reservation}", `tpu.v2.json`
    /// rev 20261001; v2 `Node.schedulingConfig` has only the `reserved` flag). Google's guide to
    /// a specific reservation does the same: `gcloud alpha compute tpus queued-resources create
    /// --reservation=...` (<https://cloud.google.com/tpu/docs/consume-reservation>). Spot stays a
    /// plain `nodes.create` with `schedulingConfig.spot`.
    /// On Compute Engine only flex-start waits for capacity (a resize request, read as a queued
    /// resource); a reservation is named on the instance itself (`reservationAffinity`).
    pub fn uses_queued_resource(&self) -> bool {
        match self.provisioner {
            Provisioner::TpuApi => matches!(
                self.capacity_mode(),
                CapacityMode::Queued | CapacityMode::Reserved
            ),
            Provisioner::ComputeEngine => self.capacity_mode() == CapacityMode::FlexStart,
        }
    }

    /// The Compute Engine VM image the slice boots (`computeEngine.image`), with
    /// `provisioner: ComputeEngine` only: the TPU API boots its `runtimeVersion`, and a leftover
    /// `computeEngine` there boots nothing.
    pub fn compute_engine_image(&self) -> Option<&str> {
        match self.provisioner {
            Provisioner::ComputeEngine => self.compute_engine.as_ref().map(|c| c.image.as_str()),
            Provisioner::TpuApi => None,
        }
    }

    /// Whether Google may reclaim the capacity (a preemption is then expected, not a failure).
    /// Flex-start VMs end with their run duration; they are not preempted.
    pub fn preemptible(&self) -> bool {
        match self.capacity_mode() {
            CapacityMode::Spot => true,
            CapacityMode::Queued => self.queued().is_some_and(|q| q.tier == QueuedTier::Spot),
            CapacityMode::OnDemand | CapacityMode::Reserved | CapacityMode::FlexStart => false,
        }
    }

    /// Multislice: how many slices (nodes) the slice is; `None` for one plain slice.
    pub fn slice_count(&self) -> Option<u32> {
        self.multislice.as_ref().map(|m| m.node_count.max(1) as u32)
    }

    /// One slice's generation, chips and hosts, from whichever of `acceleratorType` and
    /// `acceleratorConfig` is set; `Err` names the field. What a provisioner can build is
    /// checked by the controller.
    pub fn slice_shape(&self) -> Result<SliceShape, String> {
        match (&self.accelerator_type, &self.accelerator_config) {
            (Some(t), None) => parse_accelerator_type(t).map_err(|e| format!("spec.acceleratorType: {e}")),
            (None, Some(c)) => {
                shape_from_config(c.type_, &c.topology).map_err(|e| format!("spec.acceleratorConfig: {e}"))
            }
            _ => Err("set exactly one of spec.acceleratorType and spec.acceleratorConfig".into()),
        }
    }

    /// The chips and hosts of all slices together (a multislice counts every slice, as a
    /// Vertex job counts its replicas); `None` when the spec names no valid shape.
    pub fn total_shape(&self) -> Option<SliceShape> {
        let mut shape = self.slice_shape().ok()?;
        if let Some(n) = self.slice_count() {
            shape.chips *= n;
            shape.hosts *= n;
        }
        Some(shape)
    }
}

/// VPC settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// VPC network, short (`default`) or full (`projects/<p>/global/networks/<n>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^[a-zA-Z0-9/_.-]+$"))]
    pub network: Option<String>,
    /// Subnetwork, short or full (`projects/<p>/regions/<r>/subnetworks/<s>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = r"^[a-zA-Z0-9/_.-]+$"))]
    pub subnetwork: Option<String>,
    /// Give the TPU VMs external IP addresses (needed without Cloud NAT to pull public images).
    #[serde(default)]
    pub enable_external_ips: bool,
    /// Network tags for firewall rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LIST_ITEMS), inner(length(max = 63), regex(pattern = NETWORK_TAG)))]
    pub tags: Vec<String>,
}

/// Service account of the TPU VMs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccount {
    /// Service account e-mail, e.g. `trainer@demo-project.iam.gserviceaccount.com`.
    #[schemars(length(max = 254), regex(pattern = SERVICE_ACCOUNT_EMAIL))]
    pub email: String,
    /// OAuth scopes (default: `https://www.googleapis.com/auth/cloud-platform`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(
            length(max = 256),
            regex(pattern = r"^https://www\.googleapis\.com/auth/[a-z0-9._-]+$")
        )
    )]
    pub scopes: Vec<String>,
}

/// Reaction to preemption of spot / preemptible capacity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionPolicy {
    /// Recreate the slice up to this many times after preemptions (0 = never: the slice then
    /// reports `Stalled` with reason `Preempted`).
    #[serde(default = "default_max_recreations")]
    #[schemars(range(min = 0, max = 100))]
    pub max_recreations: i32,
}

fn default_max_recreations() -> i32 {
    3
}

impl Default for PreemptionPolicy {
    fn default() -> Self {
        Self {
            max_recreations: default_max_recreations(),
        }
    }
}

/// Lifecycle phase of a slice (for printer columns; conditions carry the detail).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TpuSlicePhase {
    /// Not reconciled yet.
    #[default]
    Pending,
    /// A queued resource waits for capacity.
    Queued,
    /// The node is being created.
    Provisioning,
    /// The node is READY and healthy.
    Ready,
    /// The node is up but unhealthy, repairing or restarting.
    Degraded,
    /// The node was preempted.
    Preempted,
    /// The preempted node is being replaced.
    Recreating,
    /// Terminal failure (see the Stalled condition).
    Failed,
    /// Cloud resources are being deleted.
    Deleting,
}

/// Observed state of a slice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TpuSliceStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: TpuSlicePhase,
    /// Ready / Reconciling / Stalled plus CapacityAvailable, NodeHealthy, SpecDrift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// Full name of the TPU node, `projects/<p>/locations/<zone>/nodes/<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Full name of the queued resource, when capacity is queued or reserved (both go through one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_resource_name: Option<String>,
    /// Long-running operation in flight (create / delete), polled on every reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_operation: Option<String>,
    /// Node state as GCP reports it (CREATING, READY, PREEMPTED, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_state: Option<String>,
    /// Node health as GCP reports it (HEALTHY, TIMEOUT, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Queued resource state (ACCEPTED, WAITING_FOR_RESOURCES, ACTIVE, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_resource_state: Option<String>,
    /// Accelerator type in effect (normalized from `acceleratorType` or `acceleratorConfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
    /// TPU chips in the slice (all slices of a multislice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<i32>,
    /// TPU VM hosts (workers) in the slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<i32>,
    /// Internal IP address of each worker (of slice 0 for a multislice).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_ips: Vec<String>,
    /// Multislice only: the state of each slice's node, by slice id (`[READY, CREATING]`; `-`
    /// for a node not there). `chips` and `hosts` count all slices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_states: Vec<String>,
    /// When the current node was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_time: Option<Time>,
    /// When the current node first became READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_time: Option<Time>,
    /// When the last preemption was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_preemption_time: Option<Time>,
    /// When the workload last ended (its completion marker's time; `idleTimeout` counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_time: Option<Time>,
    /// How many times the slice was recreated after a preemption.
    #[serde(default)]
    pub recreations: i32,
    /// Estimated cost so far and burn rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<CostEstimate>,
    /// Human-readable summary of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fields: serde_json::Value) -> TpuSliceSpec {
        let mut v = serde_json::json!({"zone": "us-east5-b", "runtimeVersion": "r"});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn capacity_facts_of_each_mode() {
        use CapacityKind as K;
        use CapacityMode as M;
        // (capacity, mode, policy kind, price kind, preemptible, queued resource on the TPU API)
        let cases = [
            (
                serde_json::json!({}),
                M::OnDemand,
                K::OnDemand,
                K::OnDemand,
                false,
                false,
            ),
            (
                serde_json::json!({"spot": {}}),
                M::Spot,
                K::Spot,
                K::Spot,
                true,
                false,
            ),
            (
                serde_json::json!({"reserved": {"reservationName": "r"}}),
                M::Reserved,
                K::Reserved,
                K::Reserved,
                false,
                true,
            ),
            (
                serde_json::json!({"queued": {}}),
                M::Queued,
                K::Queued,
                K::Queued,
                false,
                true,
            ),
            (
                serde_json::json!({"queued": {"tier": "Spot"}}),
                M::Queued,
                K::Queued,
                K::Spot,
                true,
                true,
            ),
            (
                serde_json::json!({"flexStart": {"runDuration": "4h"}}),
                M::FlexStart,
                K::Queued,
                K::Queued,
                false,
                false,
            ),
        ];
        for (capacity, mode, kind, price, preemptible, queued) in cases {
            let s = spec(serde_json::json!({"acceleratorType": "v6e-8", "capacity": capacity}));
            let facts = (
                s.capacity_mode(),
                s.capacity_mode().kind(),
                s.price_kind(),
                s.preemptible(),
                s.uses_queued_resource(),
            );
            assert_eq!(facts, (mode, kind, price, preemptible, queued), "{capacity}");
        }
        // On Compute Engine only flex-start waits for capacity (a resize request).
        let flex = spec(serde_json::json!({
            "acceleratorType": "v6e-8", "provisioner": "ComputeEngine",
            "capacity": {"flexStart": {"runDuration": "4h"}}
        }));
        assert!(flex.uses_queued_resource());
    }

    #[test]
    fn shapes_name_the_field_and_count_every_slice() {
        let multi = spec(serde_json::json!({"acceleratorType": "v6e-16", "multislice": {"nodeCount": 3}}));
        let one = multi.slice_shape().unwrap();
        let all = multi.total_shape().unwrap();
        assert_eq!(
            (multi.slice_count(), all.chips, all.hosts),
            (Some(3), one.chips * 3, one.hosts * 3)
        );
        let bad = spec(serde_json::json!({"acceleratorType": "v6e-3"}));
        assert!(bad.slice_shape().unwrap_err().starts_with("spec.acceleratorType"));
        assert_eq!(bad.total_shape(), None);
        let neither = spec(serde_json::json!({}));
        assert!(neither.slice_shape().unwrap_err().contains("exactly one of"));
    }
}
