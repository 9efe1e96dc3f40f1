//! `TpuSlice.spec` → Compute Engine request mapping (`provisioner: ComputeEngine`): machine type,
//! hosts and topology from the slice's shape, scheduling from its capacity, and the VM settings
//! both backends share (labels, metadata, network, service account).
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    accelerator::{ComputeMachine, SliceShape},
    duration::parse_duration,
    naming::{self, ObjectIdentity},
    tpu_slice::{CapacityMode, TpuSliceSpec},
};
use tpu_operator_gcp::compute::convert::{Provisioning, SliceRequest};

use super::spec::{DEFAULT_SCOPE, Desired};

/// Flex-start run durations Compute Engine accepts: 10 minutes to 7 days
/// (docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig).
const FLEX_RUN_MIN_SECS: u64 = 10 * 60;
const FLEX_RUN_MAX_SECS: u64 = 7 * 24 * 3600;

/// Boot disk size when the spec gives none.
const DEFAULT_BOOT_DISK_GB: i64 = 100;

/// The Compute Engine machines of `shape`, or why the spec cannot be provisioned there, naming
/// the field.
pub fn check(spec: &TpuSliceSpec, shape: &SliceShape) -> Result<ComputeMachine, String> {
    if spec.compute_engine.is_none() {
        return Err(
            "spec.computeEngine: required with provisioner: ComputeEngine (it names the VM image)".into(),
        );
    }
    if spec.capacity_mode() == CapacityMode::Queued {
        return Err(
            "spec.capacity.queued: not available with provisioner: ComputeEngine; use capacity.flexStart"
                .into(),
        );
    }
    flex_run_seconds(spec)?;
    let topology = spec.accelerator_config.as_ref().map(|c| c.topology.as_str());
    shape
        .compute_engine(topology)
        .map_err(|e| format!("spec.provisioner: {e}"))
}

/// `capacity.flexStart.runDuration` in seconds, checked against Compute Engine's range.
pub fn flex_run_seconds(spec: &TpuSliceSpec) -> Result<Option<i64>, String> {
    let Some(flex) = spec.capacity.as_ref().and_then(|c| c.flex_start.as_ref()) else {
        return Ok(None);
    };
    let d = parse_duration(&flex.run_duration)
        .map_err(|e| format!("spec.capacity.flexStart.runDuration: {e}"))?
        .as_secs();
    if !(FLEX_RUN_MIN_SECS..=FLEX_RUN_MAX_SECS).contains(&d) {
        return Err(format!(
            "spec.capacity.flexStart.runDuration: {} is outside the 10m to 7d Compute Engine accepts",
            flex.run_duration
        ));
    }
    Ok(Some(d as i64))
}

/// Whether the Compute Engine slice is a managed instance group (several hosts, or flex-start)
/// rather than one instance; only groups have a template and policy to release.
pub fn uses_group(spec: &TpuSliceSpec) -> bool {
    spec.capacity_mode() == CapacityMode::FlexStart || spec.slice_shape().is_ok_and(|s| s.hosts > 1)
}

/// The template and workload policy of every incarnation are named by the slice's first id.
pub fn shared_id(identity: &ObjectIdentity) -> String {
    naming::tpu_node_id(identity, 0)
}

/// The full request for the incarnation `id`.
pub fn request(
    spec: &TpuSliceSpec,
    shape: &SliceShape,
    desired: &Desired,
    identity: &ObjectIdentity,
    project: &str,
    id: &str,
) -> Result<SliceRequest, String> {
    let machine = check(spec, shape)?;
    let options = spec.compute_engine.clone().unwrap_or_default();
    let provisioning = match spec.capacity_mode() {
        CapacityMode::Spot => Provisioning::Spot,
        CapacityMode::Reserved => Provisioning::Reservation(
            spec.capacity
                .as_ref()
                .and_then(|c| c.reserved.as_ref())
                .map(|r| r.reservation_name.clone())
                .unwrap_or_default(),
        ),
        CapacityMode::FlexStart => Provisioning::FlexStart {
            run_seconds: flex_run_seconds(spec)?.unwrap_or_default(),
        },
        CapacityMode::OnDemand | CapacityMode::Queued => Provisioning::Standard,
    };
    let network = spec.network_config.clone().unwrap_or_default();
    Ok(SliceRequest {
        project: project.to_string(),
        zone: spec.zone.clone(),
        id: id.to_string(),
        machine_type: machine.machine_type.to_string(),
        hosts: machine.hosts,
        topology: machine.topology,
        accelerator_type: shape.accelerator_type(),
        image: options.image,
        boot_disk_gb: options.boot_disk_size_gb.unwrap_or(DEFAULT_BOOT_DISK_GB),
        provisioning,
        labels: desired.labels.clone(),
        metadata: desired.metadata.clone(),
        network: network.network,
        subnetwork: network.subnetwork,
        external_ips: network.enable_external_ips,
        tags: desired.tags.clone(),
        service_account: spec.service_account.as_ref().map(|sa| {
            let scopes = if sa.scopes.is_empty() {
                vec![DEFAULT_SCOPE.to_string()]
            } else {
                sa.scopes.clone()
            };
            (sa.email.clone(), scopes)
        }),
        description: format!(
            "tpu-operator TpuSlice {}/{} (uid {})",
            identity.namespace, identity.name, identity.uid
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::tpu_slice::{Capacity, ComputeEngineOptions, FlexStartCapacity, Provisioner};

    fn spec(accelerator: &str, capacity: Capacity) -> TpuSliceSpec {
        TpuSliceSpec {
            zone: "us-east5-b".into(),
            accelerator_type: Some(accelerator.into()),
            provisioner: Provisioner::ComputeEngine,
            compute_engine: Some(ComputeEngineOptions {
                image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts".into(),
                boot_disk_size_gb: None,
            }),
            capacity: Some(capacity),
            ..Default::default()
        }
    }

    fn flex(d: &str) -> Capacity {
        Capacity {
            flex_start: Some(FlexStartCapacity {
                run_duration: d.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn maps_shape_and_capacity() {
        let identity = ObjectIdentity::new("team-a", "train", "u1");
        let s = spec("v6e-16", flex("4h"));
        let shape = crate::kinds::tpu_slice::backend::shape(&s).unwrap();
        let desired = super::super::spec::desired(&s, &identity, "c1", None, &Default::default());
        let r = request(&s, &shape, &desired, &identity, "p", "n-1").unwrap();
        assert_eq!(
            (r.machine_type.as_str(), r.hosts, r.topology.as_str()),
            ("ct6e-standard-4t", 4, "4x4")
        );
        assert_eq!(
            r.provisioning,
            Provisioning::FlexStart {
                run_seconds: 4 * 3600
            }
        );
        assert_eq!(r.accelerator_type, "v6e-16");
        assert_eq!(r.labels, desired.labels);
    }

    #[test]
    fn refuses_what_compute_engine_would_naming_the_field() {
        for (s, field) in [
            (spec("v6e-8", flex("5m")), "spec.capacity.flexStart.runDuration"),
            (spec("v6e-8", flex("8d")), "spec.capacity.flexStart.runDuration"),
            (spec("v4-8", Capacity::default()), "spec.provisioner"),
            (
                TpuSliceSpec {
                    compute_engine: None,
                    ..spec("v6e-8", Capacity::default())
                },
                "spec.computeEngine",
            ),
        ] {
            let err = crate::kinds::tpu_slice::backend::shape(&s).unwrap_err();
            assert!(err.starts_with(field), "{err}");
        }
    }
}
