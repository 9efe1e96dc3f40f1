//! Accelerator types, topologies, host counts and runtime versions the TPU emulator knows.
//!
//! Naming follows Cloud TPU: v2/v3/v4/v5p types count TensorCores (`v5p-8` = 4 chips, one host),
//! v5e (`v5litepod-N`) and v6e (`v6e-N`) count chips.

use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// Prefix in `acceleratorType` (`v5p`).
    pub prefix: &'static str,
    /// `AcceleratorConfig.Type` enum name.
    pub config_type: &'static str,
    /// True when the size suffix counts cores (2 per chip), false when it counts chips.
    pub counts_cores: bool,
    /// 3D torus (`2x2x1`) or 2D (`2x4`).
    pub three_d: bool,
    /// Chips per host VM.
    pub chips_per_host: u32,
    /// Sizes offered (suffix values).
    pub sizes: &'static [u32],
}

pub const FAMILIES: [Family; 6] = [
    Family {
        prefix: "v2",
        config_type: "V2",
        counts_cores: true,
        three_d: false,
        chips_per_host: 4,
        sizes: &[8, 32, 128, 256, 512],
    },
    Family {
        prefix: "v3",
        config_type: "V3",
        counts_cores: true,
        three_d: false,
        chips_per_host: 4,
        sizes: &[8, 32, 64, 128, 256, 512, 1024, 2048],
    },
    Family {
        prefix: "v4",
        config_type: "V4",
        counts_cores: true,
        three_d: true,
        chips_per_host: 4,
        sizes: &[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    },
    Family {
        prefix: "v5litepod",
        config_type: "V5LITE_POD",
        counts_cores: false,
        three_d: false,
        chips_per_host: 4,
        sizes: &[1, 4, 8, 16, 32, 64, 128, 256],
    },
    Family {
        prefix: "v5p",
        config_type: "V5P",
        counts_cores: true,
        three_d: true,
        chips_per_host: 4,
        sizes: &[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288],
    },
    Family {
        prefix: "v6e",
        config_type: "V6E",
        counts_cores: false,
        three_d: false,
        chips_per_host: 4,
        sizes: &[1, 4, 8, 16, 32, 64, 128, 256],
    },
];

pub const RUNTIME_VERSIONS: [&str; 10] = [
    "tpu-ubuntu2204-base",
    "tpu-vm-base",
    "tpu-vm-cos-stable",
    "tpu-vm-tf-2.16.1-pjrt",
    "tpu-vm-tf-2.18.0-pjrt",
    "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite",
    "v2-alpha-tpuv6e",
    "v2-tpuv5-litepod",
    "tpu-vm-v4-base",
];

/// A resolved accelerator: type string, config, and host count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accel {
    pub accelerator_type: String,
    pub config_type: &'static str,
    pub topology: String,
    pub chips: u32,
    pub hosts: u32,
}

fn topology(f: &Family, chips: u32) -> String {
    // Grow the smallest dimension first, from the family's base shape.
    let mut dims: Vec<u32> = if f.three_d { vec![2, 2, 1] } else { vec![1, 1] };
    if !f.three_d && chips >= 4 {
        dims = vec![2, 2];
    }
    if chips == 1 {
        return "1x1".into();
    }
    while dims.iter().product::<u32>() < chips {
        let i = (0..dims.len()).rev().min_by_key(|&i| dims[i]).unwrap_or(0);
        dims[i] *= 2;
        dims.sort_unstable();
    }
    if f.three_d && dims == [1, 2, 2] {
        return "2x2x1".into();
    }
    dims.iter().map(u32::to_string).collect::<Vec<_>>().join("x")
}

fn build(f: &Family, size: u32) -> Accel {
    let chips = if f.counts_cores { (size / 2).max(1) } else { size };
    let hosts = if !f.counts_cores && chips <= 8 {
        1
    } else {
        chips.div_ceil(f.chips_per_host)
    };
    Accel {
        accelerator_type: format!("{}-{}", f.prefix, size),
        config_type: f.config_type,
        topology: topology(f, chips),
        chips,
        hosts,
    }
}

/// Resolves `v5p-8`-style accelerator types.
pub fn by_type(accelerator_type: &str) -> Option<Accel> {
    let (prefix, size) = accelerator_type.rsplit_once('-')?;
    let size: u32 = size.parse().ok()?;
    let f = FAMILIES.iter().find(|f| f.prefix == prefix)?;
    f.sizes.contains(&size).then(|| build(f, size))
}

/// Resolves an `AcceleratorConfig` (`{type: V5P, topology: 2x2x1}`).
pub fn by_config(config_type: &str, topo: &str) -> Option<Accel> {
    let f = FAMILIES.iter().find(|f| f.config_type == config_type)?;
    let dims: Vec<u32> = topo.split('x').map(|d| d.parse().ok()).collect::<Option<_>>()?;
    if dims.len() != if f.three_d { 3 } else { 2 } || dims.contains(&0) {
        return None;
    }
    let chips: u32 = dims.iter().product();
    let size = if f.counts_cores { chips * 2 } else { chips };
    let mut a = build(f, size);
    a.topology = topo.to_string();
    Some(a)
}

/// `acceleratorTypes` entries for a zone.
pub fn accelerator_types(parent: &str) -> Vec<Value> {
    FAMILIES
        .iter()
        .flat_map(|f| f.sizes.iter().map(move |s| build(f, *s)))
        .map(|a| {
            json!({
                "name": format!("{parent}/acceleratorTypes/{}", a.accelerator_type),
                "type": a.accelerator_type,
                "acceleratorConfigs": [{"type": a.config_type, "topology": a.topology}],
            })
        })
        .collect()
}

pub fn runtime_versions(parent: &str) -> Vec<Value> {
    RUNTIME_VERSIONS
        .iter()
        .map(|v| json!({"name": format!("{parent}/runtimeVersions/{v}"), "version": v}))
        .collect()
}

/// Zones offering Cloud TPUs (served by `locations.list`).
pub const ZONES: [&str; 10] = [
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central2-b",
    "us-east1-d",
    "us-east5-a",
    "us-south1-a",
    "us-west4-a",
    "europe-west4-a",
    "asia-northeast1-b",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_types_and_configs() {
        let a = by_type("v5p-8").unwrap();
        assert_eq!((a.config_type, a.topology.as_str(), a.hosts), ("V5P", "2x2x1", 1));
        assert_eq!(by_type("v5p-16").unwrap().topology, "2x2x2");
        assert_eq!(by_type("v5p-16").unwrap().hosts, 2);
        assert_eq!(by_type("v5litepod-8").unwrap().topology, "2x4");
        assert_eq!(by_type("v5litepod-8").unwrap().hosts, 1);
        assert_eq!(by_type("v6e-16").unwrap().hosts, 4);
        assert_eq!(by_type("v6e-1").unwrap().topology, "1x1");
        assert_eq!(by_type("v4-8").unwrap().topology, "2x2x1");
        assert!(by_type("v5p-7").is_none());
        assert_eq!(by_config("V5P", "2x2x1").unwrap().accelerator_type, "v5p-8");
        assert_eq!(by_config("V6E", "2x4").unwrap().accelerator_type, "v6e-8");
        assert!(by_config("V6E", "2x2x1").is_none());
    }
}
