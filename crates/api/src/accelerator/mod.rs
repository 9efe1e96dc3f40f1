//! Cloud TPU accelerator arithmetic: accelerator types, topologies, chips and hosts, and the
//! Vertex AI machine types that carry TPUs.
//!
//! Assumptions (from the Cloud TPU documentation; the TPU API itself does not publish them):
//! - v2, v3, v4 and v5p accelerator types count **TensorCores** in their suffix, two per chip
//!   (`v4-16` = 8 chips), and their hosts carry 4 chips each (`v4-16` = 2 hosts).
//! - v5e (`v5litepod-N`) and v6e (`v6e-N`) count **chips**; slices of up to 8 chips run on one host
//!   (1, 4 or 8 chips per host), larger slices on hosts of 4 chips.
//! - v4 and v5p topologies are three-dimensional (`2x2x1`); v2, v3, v5e and v6e are two-dimensional.
//! - v5e and v6e exist in the sizes 1, 4, 8, 16, 32, 64, 128, 256 chips with fixed topologies.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A TPU generation. Serialized with the TPU API's `AcceleratorConfig.Type` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TpuGeneration {
    /// TPU v2 (accelerator types `v2-N`, N = TensorCores).
    #[serde(rename = "V2")]
    V2,
    /// TPU v3 (`v3-N`, N = TensorCores).
    #[serde(rename = "V3")]
    V3,
    /// TPU v4 (`v4-N`, N = TensorCores).
    #[serde(rename = "V4")]
    V4,
    /// TPU v5e (`v5litepod-N`, N = chips).
    #[serde(rename = "V5LITE_POD")]
    V5e,
    /// TPU v5p (`v5p-N`, N = TensorCores).
    #[serde(rename = "V5P")]
    V5p,
    /// TPU v6e, Trillium (`v6e-N`, N = chips).
    #[serde(rename = "V6E")]
    V6e,
    /// TPU7x, Ironwood (`tpu7x-N`, N = TensorCores, 2 per chip as on v5p; 4 chips per host).
    /// Provisioned only through Compute Engine or GKE ("To use TPU7x, you can use Google
    /// Kubernetes Engine (GKE) or Compute Engine", docs.cloud.google.com/tpu/docs/tpu7x), so a
    /// TpuSlice needs `provisioner: ComputeEngine` for it.
    #[serde(rename = "TPU7X")]
    Tpu7x,
}

/// Chip counts v5e and v6e slices come in.
pub const LITE_SIZES: [u32; 8] = [1, 4, 8, 16, 32, 64, 128, 256];
/// The topology of each v5e / v6e size, index-aligned with [`LITE_SIZES`].
pub const LITE_TOPOLOGIES: [&str; 8] = ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"];
/// Chip counts of TPU v2 slices (v2-8 ... v2-512).
pub const V2_SIZES: [u32; 5] = [4, 16, 64, 128, 256];
/// Topologies of TPU v2 slices, index-aligned with [`V2_SIZES`].
pub const V2_TOPOLOGIES: [&str; 5] = ["2x2", "4x4", "8x8", "8x16", "16x16"];
/// Chip counts of TPU v3 slices (v3-8 ... v3-2048).
pub const V3_SIZES: [u32; 8] = [4, 16, 32, 64, 128, 256, 512, 1024];
/// Topologies of TPU v3 slices, index-aligned with [`V3_SIZES`].
pub const V3_TOPOLOGIES: [&str; 8] = ["2x2", "4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"];

impl TpuGeneration {
    /// All generations, oldest first.
    pub const ALL: [TpuGeneration; 7] = [
        Self::V2,
        Self::V3,
        Self::V4,
        Self::V5e,
        Self::V5p,
        Self::V6e,
        Self::Tpu7x,
    ];
    /// The generations Compute Engine sells as TPU machine types
    /// (docs.cloud.google.com/compute/docs/tpus/tpu-machines: TPU7x, v6e, v5p).
    pub const COMPUTE_ENGINE: [TpuGeneration; 3] = [Self::V5p, Self::V6e, Self::Tpu7x];

    /// Prefix of the accelerator type string (`v5litepod` for v5e).
    pub fn prefix(self) -> &'static str {
        match self {
            Self::V2 => "v2",
            Self::V3 => "v3",
            Self::V4 => "v4",
            Self::V5e => "v5litepod",
            Self::V5p => "v5p",
            Self::V6e => "v6e",
            Self::Tpu7x => "tpu7x",
        }
    }

    /// The TPU API's `AcceleratorConfig.Type` name.
    pub fn api_name(self) -> &'static str {
        match self {
            Self::V2 => "V2",
            Self::V3 => "V3",
            Self::V4 => "V4",
            Self::V5e => "V5LITE_POD",
            Self::V5p => "V5P",
            Self::V6e => "V6E",
            Self::Tpu7x => "TPU7X",
        }
    }

    /// Whether the accelerator-type suffix counts TensorCores (2 per chip) rather than chips.
    pub fn suffix_counts_cores(self) -> bool {
        matches!(self, Self::V2 | Self::V3 | Self::V4 | Self::V5p | Self::Tpu7x)
    }

    /// Number of topology dimensions.
    pub fn topology_dims(self) -> usize {
        match self {
            Self::V4 | Self::V5p | Self::Tpu7x => 3,
            _ => 2,
        }
    }

    /// Largest slice in chips (one pod).
    pub fn max_chips(self) -> u32 {
        match self {
            Self::V2 => 256,
            Self::V3 => 1024,
            Self::V4 => 4096,
            Self::V5p => 8960,
            Self::Tpu7x => 9216,
            Self::V5e | Self::V6e => 256,
        }
    }

    /// Whether `chips` is a size this generation is sold in.
    pub fn is_valid_size(self, chips: u32) -> bool {
        match self.fixed_sizes() {
            Some((sizes, _)) => sizes.contains(&chips),
            None => chips >= 4 && chips.is_multiple_of(4) && chips <= self.max_chips(),
        }
    }

    /// For generations sold in a fixed list of sizes (v2, v3, v5e, v6e): the chip counts and
    /// their topologies, index-aligned. `None` for v4, v5p and TPU7x (any multiple of 4 chips).
    pub fn fixed_sizes(self) -> Option<(&'static [u32], &'static [&'static str])> {
        match self {
            Self::V2 => Some((&V2_SIZES, &V2_TOPOLOGIES)),
            Self::V3 => Some((&V3_SIZES, &V3_TOPOLOGIES)),
            Self::V5e | Self::V6e => Some((&LITE_SIZES, &LITE_TOPOLOGIES)),
            Self::V4 | Self::V5p | Self::Tpu7x => None,
        }
    }

    /// TPU VM hosts of a slice with `chips` chips.
    pub fn hosts(self, chips: u32) -> u32 {
        match self {
            Self::V5e | Self::V6e if chips <= 8 => 1,
            _ => chips.div_ceil(4).max(1),
        }
    }

    fn from_prefix(prefix: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.prefix() == prefix)
    }
}

impl fmt::Display for TpuGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix())
    }
}

mod shape;
mod vertex;

pub use shape::{
    AcceleratorError, ComputeMachine, SliceShape, check_topology_matches, parse_accelerator_type,
    shape_from_config, topology_chips, topology_dims,
};
pub use vertex::{AllowedTopologies, MachineTypeInfo, VertexAcceleratorType, VertexMachineType};
