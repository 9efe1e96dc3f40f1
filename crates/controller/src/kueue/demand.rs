//! What a TpuSlice will hold, written as Kueue pod sets (pure).
//!
//! One pod per TPU VM host, each requesting the host's chips of [`TPU_RESOURCE`], with the node
//! selectors a GKE TPU pod of the same shape carries (`cloud.google.com/gke-tpu-accelerator`,
//! `cloud.google.com/gke-tpu-topology`, `cloud.google.com/gke-spot`; GKE's "Plan TPUs in GKE"
//! reference tables). Kueue assigns a ResourceFlavor only where the flavor's `nodeLabels` agree
//! with those selectors, so the flavors a platform team already defines for its GKE TPU node pools
//! (one per TPU family and capacity kind) count a slice exactly as they count the same team's pods.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements},
    apimachinery::pkg::api::resource::Quantity,
};
use tpu_operator_api::accelerator::{SliceShape, TpuGeneration};

use super::{
    TPU_RESOURCE,
    workload::{PodSet, Workload, WorkloadSpec},
};

/// GKE's node label naming a TPU node's family.
pub const ACCELERATOR_LABEL: &str = "cloud.google.com/gke-tpu-accelerator";
/// GKE's node label naming a TPU node pool's topology (e.g. `2x4`).
pub const TOPOLOGY_LABEL: &str = "cloud.google.com/gke-tpu-topology";
/// GKE's node label on Spot VMs.
pub const SPOT_LABEL: &str = "cloud.google.com/gke-spot";
/// The one pod set of a slice: its TPU VM hosts.
pub const POD_SET: &str = "hosts";

/// What a slice holds while it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    pub generation: TpuGeneration,
    /// Hosts of all slices (a multislice counts every slice).
    pub hosts: u32,
    /// Chips of all slices.
    pub chips: u32,
    /// One slice's topology, where the spec or the size fixes it.
    pub topology: Option<String>,
    /// Spot capacity (and the spot tier of queued capacity).
    pub spot: bool,
}

impl Demand {
    /// The demand of a slice of `shape` (all slices) whose single-slice topology is `topology`.
    pub fn new(shape: &SliceShape, topology: Option<String>, spot: bool) -> Self {
        Self {
            generation: shape.generation,
            hosts: shape.hosts.max(1),
            chips: shape.chips,
            topology,
            spot,
        }
    }

    /// Chips each host holds (hosts of one generation hold the same number).
    pub fn chips_per_host(&self) -> u32 {
        self.chips.div_ceil(self.hosts)
    }
}

/// The GKE `gke-tpu-accelerator` value of a generation; `None` for TPU v2 and v3, which GKE does
/// not offer (their pod sets then carry no family selector and fit any flavor of the queue).
pub fn gke_accelerator(generation: TpuGeneration) -> Option<&'static str> {
    match generation {
        TpuGeneration::V2 | TpuGeneration::V3 => None,
        TpuGeneration::V4 => Some("tpu-v4-podslice"),
        TpuGeneration::V5e => Some("tpu-v5-lite-podslice"),
        TpuGeneration::V5p => Some("tpu-v5p-slice"),
        TpuGeneration::V6e => Some("tpu-v6e-slice"),
        TpuGeneration::Tpu7x => Some("tpu7x"),
    }
}

/// The single-slice topology a shape implies where the size alone fixes it (v2, v3, v5e, v6e).
pub fn fixed_topology(generation: TpuGeneration, chips_per_slice: u32) -> Option<String> {
    let (sizes, topologies) = generation.fixed_sizes()?;
    let i = sizes.iter().position(|&s| s == chips_per_slice)?;
    Some(topologies[i].to_string())
}

/// The Workload spec for `demand` in LocalQueue `queue`, at `priority` (class name and value).
pub fn workload_spec(demand: &Demand, queue: &str, priority: Option<(&str, i32)>) -> WorkloadSpec {
    WorkloadSpec {
        queue_name: queue.to_string(),
        priority_class_ref: priority.map(|(name, _)| super::follow::class_ref(name)),
        priority: priority.map_or(0, |(_, value)| value),
        pod_sets: vec![PodSet {
            name: POD_SET.into(),
            count: i32::try_from(demand.hosts).unwrap_or(i32::MAX),
            template: host_template(demand),
        }],
        active: None,
    }
}

/// Why `found` is not the Workload `desired` describes, owned by the object `owner_uid`; `None`
/// when it is. Only the fields that decide what Kueue admits are compared: the controlling
/// owner, the queue and each pod set's name, count, requests and node selector (Kueue's webhooks
/// add defaults elsewhere). Not the priority class: a relabelled object's Workload is changed in
/// place ([`super::follow`]), as Kueue's own integrations change theirs, never replaced. A tenant who can create Workloads could
/// otherwise name one after a slice, ask for one chip, and have its admission stand for eight.
pub fn mismatch(found: &Workload, desired: &WorkloadSpec, owner_uid: &str) -> Option<String> {
    let controlled = found
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid);
    if !controlled {
        return Some("it is not controlled by this object".into());
    }
    if found.spec.queue_name != desired.queue_name {
        return Some(format!(
            "it is in LocalQueue {:?}, not {:?}",
            found.spec.queue_name, desired.queue_name
        ));
    }
    let shape = |s: &WorkloadSpec| -> Vec<_> {
        s.pod_sets
            .iter()
            .map(|p| {
                let pod = p.template.spec.clone().unwrap_or_default();
                let requests: Vec<_> = pod
                    .containers
                    .iter()
                    .map(|c| {
                        c.resources
                            .clone()
                            .unwrap_or_default()
                            .requests
                            .unwrap_or_default()
                    })
                    .collect();
                (
                    p.name.clone(),
                    p.count,
                    requests,
                    pod.node_selector.unwrap_or_default(),
                )
            })
            .collect()
    };
    (shape(&found.spec) != shape(desired)).then(|| "its pod sets are not what the object holds".into())
}

