//! The TPU machine types Compute Engine offers for TPU VMs, and accelerator topologies.
//!
//! Sources: "TPU machine types" (https://docs.cloud.google.com/compute/docs/tpus/tpu-machines)
//! and the per-version pages https://docs.cloud.google.com/tpu/docs/v6e (`ct6e-standard-1t`,
//! `-4t`, `-8t`; the 8-chip VM is for single-host slices only),
//! https://docs.cloud.google.com/tpu/docs/v5p (`ct5p-hightpu-4t`, 4 chips per host, 3D topology
//! `2x2x1` per host) and https://docs.cloud.google.com/tpu/docs/tpu7x (`tpu7x-standard-4t`).
//! Chip counts are the `-Nt` suffix.

/// One TPU machine type.
#[derive(Debug, PartialEq, Eq)]
pub struct Machine {
    pub name: &'static str,
    /// TPU chips per VM (host).
    pub chips: u64,
    /// The TPU family the `Stockout { accelerator }` fault names (`v6e`, `v5p`, `tpu7x`).
    pub family: &'static str,
    /// Cannot be part of a multi-host slice.
    pub single_host_only: bool,
}

pub const MACHINES: &[Machine] = &[
    Machine {
        name: "ct6e-standard-1t",
        chips: 1,
        family: "v6e",
        single_host_only: false,
    },
    Machine {
        name: "ct6e-standard-4t",
        chips: 4,
        family: "v6e",
        single_host_only: false,
    },
    Machine {
        name: "ct6e-standard-8t",
        chips: 8,
        family: "v6e",
        single_host_only: true,
    },
    Machine {
        name: "ct5p-hightpu-4t",
        chips: 4,
        family: "v5p",
        single_host_only: false,
    },
    Machine {
        name: "tpu7x-standard-4t",
        chips: 4,
        family: "tpu7x",
        single_host_only: false,
    },
];

pub fn find(name: &str) -> Option<&'static Machine> {
    MACHINES.iter().find(|m| m.name == name)
}

/// The machine type name in a zonal URL / partial URL (`zones/{z}/machineTypes/{t}`): (zone, name).
pub fn parse_url(url: &str) -> Option<(String, String)> {
    let rel = super::rel(url);
    let parts: Vec<&str> = rel.split('/').collect();
    let n = parts.len();
    if n >= 4 && parts[n - 4] == "zones" && parts[n - 2] == "machineTypes" {
        return Some((parts[n - 3].to_string(), parts[n - 1].to_string()));
    }
    None
}

/// Chips in an accelerator topology (`2x4` -> 8, `2x2x1` -> 4); None when malformed.
pub fn topology_chips(t: &str) -> Option<u64> {
    let dims: Vec<u64> = t
        .split('x')
        .map(|d| d.parse::<u64>().ok().filter(|n| *n > 0))
        .collect::<Option<_>>()?;
    (2..=3).contains(&dims.len()).then(|| dims.iter().product())
}

/// `pattern` (a fault's `accelerator`) names this machine type or its TPU family.
pub fn matches(pattern: &str, m: &Machine) -> bool {
    pattern == m.name || pattern == m.family
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_and_urls() {
        assert_eq!(topology_chips("2x4"), Some(8));
        assert_eq!(topology_chips("2x2x2"), Some(8));
        assert_eq!(topology_chips("8"), None);
        assert_eq!(topology_chips("2x0"), None);
        assert_eq!(
            parse_url(
                "https://www.googleapis.com/compute/v1/projects/p/zones/z-a/machineTypes/ct6e-standard-4t"
            ),
            Some(("z-a".into(), "ct6e-standard-4t".into()))
        );
        assert_eq!(
            parse_url("zones/z-a/machineTypes/x"),
            Some(("z-a".into(), "x".into()))
        );
        assert_eq!(parse_url("ct6e-standard-4t"), None);
        assert!(matches("v6e", find("ct6e-standard-8t").unwrap()));
    }
}
