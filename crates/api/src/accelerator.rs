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

/// The size of a TPU slice, however it was specified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceShape {
    /// TPU generation.
    pub generation: TpuGeneration,
    /// Number of TPU chips.
    pub chips: u32,
    /// Number of TPU VM hosts (workers).
    pub hosts: u32,
}

impl SliceShape {
    fn new(generation: TpuGeneration, chips: u32) -> Self {
        Self {
            generation,
            chips,
            hosts: generation.hosts(chips),
        }
    }

    /// The equivalent accelerator type string, e.g. `v6e-8` or `v4-16`.
    pub fn accelerator_type(&self) -> String {
        let n = if self.generation.suffix_counts_cores() {
            self.chips * 2
        } else {
            self.chips
        };
        format!("{}-{n}", self.generation.prefix())
    }
}

/// How Compute Engine provisions a slice: one TPU machine type per host
/// (docs.cloud.google.com/compute/docs/tpus/tpu-machines), the number of hosts, and the
/// accelerator topology a multi-host slice's workload policy asks for
/// (`ResourcePolicy.workloadPolicy.acceleratorTopology`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeMachine {
    /// Machine type of every host, e.g. `ct6e-standard-4t`.
    pub machine_type: &'static str,
    /// TPU VM hosts (1: a single instance; more: a managed instance group).
    pub hosts: u32,
    /// Chip topology of the whole slice, e.g. `4x4` or `2x2x2`.
    pub topology: String,
}

impl SliceShape {
    /// The Compute Engine machines of this shape. `topology` is the spec's
    /// `acceleratorConfig.topology` when it gave one; otherwise the generation's usual topology
    /// for the chip count is used (v6e's fixed table; for v5p and TPU7x the cube-like shape the
    /// TPU docs list for power-of-two sizes, e.g. 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4).
    pub fn compute_engine(&self, topology: Option<&str>) -> Result<ComputeMachine, String> {
        use TpuGeneration as G;
        let machine_type = match (self.generation, self.chips) {
            (G::V6e, 1) => "ct6e-standard-1t",
            (G::V6e, 8) => "ct6e-standard-8t",
            (G::V6e, _) => "ct6e-standard-4t",
            (G::V5p, _) => "ct5p-hightpu-4t",
            (G::Tpu7x, _) => "tpu7x-standard-4t",
            (other, _) => {
                return Err(format!(
                    "{other} is not sold on Compute Engine (TPU machine types exist for v5p, v6e and TPU7x): use provisioner TpuApi"
                ));
            }
        };
        let topology = match topology {
            Some(t) => t.to_string(),
            None => self.default_topology().ok_or_else(|| {
                format!(
                    "{} chips of {} have no usual topology: give acceleratorConfig {{type, topology}} instead of acceleratorType",
                    self.chips, self.generation
                )
            })?,
        };
        Ok(ComputeMachine {
            machine_type,
            hosts: self.hosts,
            topology,
        })
    }

    fn default_topology(&self) -> Option<String> {
        if let Some((sizes, topologies)) = self.generation.fixed_sizes() {
            let i = sizes.iter().position(|&c| c == self.chips)?;
            return Some(topologies[i].to_string());
        }
        if self.chips == 4 {
            return Some("2x2x1".into());
        }
        if !self.chips.is_power_of_two() || self.chips < 4 {
            return None;
        }
        let mut dims = [1u32, 2, 2];
        while dims.iter().product::<u32>() < self.chips {
            dims[0] *= 2;
            dims.sort_unstable();
        }
        Some(format!("{}x{}x{}", dims[0], dims[1], dims[2]))
    }
}

/// An accelerator type or topology that is not a valid TPU slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceleratorError {
    /// Not of the form `<generation>-<number>`.
    #[error("accelerator type {0:?} is not of the form v2-8, v4-16, v5p-8, v5litepod-8 or v6e-8")]
    Malformed(String),
    /// Unknown generation prefix.
    #[error(
        "accelerator type {0:?} names an unknown TPU generation (known: v2, v3, v4, v5p, v5litepod, v6e)"
    )]
    UnknownGeneration(String),
    /// The generation is not sold in this size.
    #[error("{generation} is not available with {chips} chips (accelerator type {input:?})")]
    InvalidSize {
        /// What the user wrote.
        input: String,
        /// Parsed generation.
        generation: TpuGeneration,
        /// Chips it would have.
        chips: u32,
    },
    /// Topology is not `AxB` / `AxBxC`.
    #[error("topology {0:?} is not of the form 2x4 or 2x2x1")]
    MalformedTopology(String),
    /// Topology has the wrong number of dimensions or size for the generation.
    #[error("topology {topology:?} does not fit {generation}: {reason}")]
    TopologyMismatch {
        /// The topology.
        topology: String,
        /// The generation it was paired with.
        generation: TpuGeneration,
        /// What is wrong.
        reason: String,
    },
}

