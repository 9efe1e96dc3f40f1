//! The size of a slice however it is specified (accelerator type, or generation and topology),
//! and how Compute Engine provisions it.

use super::TpuGeneration;

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
    pub(super) fn new(generation: TpuGeneration, chips: u32) -> Self {
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
}
