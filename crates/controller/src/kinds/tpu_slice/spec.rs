//! `TpuSlice.spec` → TPU API request mapping (`Node`, `QueuedResource`) and the desired values of
//! the fields the controller keeps in sync (labels, metadata, tags).
//!
//! Does not touch Kubernetes or Google Cloud.

use std::collections::BTreeMap;

use tpu_operator_api::{
    accelerator::TpuGeneration,
    naming::{self, ObjectIdentity},
    tpu_slice::{
        CapacityMode, DONE_URI_METADATA, MANAGED_METADATA_KEY, MEGASCALE_COORDINATOR_METADATA,
        MEGASCALE_SLICE_ID_METADATA, STARTUP_SCRIPT_METADATA, TpuSliceSpec,
    },
};
use tpu_operator_gcp::tpu_v2::model::{
    AcceleratorConfig, NetworkConfig, Node, SchedulingConfig, ServiceAccount, accelerator_config,
};

mod queued;
mod script;

pub use super::request::{Checked, Create, CreateAt, Desired};
pub use queued::queued_resource;
pub use script::{LogLabels, MEGASCALE_PORT, workload_script, workload_script_for};

/// OAuth scope used when the spec names a service account without scopes.
pub(super) const DEFAULT_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The desired labels / metadata / tags of multislice node `slice`: the common ones plus its
/// slice id and the coordinator's address, which its startup script waits for (`None`: not
/// now, while a slice is replaced; a script that has it stops its container).
pub fn slice_desired(desired: &Desired, slice: usize, coordinator: Option<&str>) -> Desired {
    let mut d = desired.clone();
    d.metadata
        .insert(MEGASCALE_SLICE_ID_METADATA.into(), slice.to_string());
    if let Some(coordinator) = coordinator {
        d.metadata
            .insert(MEGASCALE_COORDINATOR_METADATA.into(), coordinator.into());
    }
    d.metadata.remove(MANAGED_METADATA_KEY);
    let managed = d.metadata.keys().cloned().collect::<Vec<_>>().join(",");
    d.metadata.insert(MANAGED_METADATA_KEY.into(), managed);
    d
}

/// Labels, metadata and tags the node must carry; `logs` labels the workload's log entries.
pub fn desired(
    spec: &TpuSliceSpec,
    identity: &ObjectIdentity,
    cluster_id: &str,
    done_uri: Option<&str>,
    logs: &LogLabels,
) -> Desired {
    let mut metadata = spec.metadata.clone();
    let script = match (&spec.startup_script, &spec.workload) {
        (Some(script), _) => Some(script.clone()),
        (None, Some(workload)) => Some(workload_script_for(workload, spec.slice_count(), logs)),
        (None, None) => None,
    };
    if let Some(script) = script {
        metadata.insert(STARTUP_SCRIPT_METADATA.into(), script);
    }
    if let Some(uri) = done_uri {
        metadata.insert(DONE_URI_METADATA.into(), uri.into());
    }
    metadata.remove(MANAGED_METADATA_KEY);
    let managed = metadata.keys().cloned().collect::<Vec<_>>().join(",");
    metadata.insert(MANAGED_METADATA_KEY.into(), managed);
    Desired {
        labels: naming::object_labels(&spec.labels, identity, cluster_id),
        metadata,
        tags: spec
            .network_config
            .as_ref()
            .map(|n| n.tags.clone())
            .unwrap_or_default(),
    }
}