/// Parses an accelerator type such as `v6e-8` into generation, chips and hosts.
pub fn parse_accelerator_type(input: &str) -> Result<SliceShape, AcceleratorError> {
    let (prefix, suffix) = input
        .rsplit_once('-')
        .ok_or_else(|| AcceleratorError::Malformed(input.into()))?;
    let n: u32 = suffix
        .parse()
        .map_err(|_| AcceleratorError::Malformed(input.into()))?;
    let generation = TpuGeneration::from_prefix(prefix)
        .ok_or_else(|| AcceleratorError::UnknownGeneration(input.into()))?;
    let invalid = |chips| AcceleratorError::InvalidSize {
        input: input.into(),
        generation,
        chips,
    };
    let chips = if generation.suffix_counts_cores() {
        if !n.is_multiple_of(2) {
            return Err(invalid(n / 2));
        }
        n / 2
    } else {
        n
    };
    if !generation.is_valid_size(chips) {
        return Err(invalid(chips));
    }
    Ok(SliceShape::new(generation, chips))
}

/// Parses a topology (`2x4`, `2x2x1`) into its dimensions.
pub fn topology_dims(topology: &str) -> Result<Vec<u32>, AcceleratorError> {
    let dims: Option<Vec<u32>> = topology
        .split('x')
        .map(|d| d.parse::<u32>().ok().filter(|&d| d > 0))
        .collect();
    match dims {
        Some(d) if (2..=3).contains(&d.len()) => Ok(d),
        _ => Err(AcceleratorError::MalformedTopology(topology.into())),
    }
}

/// Number of chips in a topology: the product of its dimensions.
pub fn topology_chips(topology: &str) -> Result<u32, AcceleratorError> {
    Ok(topology_dims(topology)?.iter().product())
}

/// Validates a (generation, topology) pair as the TPU API's `acceleratorConfig` takes it and
/// returns the slice shape.
pub fn shape_from_config(generation: TpuGeneration, topology: &str) -> Result<SliceShape, AcceleratorError> {
    let dims = topology_dims(topology)?;
    let mismatch = |reason: String| AcceleratorError::TopologyMismatch {
        topology: topology.into(),
        generation,
        reason,
    };
    if dims.len() != generation.topology_dims() {
        return Err(mismatch(format!(
            "{generation} topologies have {} dimensions",
            generation.topology_dims()
        )));
    }
    let chips: u32 = dims.iter().product();
    if let Some((_, topologies)) = generation.fixed_sizes()
        && !topologies.contains(&topology)
    {
        return Err(mismatch(format!(
            "{generation} topologies are {}",
            topologies.join(", ")
        )));
    }
    if !generation.is_valid_size(chips) {
        return Err(mismatch(format!(
            "{chips} chips is not a {generation} slice size"
        )));
    }
    Ok(SliceShape::new(generation, chips))
}

/// Checks that a topology has as many chips as an accelerator type (for specs that carry both).
pub fn check_topology_matches(
    accelerator_type: &str,
    topology: &str,
) -> Result<SliceShape, AcceleratorError> {
    let by_type = parse_accelerator_type(accelerator_type)?;
    let by_topology = shape_from_config(by_type.generation, topology)?;
    if by_topology.chips != by_type.chips {
        return Err(AcceleratorError::TopologyMismatch {
            topology: topology.into(),
            generation: by_type.generation,
            reason: format!(
                "it has {} chips but {accelerator_type} has {}",
                by_topology.chips, by_type.chips
            ),
        });
    }
    Ok(by_type)
}