/// One host as a pod: the chips it requests and the node it would need on GKE.
fn host_template(demand: &Demand) -> PodTemplateSpec {
    let chips = Quantity(demand.chips_per_host().to_string());
    let resources: BTreeMap<String, Quantity> = [(TPU_RESOURCE.to_string(), chips)].into();
    let mut selector = BTreeMap::new();
    if let Some(accelerator) = gke_accelerator(demand.generation) {
        selector.insert(ACCELERATOR_LABEL.to_string(), accelerator.to_string());
    }
    if let Some(topology) = &demand.topology {
        selector.insert(TOPOLOGY_LABEL.to_string(), topology.clone());
    }
    if demand.spot {
        selector.insert(SPOT_LABEL.to_string(), "true".to_string());
    }
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            node_selector: (!selector.is_empty()).then_some(selector),
            containers: vec![Container {
                name: "tpu-host".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(resources.clone()),
                    limits: Some(resources),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6e(chips: u32, hosts: u32) -> Demand {
        Demand {
            generation: TpuGeneration::V6e,
            hosts,
            chips,
            topology: fixed_topology(TpuGeneration::V6e, chips),
            spot: true,
        }
    }

    #[test]
    fn a_slice_is_one_pod_per_host_with_its_chips_and_gke_selectors() {
        let spec = workload_spec(&v6e(16, 4), "team-a", None);
        assert_eq!(spec.queue_name, "team-a");
        assert_eq!(spec.priority, 0, "no class is priority 0, never absent");
        assert!(spec.priority_class_ref.is_none());
        let set = &spec.pod_sets[0];
        assert_eq!((set.name.as_str(), set.count), (POD_SET, 4));
        let pod = set.template.spec.as_ref().unwrap();
        let requests = pod.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert_eq!(requests[TPU_RESOURCE], Quantity("4".into()));
        let selector = pod.node_selector.as_ref().unwrap();
        assert_eq!(selector[ACCELERATOR_LABEL], "tpu-v6e-slice");
        assert_eq!(selector[TOPOLOGY_LABEL], "4x4");
        assert_eq!(selector[SPOT_LABEL], "true");
    }

    #[test]
    fn a_priority_class_sets_both_the_reference_and_the_value() {
        let spec = workload_spec(&v6e(8, 1), "q", Some(("tpu-high", 1000)));
        assert_eq!(spec.priority, 1000);
        let class = spec.priority_class_ref.unwrap();
        assert_eq!(
            (class.kind.as_str(), class.name.as_str()),
            ("WorkloadPriorityClass", "tpu-high")
        );
    }

    #[test]
    fn a_workload_asking_for_less_or_owned_by_another_is_not_the_slices() {
        let desired = workload_spec(&v6e(8, 2), "q", None);
        let mut found = Workload::new("tpuslice-s-01234", desired.clone());
        found.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                controller: Some(true),
                uid: "uid-1".into(),
                ..Default::default()
            },
        ]);
        assert_eq!(mismatch(&found, &desired, "uid-1"), None);
        assert!(
            mismatch(&found, &desired, "uid-2")
                .unwrap()
                .contains("not controlled")
        );
        let mut smaller = found.clone();
        smaller.spec = workload_spec(&v6e(1, 1), "q", None);
        assert!(
            mismatch(&smaller, &desired, "uid-1")
                .unwrap()
                .contains("pod sets")
        );
        let mut elsewhere = found.clone();
        elsewhere.spec.queue_name = "other".into();
        assert!(
            mismatch(&elsewhere, &desired, "uid-1")
                .unwrap()
                .contains("LocalQueue")
        );
        let mut defaulted = found.clone();
        defaulted.spec.active = Some(true);
        defaulted.spec.priority = 5;
        assert_eq!(
            mismatch(&defaulted, &desired, "uid-1"),
            None,
            "Kueue's own writes are not a mismatch"
        );
        let mut relabelled = found.clone();
        relabelled.spec = workload_spec(&v6e(8, 2), "q", Some(("high", 1000)));
        assert_eq!(
            mismatch(&relabelled, &desired, "uid-1"),
            None,
            "another priority class is followed in place, not a reason to replace the Workload"
        );
    }

    #[test]
    fn generations_gke_does_not_offer_carry_no_family_selector() {
        let demand = Demand {
            generation: TpuGeneration::V3,
            hosts: 1,
            chips: 4,
            topology: None,
            spot: false,
        };
        let spec = workload_spec(&demand, "q", None);
        assert!(
            spec.pod_sets[0]
                .template
                .spec
                .as_ref()
                .unwrap()
                .node_selector
                .is_none()
        );
        assert_eq!(demand.chips_per_host(), 4);
    }
}
