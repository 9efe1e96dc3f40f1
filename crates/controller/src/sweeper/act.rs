//! Carrying out an orphan's step: the delete or cancel call of its kind.

use tpu_operator_gcp::{GcpError, Place, ignore_not_found};

use super::{Orphan, Release, ResourceKind, Step, plan};
use crate::reconcile::context::Context;

/// Carries out an orphan's step. `Ok(Some(step))` when a call was made. Deleting a group adds
/// its template and policy to `releases`.
pub(super) async fn act(
    ctx: &Context,
    o: &Orphan,
    releases: &mut Vec<Release>,
) -> Result<Option<Step>, GcpError> {
    let gcp = &ctx.gcp;
    match (&o.step, o.kind) {
        (Step::Report, _) => return Ok(None),
        (Step::Delete, ResourceKind::TpuNode) => {
            ignore_not_found(gcp.tpu.delete_node(&o.name).await)?;
        }
        (Step::Delete, ResourceKind::QueuedResource) => {
            ignore_not_found(gcp.tpu.delete_queued_resource(&o.name, true).await)?;
        }
        (Step::Delete, ResourceKind::DataprocBatch) => {
            ignore_not_found(gcp.dataproc.delete_batch(&o.name).await)?;
        }
        (Step::Delete, ResourceKind::VertexCustomJob) => {
            ignore_not_found(gcp.vertex.delete_custom_job(&o.name).await)?;
        }
        (Step::Delete, ResourceKind::ComputeInstance) => {
            let Some((project, zone, name)) = plan::parse_zonal(&o.name, "instances") else {
                return Ok(None);
            };
            let place = Place::new(project, zone);
            ignore_not_found(gcp.compute.delete_instance(&place, name).await)?;
        }
        (Step::Delete, ResourceKind::ComputeInstanceGroup) => {
            if !delete_group(ctx, o, releases).await? {
                return Ok(None);
            }
        }
        (Step::Cancel(Some(op)), ResourceKind::DataprocBatch) => {
            ignore_not_found(gcp.dataproc.cancel_operation(op).await)?;
        }
        (Step::Cancel(_), ResourceKind::VertexCustomJob) => {
            ignore_not_found(gcp.vertex.cancel_custom_job(&o.name).await)?;
        }
        (Step::Cancel(_), _) => return Ok(None),
    }
    Ok(Some(o.step.clone()))
}

/// Deletes an orphaned managed instance group, first reading from it the template and policy to
/// release once it is gone. `false` when the name is not a group's (no call made).
async fn delete_group(ctx: &Context, o: &Orphan, releases: &mut Vec<Release>) -> Result<bool, GcpError> {
    let gcp = &ctx.gcp;
    let Some((project, zone, name)) = plan::parse_zonal(&o.name, "instanceGroupManagers") else {
        return Ok(false);
    };
    let place = Place::new(project, zone);
    // The template (and policy) are named only by the group: read it before the group
    // goes. Already gone: an earlier sweep (or the finalizer) read it.
    match gcp.compute.get_instance_group_manager(&place, name).await {
        Ok(group) => match plan::release_of(
            &o.name,
            group.description.as_deref(),
            group.instance_template.as_deref(),
            &o.owner_uid,
        ) {
            Some(release) => releases.push(release),
            None => tracing::warn!(
                group = %o.name, template = ?group.instance_template, description = ?group.description,
                "orphaned group's template is not provably its owner's: deleting the group, leaving the template and policy"
            ),
        },
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    ignore_not_found(gcp.compute.delete_instance_group_manager(&place, name).await)?;
    Ok(true)
}