/// Vertex AI machine types that carry Cloud TPUs (Vertex has no TPU_V5P / TPU_V6E accelerator
/// enum: newer TPUs are selected by machine type plus `tpuTopology`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum VertexMachineType {
    /// TPU v2 / v3 through `acceleratorType` TPU_V2 | TPU_V3 and `acceleratorCount: 8`.
    #[serde(rename = "cloud-tpu")]
    CloudTpu,
    /// TPU v5e, 1 chip per host (topology 1x1).
    #[serde(rename = "ct5lp-hightpu-1t")]
    Ct5lpHightpu1t,
    /// TPU v5e, 4 chips per host (2x2 on one host; 2x4 and larger on several).
    #[serde(rename = "ct5lp-hightpu-4t")]
    Ct5lpHightpu4t,
    /// TPU v5e, 8 chips on one host (topology 2x4).
    #[serde(rename = "ct5lp-hightpu-8t")]
    Ct5lpHightpu8t,
    /// TPU v5p, 4 chips per host (3-D topologies such as 2x2x1, 2x2x2).
    #[serde(rename = "ct5p-hightpu-4t")]
    Ct5pHightpu4t,
    /// TPU v6e, 1 chip per host (topology 1x1).
    #[serde(rename = "ct6e-standard-1t")]
    Ct6eStandard1t,
    /// TPU v6e, 4 chips per host (2x2 on one host; 2x4 and larger on several).
    #[serde(rename = "ct6e-standard-4t")]
    Ct6eStandard4t,
    /// TPU v6e, 8 chips on one host (topology 2x4).
    #[serde(rename = "ct6e-standard-8t")]
    Ct6eStandard8t,
}

/// The topologies a Vertex machine type accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllowedTopologies {
    /// No `tpuTopology`: the size comes from `acceleratorCount` (cloud-tpu).
    None,
    /// Exactly one of these.
    OneOf(&'static [&'static str]),
    /// Any three-dimensional topology whose chip count is a multiple of 4 (v5p).
    ThreeDimensional,
}

/// Facts about one Vertex TPU machine type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineTypeInfo {
    /// Generation, `None` for `cloud-tpu` (it depends on `acceleratorType`).
    pub generation: Option<TpuGeneration>,
    /// Chips on each host.
    pub chips_per_host: u32,
    /// Topologies the machine type accepts.
    pub topologies: AllowedTopologies,
}

const MULTI_HOST_4T: &[&str] = &["2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"];

impl VertexMachineType {
    /// Every machine type in the table.
    pub const ALL: [VertexMachineType; 8] = [
        Self::CloudTpu,
        Self::Ct5lpHightpu1t,
        Self::Ct5lpHightpu4t,
        Self::Ct5lpHightpu8t,
        Self::Ct5pHightpu4t,
        Self::Ct6eStandard1t,
        Self::Ct6eStandard4t,
        Self::Ct6eStandard8t,
    ];

    /// The string Vertex expects in `machineSpec.machineType`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CloudTpu => "cloud-tpu",
            Self::Ct5lpHightpu1t => "ct5lp-hightpu-1t",
            Self::Ct5lpHightpu4t => "ct5lp-hightpu-4t",
            Self::Ct5lpHightpu8t => "ct5lp-hightpu-8t",
            Self::Ct5pHightpu4t => "ct5p-hightpu-4t",
            Self::Ct6eStandard1t => "ct6e-standard-1t",
            Self::Ct6eStandard4t => "ct6e-standard-4t",
            Self::Ct6eStandard8t => "ct6e-standard-8t",
        }
    }

    /// Generation, chips per host and allowed topologies.
    pub fn info(self) -> MachineTypeInfo {
        use AllowedTopologies::{OneOf, ThreeDimensional};
        use TpuGeneration::*;
        let (generation, chips_per_host, topologies) = match self {
            Self::CloudTpu => (Option::None, 4, AllowedTopologies::None),
            Self::Ct5lpHightpu1t => (Some(V5e), 1, OneOf(&["1x1"])),
            Self::Ct5lpHightpu4t => (Some(V5e), 4, OneOf(MULTI_HOST_4T)),
            Self::Ct5lpHightpu8t => (Some(V5e), 8, OneOf(&["2x4"])),
            Self::Ct5pHightpu4t => (Some(V5p), 4, ThreeDimensional),
            Self::Ct6eStandard1t => (Some(V6e), 1, OneOf(&["1x1"])),
            Self::Ct6eStandard4t => (Some(V6e), 4, OneOf(MULTI_HOST_4T)),
            Self::Ct6eStandard8t => (Some(V6e), 8, OneOf(&["2x4"])),
        };
        MachineTypeInfo {
            generation,
            chips_per_host,
            topologies,
        }
    }

    /// Checks `tpuTopology` against this machine type and returns the slice shape.
    pub fn check_topology(self, topology: Option<&str>) -> Result<Option<SliceShape>, String> {
        let info = self.info();
        let name = self.as_str();
        match (info.topologies, topology) {
            (AllowedTopologies::None, None) => Ok(None),
            (AllowedTopologies::None, Some(t)) => Err(format!(
                "machine type {name} takes no tpuTopology (got {t}); size it with acceleratorCount"
            )),
            (_, None) => Err(format!("machine type {name} requires tpuTopology")),
            (AllowedTopologies::OneOf(list), Some(t)) if !list.contains(&t) => Err(format!(
                "machine type {name} supports tpuTopology {} (got {t})",
                list.join(", ")
            )),
            (AllowedTopologies::ThreeDimensional, Some(t)) => {
                let dims = topology_dims(t).map_err(|e| e.to_string())?;
                let chips: u32 = dims.iter().product();
                if dims.len() != 3 || !chips.is_multiple_of(4) {
                    return Err(format!(
                        "machine type {name} needs a 3-D tpuTopology with a multiple of 4 chips (got {t})"
                    ));
                }
                Ok(Some(SliceShape::new(TpuGeneration::V5p, chips)))
            }
            (_, Some(t)) => {
                let generation = info
                    .generation
                    .expect("every topology-sized machine type has a generation");
                let chips = topology_chips(t).map_err(|e| e.to_string())?;
                Ok(Some(SliceShape::new(generation, chips)))
            }
        }
    }
}

