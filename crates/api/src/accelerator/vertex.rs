//! Vertex AI machine types that carry Cloud TPUs, and the topologies each accepts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{SliceShape, TpuGeneration, topology_chips, topology_dims};

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
