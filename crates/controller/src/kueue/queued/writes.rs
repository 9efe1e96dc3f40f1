//! The Workload writes a plan asks for ([`Write`]) and the release of a deleted object's quota:
//! the Kubernetes side of [`super::observe`]'s reading, the only places the operator creates,
//! releases or deletes a Workload.

// `ReconcileError` (shared, crate::runtime::error) carries a `GcpError` inline; boxing it is a
// crate-wide decision, not one for this module.
#![allow(clippy::result_large_err)]

use chrono::Utc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{Gated, Queued, local_queue, namespace, workload_name};
use crate::{
    kueue::{Gate, client, eta::Lines},
    reconcile::handles::Io,
    runtime::error::{ReconcileError, Result},
};

/// The three Workload writes a plan asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Create the object's Workload as [`observe`] described it.
    Create,
    /// Release an evicted Workload's reservation (its work is stopped and the stop counted).
    Release,
    /// Delete the Workload: one that is not the object's ([`Gate::Foreign`]; the next pass writes
    /// the right one), or one whose work finished or was suspended (its quota is free at once).
    Delete,
}

impl Write {
    /// What the write does, for errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            Write::Create => "create the Kueue Workload",
            Write::Release => "release the Kueue Workload's quota",
            Write::Delete => "delete the Kueue Workload",
        }
    }
}

/// Carries out `write` for `obj`.
pub async fn write<K: Gated>(obj: &K, io: &Io<'_>, queued: &Queued, write: Write) -> Result<()> {
    let done = match write {
        Write::Create => {
            // Nothing to create when the spec has no valid shape (the plan reports that instead).
            let Some(spec) = queued.desired.clone() else {
                return Ok(());
            };
            client::create(
                io.client,
                &namespace(obj)?,
                &queued.workload,
                owner_reference(obj)?,
                spec,
            )
            .await
        }
        Write::Release => {
            let (Some(wl), Gate::Evicted { reason, message }) = (&queued.found, &queued.gate) else {
                return Ok(());
            };
            client::release(io.client, wl, reason, message, io.clock.now()).await
        }
        Write::Delete => {
            let ns = namespace(obj)?;
            let deleted = client::delete(io.client, &ns, &queued.workload).await;
            if deleted.is_ok() {
                hold_ended(io, &ns, &queued.local_queue, &queued.workload);
            }
            deleted
        }
    };
    done.map_err(ReconcileError::kueue(write.name()))
}

/// A deleted object whose cloud resources are gone (or orphaned) frees its quota at once: its
/// Workload is deleted and let go ([`client::delete`]). A failure is returned, so the object's own
/// finalizer stays and the next pass tries again: the Workload's finalizer would otherwise keep
/// it, and its quota, forever.
pub async fn release_on_delete<K: Gated>(obj: &K, io: &Io<'_>) -> Result<()> {
    let Some(queue) = local_queue(obj, io.settings) else {
        return Ok(());
    };
    let (ns, workload) = (namespace(obj)?, workload_name(obj));
    client::delete(io.client, &ns, &workload)
        .await
        .map_err(ReconcileError::kueue(Write::Delete.name()))?;
    hold_ended(io, &ns, queue, &workload);
    Ok(())
}

/// The operator deleted the Workload: its hold (if it was admitted) ends now, in its line's
/// record ([`eta`](super::eta); Kueue's time is the wall clock).
fn hold_ended(io: &Io<'_>, namespace: &str, queue: &str, workload: &str) {
    let lines = io.kept.shared.get_or_default::<Lines>();
    lines.ended(namespace, queue, workload, Utc::now());
}

fn owner_reference<K: Gated>(obj: &K) -> Result<OwnerReference> {
    let mut owner = obj
        .controller_owner_ref(&())
        .ok_or(ReconcileError::MissingMetadata("uid"))?;
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}
