//! How a slice is provisioned: the API that creates it, the accelerator, several slices as one,
//! and the VMs' network, service account and preemption handling.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    accelerator::TpuGeneration,
    schema::{MAX_LIST_ITEMS, NETWORK_TAG, SERVICE_ACCOUNT_EMAIL, TOPOLOGY},
};

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

/// Several slices of one accelerator type, one queued resource per slice, started all or
/// nothing: no slice's workload starts until every slice is READY.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Multislice {
    /// How many slices (TPU nodes), at least 2. Slice `k` is the queued resource and node
    /// `<id>-s<k>` (`<id>-s<k>r<n>` once replaced `n` times; `MEGASCALE_SLICE_ID` = `k`).
    #[schemars(range(max = 256))]
    pub node_count: i32,
    /// How many times one slice may be replaced alone after it is lost (preempted, or its
    /// queued resource suspended by the TPU service) before the run is given up with reason
    /// `SliceRestartsExhausted` (default 3; `0`: the first loss ends it). A lost slice is
    /// recreated alone, the others keep their nodes, and every slice's workload starts again
    /// from the last committed checkpoint once all are READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_slice_restarts: Option<i32>,
}

impl Multislice {
    /// Default of [`Multislice::max_slice_restarts`].
    pub const DEFAULT_MAX_SLICE_RESTARTS: i32 = 3;

    /// How many times one slice may be replaced alone.
    pub fn max_slice_restarts(&self) -> i32 {
        self.max_slice_restarts
            .unwrap_or(Self::DEFAULT_MAX_SLICE_RESTARTS)
    }
}

/// TPU generation plus topology, as in the TPU API's `AcceleratorConfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorConfig {
    /// TPU generation: V2, V3, V4, V5LITE_POD (v5e), V5P, V6E or TPU7X.
    #[serde(rename = "type")]
    pub type_: TpuGeneration,
    /// Chip topology: `AxB` for V2, V3, V5LITE_POD, V6E (v5e/v6e: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8,
    /// 8x16, 16x16) and `AxBxC` for V4, V5P and TPU7X (e.g. `2x2x1`).
    #[schemars(length(max = 8), regex(pattern = TOPOLOGY))]
    pub topology: String,
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