/// The metadata keys the operator manages on a node: those listed under
/// [`MANAGED_METADATA_KEY`] in `current` (what an earlier pass set) and the list key itself.
fn managed_keys(current: &std::collections::HashMap<String, String>) -> Vec<&str> {
    let mut keys: Vec<&str> = current
        .get(MANAGED_METADATA_KEY)
        .map(|v| v.split(',').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    keys.push(MANAGED_METADATA_KEY);
    keys
}

/// Whether the node's metadata differs from the desired metadata in a key the operator manages
/// (a desired key, or one an earlier pass set and the spec no longer has). Keys others added are
/// not looked at.
pub fn metadata_drift(desired: &Desired, current: &std::collections::HashMap<String, String>) -> bool {
    desired
        .metadata
        .keys()
        .map(String::as_str)
        .chain(managed_keys(current))
        .any(|k| current.get(k) != desired.metadata.get(k))
}

/// The whole metadata map to send with `nodes.patch?updateMask=metadata` (a map in an update mask
/// is replaced whole): the node's current metadata with only the managed keys changed — desired
/// keys set, keys an earlier pass set and the spec dropped removed, everything else kept.
///
/// Someone writing between our read and this patch can still lose their write: Cloud TPU v2 nodes
/// have no fingerprint or etag to make the patch conditional.
pub fn patched_metadata(
    desired: &Desired,
    current: &std::collections::HashMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = current.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for k in managed_keys(current) {
        out.remove(k);
    }
    out.extend(desired.metadata.clone());
    out
}

/// The `Node` to create (directly, or inside a queued resource's node spec).
pub fn node(spec: &TpuSliceSpec, desired: &Desired, identity: &ObjectIdentity) -> Node {
    let mut node = Node::new()
        .set_description(format!(
            "Managed by tpu-operator for TpuSlice {}/{}",
            identity.namespace, identity.name
        ))
        .set_runtime_version(spec.runtime_version.clone())
        .set_labels(desired.labels.clone())
        .set_metadata(desired.metadata.clone())
        .set_tags(desired.tags.clone());
    node = match (&spec.accelerator_type, &spec.accelerator_config) {
        (Some(t), _) => node.set_accelerator_type(t.clone()),
        (None, Some(c)) => node.set_accelerator_config(
            AcceleratorConfig::new()
                .set_type(generation_type(c.type_))
                .set_topology(c.topology.clone()),
        ),
        (None, None) => node,
    };
    if let Some(n) = &spec.network_config {
        node = node.set_network_config(
            NetworkConfig::new()
                .set_network(n.network.clone().unwrap_or_default())
                .set_subnetwork(n.subnetwork.clone().unwrap_or_default())
                .set_enable_external_ips(n.enable_external_ips),
        );
    }
    if let Some(sa) = &spec.service_account {
        let scopes = if sa.scopes.is_empty() {
            vec![DEFAULT_SCOPE.to_string()]
        } else {
            sa.scopes.clone()
        };
        node = node.set_service_account(
            ServiceAccount::new()
                .set_email(sa.email.clone())
                .set_scope(scopes),
        );
    }
    match spec.capacity_mode() {
        CapacityMode::Spot => node.set_scheduling_config(SchedulingConfig::new().set_spot(true)),
        CapacityMode::Reserved => node.set_scheduling_config(SchedulingConfig::new().set_reserved(true)),
        // Queued capacity: the tier lives on the queued resource, not on the node. Flex-start is
        // refused at admission on the TPU API.
        CapacityMode::OnDemand | CapacityMode::Queued | CapacityMode::FlexStart => node,
    }
}

fn generation_type(g: TpuGeneration) -> accelerator_config::Type {
    match g {
        TpuGeneration::V2 => accelerator_config::Type::V2,
        TpuGeneration::V3 => accelerator_config::Type::V3,
        TpuGeneration::V4 => accelerator_config::Type::V4,
        TpuGeneration::V5e => accelerator_config::Type::V5LitePod,
        TpuGeneration::V5p => accelerator_config::Type::V5P,
        TpuGeneration::V6e => accelerator_config::Type::V6E,
        // Refused at admission and by `shape`: TPU7x is provisioned through Compute Engine only.
        TpuGeneration::Tpu7x => accelerator_config::Type::Unspecified,
    }
}

/// The update mask of the fields that differ (empty when in sync). Labels the TPU service adds
/// itself (`goog-*`) are not ours to remove.
pub fn drift_mask(desired: &Desired, n: &Node) -> Vec<&'static str> {
    let mut mask = Vec::new();
    let labels: BTreeMap<_, _> = n
        .labels
        .iter()
        .filter(|(k, _)| !k.starts_with("goog-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if labels != desired.labels {
        mask.push("labels");
    }
    // Only the keys the operator set: `ssh-keys` and anything else added by others stay.
    if metadata_drift(desired, &n.metadata) {
        mask.push("metadata");
    }
    if n.tags != desired.tags {
        mask.push("tags");
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::{
        ContainerSpec, EnvVar,
        tpu_slice::{Capacity, Empty},
    };

    pub(super) fn spec() -> TpuSliceSpec {
        TpuSliceSpec {
            zone: "us-east5-b".into(),
            accelerator_type: Some("v6e-8".into()),
            runtime_version: "v2-alpha-tpuv6e".into(),
            labels: BTreeMap::from([("team".into(), "ml".into())]),
            ..Default::default()
        }
    }

    pub(super) fn ident() -> ObjectIdentity {
        ObjectIdentity::new("default", "s", "uid-1")
    }

    #[test]
    fn node_carries_identity_labels_script_and_spot() {
        let mut s = spec();
        s.capacity = Some(Capacity {
            spot: Some(Empty {}),
            ..Default::default()
        });
        s.workload = Some(ContainerSpec {
            image: "us-docker.pkg.dev/p/r/t:1".into(),
            command: vec!["python".into(), "train.py".into()],
            args: vec!["--msg=it's".into()],
            env: vec![EnvVar {
                name: "A".into(),
                value: "b c".into(),
            }],
        });
        let d = desired(&s, &ident(), "c1", Some("gs://b/m/"), &LogLabels::default());
        let n = node(&s, &d, &ident());
        assert_eq!(n.labels["managed-by"], "tpu-operator");
        assert_eq!(n.labels["team"], "ml");
        assert_eq!(n.labels["tpu-operator-cluster"], "c1");
        assert!(n.scheduling_config.as_ref().unwrap().spot);
        assert_eq!(n.metadata[DONE_URI_METADATA], "gs://b/m/");
        // One word per continuation line in the script; flattened for the assertions.
        let script = &n.metadata[STARTUP_SCRIPT_METADATA].replace(" \\\n    ", " ");
        assert!(
            script.contains("--entrypoint 'python' 'us-docker.pkg.dev/p/r/t:1' 'train.py'"),
            "{script}"
        );
        assert!(script.contains(r"'--msg=it'\''s'"), "{script}");
        assert!(script.contains("-e 'A=b c'"), "{script}");
        assert!(
            script.contains("gcloud auth configure-docker 'us-docker.pkg.dev'"),
            "{script}"
        );
        assert!(s.preemptible());
    }

    /// `gcloud compute tpus tpu-vm ssh` adds `ssh-keys` to the node's metadata: a drift
    /// correction must keep it, change only the managed keys, and drop a managed key the spec no
    /// longer has.
    #[test]
    fn metadata_drift_touches_only_managed_keys() {
        let mut s = spec();
        s.metadata = BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]);
        let before = desired(&s, &ident(), "c1", None, &LogLabels::default());
        assert_eq!(before.metadata[MANAGED_METADATA_KEY], "a,b");
        let mut node: std::collections::HashMap<String, String> =
            before.metadata.clone().into_iter().collect();
        assert!(!metadata_drift(&before, &node));
        node.insert("ssh-keys".into(), "alice:ssh-ed25519 AAAA alice".into());
        assert!(!metadata_drift(&before, &node), "a key others added is no drift");

        s.metadata = BTreeMap::from([("a".into(), "changed".into())]);
        let after = desired(&s, &ident(), "c1", None, &LogLabels::default());
        assert!(metadata_drift(&after, &node));
        let patched = patched_metadata(&after, &node);
        assert_eq!(patched["a"], "changed");
        assert!(
            !patched.contains_key("b"),
            "a managed key the spec dropped is removed"
        );
        assert_eq!(patched["ssh-keys"], "alice:ssh-ed25519 AAAA alice");
        assert_eq!(patched[MANAGED_METADATA_KEY], "a");
        let patched: std::collections::HashMap<_, _> = patched.into_iter().collect();
        assert!(!metadata_drift(&after, &patched));

        // A node from before the managed list: only desired keys are compared and set.
        let legacy = std::collections::HashMap::from([
            ("a".to_string(), "changed".to_string()),
            ("ssh-keys".to_string(), "k".to_string()),
        ]);
        assert!(metadata_drift(&after, &legacy), "the list key itself is missing");
        assert_eq!(patched_metadata(&after, &legacy)["ssh-keys"], "k");
    }
}