/// Vertex AI `MachineSpec.acceleratorType` values for TPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[allow(non_camel_case_types)]
pub enum VertexAcceleratorType {
    /// TPU v2 (with machine type `cloud-tpu` and `acceleratorCount: 8`).
    TPU_V2,
    /// TPU v3 (with machine type `cloud-tpu` and `acceleratorCount: 8`).
    TPU_V3,
    /// TPU v4 pod slices. Listed because Vertex defines it; no machine type in the operator's
    /// table takes it, so use TPU VM mode (`training.tpuVm`) for v4.
    TPU_V4_POD,
    /// TPU v5e (optional with the `ct5lp-hightpu-*` machine types).
    TPU_V5_LITEPOD,
}

#[cfg(test)]
mod tests {
    use super::*;
    use TpuGeneration::*;

    #[test]
    fn compute_engine_machines_per_shape() {
        let machine = |accelerator: &str, topology: Option<&str>| {
            parse_accelerator_type(accelerator)
                .unwrap()
                .compute_engine(topology)
        };
        let m = machine("v6e-8", None).unwrap();
        assert_eq!(
            (m.machine_type, m.hosts, m.topology.as_str()),
            ("ct6e-standard-8t", 1, "2x4")
        );
        let m = machine("v6e-16", None).unwrap();
        assert_eq!(
            (m.machine_type, m.hosts, m.topology.as_str()),
            ("ct6e-standard-4t", 4, "4x4")
        );
        let m = machine("v6e-1", None).unwrap();
        assert_eq!(m.machine_type, "ct6e-standard-1t");
        let m = machine("v5p-16", None).unwrap();
        assert_eq!(
            (m.machine_type, m.hosts, m.topology.as_str()),
            ("ct5p-hightpu-4t", 2, "2x2x2")
        );
        let m = machine("tpu7x-8", None).unwrap();
        assert_eq!(
            (m.machine_type, m.hosts, m.topology.as_str()),
            ("tpu7x-standard-4t", 1, "2x2x1")
        );
        let m = machine("tpu7x-64", None).unwrap();
        assert_eq!((m.hosts, m.topology.as_str()), (8, "2x4x4"));
        let m = machine("v5p-24", Some("2x2x3")).unwrap();
        assert_eq!((m.hosts, m.topology.as_str()), (3, "2x2x3"));
        assert!(machine("v5p-24", None).unwrap_err().contains("acceleratorConfig"));
        assert!(machine("v4-8", None).unwrap_err().contains("provisioner TpuApi"));
    }

    #[test]
    fn parses_accelerator_types_into_chips_and_hosts() {
        for (input, generation, chips, hosts) in [
            ("v2-8", V2, 4, 1),
            ("v3-32", V3, 16, 4),
            ("v4-8", V4, 4, 1),
            ("v4-16", V4, 8, 2),
            ("v5p-8", V5p, 4, 1),
            ("v5p-128", V5p, 64, 16),
            ("v5litepod-1", V5e, 1, 1),
            ("v5litepod-8", V5e, 8, 1),
            ("v5litepod-16", V5e, 16, 4),
            ("v6e-4", V6e, 4, 1),
            ("v6e-8", V6e, 8, 1),
            ("v6e-256", V6e, 256, 64),
        ] {
            let shape = parse_accelerator_type(input).unwrap();
            assert_eq!(
                (shape.generation, shape.chips, shape.hosts),
                (generation, chips, hosts),
                "{input}"
            );
            assert_eq!(shape.accelerator_type(), input, "round trip");
        }
    }

