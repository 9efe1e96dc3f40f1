//! Starting a slice's announced maintenance early on Compute Engine: `instances.performMaintenance`
//! of each VM of the slice whose maintenance is pending and may be moved (`canReschedule`).
//!
//! A group's hosts are started together, in one call of [`ComputeSlices::perform_maintenance`]:
//! a maintenance of any host stops the whole slice's run, so hosts maintained one after the
//! other would stop it once per host. A VM already under maintenance (started by an earlier
//! call, or by Google) is never asked again, so a call repeated after a crash starts only what
//! the first one did not reach.

use google_cloud_compute_v1::model::{Instance, upcoming_maintenance::MaintenanceStatus};
use google_cloud_longrunning::model::Operation;

use super::{ComputeSlices, zonal};
use crate::{
    compute::{
        Place,
        convert::{self, Layout},
    },
    error::{ErrorKind, GcpError, Result, Service},
};

/// Whether `instance`'s maintenance is announced, not under way, and may be started now.
fn reschedulable(instance: &Instance) -> bool {
    let notice = instance
        .resource_status
        .as_ref()
        .and_then(|s| s.upcoming_maintenance.as_ref());
    notice.is_some_and(|m| {
        m.can_reschedule == Some(true) && m.maintenance_status == Some(MaintenanceStatus::Pending)
    })
}

impl ComputeSlices {
    /// The VMs of slice `name` (`projects/{p}/locations/{zone}/nodes/{id}`), as read now: its
    /// instance, or its group's members in the group's order. `method` names the caller's call
    /// in an error.
    pub(super) async fn vms(&self, name: &str, method: &'static str) -> Result<(Place, Vec<Instance>)> {
        let Some((project, zone, id)) = convert::parse_tpu_name(name, "nodes") else {
            let why = format!("{name} is not a node name");
            let err = GcpError::new(ErrorKind::InvalidArgument, Service::Compute, method, name, why);
            return Err(err);
        };
        let zone = Place::new(project, zone);
        if self.layout(id) != Some(Layout::Group) {
            match self.api.get_instance(&zone, id).await {
                Ok(instance) => return Ok((zone, vec![instance])),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let members = self.api.list_managed_instances(&zone, id).await?;
        let mut vms = Vec::new();
        for url in members.into_iter().filter_map(|m| m.instance) {
            match self.api.get_instance(&zone, convert::short_name(&url)).await {
                Err(e) if e.is_not_found() => continue,
                other => vms.push(other?),
            }
        }
        Ok((zone, vms))
    }

    /// Starts the pending, reschedulable maintenance of every VM of slice `name` that has one:
    /// the first started operation (each is done when its VM's maintenance is over), or `None`
    /// when no VM had one to start.
    pub async fn perform_maintenance(&self, name: &str) -> Result<Option<Operation>> {
        let (zone, vms) = self.vms(name, "instances.performMaintenance").await?;
        let mut first = None;
        for vm in vms.iter().filter(|vm| reschedulable(vm)) {
            let vm = vm.name.as_deref().unwrap_or_default();
            let op = self.api.perform_instance_maintenance(&zone, vm).await?;
            first.get_or_insert(zonal(&zone, &op));
        }
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pending_reschedulable_notice_is_started() {
        let vm = |notice: serde_json::Value| -> Instance {
            serde_json::from_value(
                serde_json::json!({"name": "vm", "resourceStatus": {"upcomingMaintenance": notice}}),
            )
            .unwrap()
        };
        assert!(reschedulable(&vm(
            serde_json::json!({"canReschedule": true, "maintenanceStatus": "PENDING"})
        )));
        assert!(!reschedulable(&vm(
            serde_json::json!({"canReschedule": true, "maintenanceStatus": "ONGOING"})
        )));
        assert!(!reschedulable(&vm(
            serde_json::json!({"canReschedule": false, "maintenanceStatus": "PENDING"})
        )));
        assert!(!reschedulable(&Instance::new().set_name("vm")));
    }
}