    #[test]
    fn rejects_malformed_and_unsold_accelerator_types() {
        assert!(matches!(
            parse_accelerator_type("v6e"),
            Err(AcceleratorError::Malformed(_))
        ));
        assert!(matches!(
            parse_accelerator_type("v6e-x"),
            Err(AcceleratorError::Malformed(_))
        ));
        assert!(matches!(
            parse_accelerator_type("v7-8"),
            Err(AcceleratorError::UnknownGeneration(_))
        ));
        assert!(matches!(
            parse_accelerator_type("v6e-3"),
            Err(AcceleratorError::InvalidSize { chips: 3, .. })
        ));
        assert!(matches!(
            parse_accelerator_type("v4-12"),
            Err(AcceleratorError::InvalidSize { chips: 6, .. })
        ));
        assert!(matches!(
            parse_accelerator_type("v2-7"),
            Err(AcceleratorError::InvalidSize { .. })
        ));
        assert!(matches!(
            parse_accelerator_type("v5litepod-512"),
            Err(AcceleratorError::InvalidSize { .. })
        ));
    }

    #[test]
    fn topology_chip_counts() {
        assert_eq!(topology_chips("2x4").unwrap(), 8);
        assert_eq!(topology_chips("2x2x1").unwrap(), 4);
        assert_eq!(topology_chips("16x16").unwrap(), 256);
        assert!(topology_chips("2x").is_err());
        assert!(topology_chips("0x4").is_err());
        assert!(topology_chips("2x2x2x2").is_err());
        assert!(topology_chips("8").is_err());
    }

    #[test]
    fn accelerator_config_topology_must_fit_the_generation() {
        assert_eq!(shape_from_config(V6e, "2x4").unwrap().accelerator_type(), "v6e-8");
        assert_eq!(
            shape_from_config(V4, "2x2x2").unwrap().accelerator_type(),
            "v4-16"
        );
        assert_eq!(shape_from_config(V5p, "2x2x1").unwrap().hosts, 1);
        assert!(shape_from_config(V6e, "2x2x1").is_err(), "v6e is 2-D");
        assert!(shape_from_config(V4, "2x2").is_err(), "v4 is 3-D");
        assert!(shape_from_config(V6e, "4x2").is_err(), "v6e uses 2x4, not 4x2");
        assert!(shape_from_config(V4, "1x1x3").is_err(), "3 chips is no v4 size");
        assert!(
            shape_from_config(V2, "1x4").is_err(),
            "v2 slices are square-ish: 2x2"
        );
        assert_eq!(shape_from_config(V3, "4x8").unwrap().accelerator_type(), "v3-64");
    }

    #[test]
    fn topology_versus_accelerator_type() {
        assert!(check_topology_matches("v6e-8", "2x4").is_ok());
        let err = check_topology_matches("v6e-8", "2x2").unwrap_err();
        assert_eq!(
            err.to_string(),
            "topology \"2x2\" does not fit v6e: it has 4 chips but v6e-8 has 8"
        );
        assert!(check_topology_matches("v4-16", "2x2x2").is_ok());
        assert!(check_topology_matches("v4-16", "2x2x1").is_err());
    }

    #[test]
    fn vertex_machine_types_and_topologies() {
        use VertexMachineType::*;
        assert_eq!(
            Ct6eStandard4t.check_topology(Some("2x2")).unwrap().unwrap().chips,
            4
        );
        assert_eq!(
            Ct6eStandard4t.check_topology(Some("4x4")).unwrap().unwrap().hosts,
            4
        );
        assert!(Ct6eStandard8t.check_topology(Some("2x2")).is_err());
        assert!(Ct6eStandard1t.check_topology(Some("2x2")).is_err());
        assert!(Ct5lpHightpu4t.check_topology(None).is_err());
        assert!(CloudTpu.check_topology(None).unwrap().is_none());
        assert!(CloudTpu.check_topology(Some("2x2")).is_err());
        assert_eq!(
            Ct5pHightpu4t
                .check_topology(Some("2x2x2"))
                .unwrap()
                .unwrap()
                .chips,
            8
        );
        assert!(Ct5pHightpu4t.check_topology(Some("2x2")).is_err());
        assert!(Ct5pHightpu4t.check_topology(Some("1x1x1")).is_err());
        for m in VertexMachineType::ALL {
            let json = serde_json::to_value(m).unwrap();
            assert_eq!(json, m.as_str(), "serde name of {m:?}");
        }
    }
}
