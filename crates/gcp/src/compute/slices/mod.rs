//! TPU slices built from Compute Engine resources and reported in the TPU API's model.
//!
//! * A single-host slice is one instance named by the slice's id.
//! * A multi-host slice is a managed instance group named by the id, made from a regional
//!   instance template and placed by a HIGH_THROUGHPUT workload policy
//!   (docs.cloud.google.com/tpu/docs/tpus-and-migs). The template and the policy are named by
//!   the slice's *first* id and shared by its incarnations (a recreation after a preemption
//!   makes a new group from the same template), so a preemption leaves nothing behind; they go
//!   when the slice is deleted ([`ComputeSlices::release`]).
//! * Flex-start capacity is a resize request named by the id on an initially empty group
//!   (docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig), read as a
//!   queued resource.
//!
//! Creation is a sequence of inserts (policy, template, group, resize request), each depending
//! on the previous one existing: [`ComputeSlices::create`] makes the next missing piece and
//! returns its operation, and the controller calls it again once that operation is done, as it
//! does for any create. A repeat after a crash gets ALREADY_EXISTS for what was made and moves
//! on, so the sequence needs no state outside the cloud; the memory kept here only saves calls.
//!
//! Reads by name (`get_node`, `get_queued_resource`), deletes and operation reads answer in the
//! TPU API's model, so the controller observes, plans and cleans up both backends with one code
//! path. What Compute Engine slices have no use for (patch, start, stop, reset, zone listings)
//! does not exist here: the controller's Compute Engine backend never plans it. One metadata key
//! can be set on a running slice's VMs (the checkpoint request before a maintenance), and their
//! announced maintenance started early.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use google_cloud_compute_v1::model::{InstanceGroupManager, Operation as ComputeOperation};
use google_cloud_longrunning::model::Operation;

use super::{
    ComputeApi, Place,
    convert::{self, Layout, Provisioning, SliceRequest},
};
use crate::error::{ErrorKind, GcpError, Result, Service};

mod maintenance;
mod metadata;
mod read;

/// The pieces of a group-backed slice, in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Piece {
    Policy,
    Template,
    Group,
    ResizeRequest,
}

impl Piece {
    fn name(self) -> &'static str {
        match self {
            Piece::Policy => "workload-policy",
            Piece::Template => "instance-template",
            Piece::Group => "instance-group",
            Piece::ResizeRequest => "resize-request",
        }
    }

    /// The id naming the piece: the slice's own for the group and its resize request, the
    /// shared (first) id for the template and the policy its incarnations share.
    fn owner<'a>(self, req: &'a SliceRequest, shared: &'a SliceRequest) -> &'a str {
        if self == Piece::Group || self == Piece::ResizeRequest {
            &req.id
        } else {
            &shared.id
        }
    }
}

/// The pieces a group-backed slice needs, in creation order: a workload policy when its
/// placement needs one, the template, the group, and a resize request for flex-start.
fn pieces_of(req: &SliceRequest) -> Vec<Piece> {
    let mut pieces = vec![Piece::Template, Piece::Group];
    if convert::needs_policy(req) {
        pieces.insert(0, Piece::Policy);
    }
    if matches!(req.provisioning, Provisioning::FlexStart { .. }) {
        pieces.push(Piece::ResizeRequest);
    }
    pieces
}

/// The group of the slice `req`, made from the template and placed by the workload policy
/// its incarnations share (both named by `shared_id`, in `region`).
fn group_body(req: &SliceRequest, region: &Place, shared_id: &str) -> InstanceGroupManager {
    let mut body = convert::manager_body(req);
    body.instance_template = Some(format!(
        "projects/{}/regions/{}/instanceTemplates/{shared_id}",
        req.project, region.location
    ));
    if let Some(policies) = body.resource_policies.as_mut() {
        policies.workload_policy = Some(format!(
            "projects/{}/regions/{}/resourcePolicies/{shared_id}",
            req.project, region.location
        ));
    }
    body
}

/// What a create answers once every piece exists: ALREADY_EXISTS (409), as for any create.
fn every_piece_exists(id: &str) -> GcpError {
    let mut done = GcpError::new(
        ErrorKind::AlreadyExists,
        Service::Compute,
        "create slice",
        id,
        "every piece of the slice exists",
    );
    done.http_status = Some(409);
    done
}

/// The `errors[].reason` of a delete refused because another resource still uses the target.
const IN_USE: &str = "resourceInUseByAnotherResource";

/// TPU slices on Compute Engine.
pub struct ComputeSlices {
    api: Arc<dyn ComputeApi>,
    /// Id → layout, learned from creates and reads, so a read of a known slice is one call.
    layouts: Mutex<HashMap<String, Layout>>,
    /// Id → accelerator type to report (the machine type alone does not say the slice size).
    accelerators: Mutex<HashMap<String, String>>,
    /// Pieces known to exist (created or found), so a create sequence does not re-insert them.
    made: Mutex<HashSet<(String, Piece)>>,
}

impl std::fmt::Debug for ComputeSlices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeSlices").finish_non_exhaustive()
    }
}

/// Each piece's own idempotency key, derived from the create's.
fn piece_request_id(request_id: &str, piece: &str) -> String {
    let namespace = uuid::Uuid::parse_str(request_id).unwrap_or(uuid::Uuid::NAMESPACE_OID);
    uuid::Uuid::new_v5(&namespace, piece.as_bytes())
        .hyphenated()
        .to_string()
}

/// The accelerator type a machine type and host count add up to (`ct6e-standard-4t` × 4 →
/// `v6e-16`; v5p and TPU7x count TensorCores, two per chip).
pub fn accelerator_of(machine_type: &str, hosts: usize) -> String {
    let chips_per_host: usize = machine_type
        .rsplit('-')
        .next()
        .and_then(|t| t.strip_suffix('t'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let chips = chips_per_host * hosts.max(1);
    match machine_type.split('-').next() {
        Some("ct6e") => format!("v6e-{chips}"),
        Some("ct5p") => format!("v5p-{}", chips * 2),
        Some("tpu7x") => format!("tpu7x-{}", chips * 2),
        Some("ct5lp") => format!("v5litepod-{chips}"),
        _ => machine_type.to_string(),
    }
}

impl ComputeSlices {
    pub fn new(api: Arc<dyn ComputeApi>) -> Self {
        Self {
            api,
            layouts: Mutex::default(),
            accelerators: Mutex::default(),
            made: Mutex::default(),
        }
    }

    fn remember(&self, id: &str, layout: Layout) {
        self.layouts
            .lock()
            .expect("layouts lock")
            .insert(id.to_string(), layout);
    }

    fn layout(&self, id: &str) -> Option<Layout> {
        self.layouts.lock().expect("layouts lock").get(id).copied()
    }

    fn accelerator(&self, id: &str) -> Option<String> {
        self.accelerators
            .lock()
            .expect("accelerators lock")
            .get(id)
            .cloned()
    }

    /// Makes the next missing piece of the slice and returns its operation; ALREADY_EXISTS once
    /// every piece exists. `shared_id` names the template and policy (the slice's first id).
    pub async fn create(&self, req: &SliceRequest, shared_id: &str, request_id: &str) -> Result<Operation> {
        self.accelerators
            .lock()
            .expect("accelerators lock")
            .insert(req.id.clone(), req.accelerator_type.clone());
        let layout = req.layout();
        self.remember(&req.id, layout);
        if layout == Layout::Instance {
            let zone = Place::new(&req.project, &req.zone);
            let op = self
                .api
                .insert_instance(&zone, request_id, convert::instance_body(req))
                .await?;
            return Ok(zonal(&zone, &op));
        }
        let shared = SliceRequest {
            id: shared_id.to_string(),
            ..req.clone()
        };
        for piece in pieces_of(req) {
            let made = (piece.owner(req, &shared).to_string(), piece);
            if self.made.lock().expect("made lock").contains(&made) {
                continue;
            }
            let key = piece_request_id(request_id, piece.name());
            match self.insert_piece(piece, req, &shared, &key).await {
                Err(e) if e.kind == ErrorKind::AlreadyExists => {
                    self.made.lock().expect("made lock").insert(made);
                }
                Ok(op) => {
                    self.made.lock().expect("made lock").insert(made);
                    return Ok(op);
                }
                Err(e) => return Err(e),
            }
        }
        Err(every_piece_exists(&req.id))
    }

    /// Starts the insert of one piece of a group-backed slice: the policy and the template in
    /// the region, named by the shared id; the group and its resize request in the zone, named
    /// by the slice's id. `key` is the piece's own idempotency key.
    async fn insert_piece(
        &self,
        piece: Piece,
        req: &SliceRequest,
        shared: &SliceRequest,
        key: &str,
    ) -> Result<Operation> {
        let zone = Place::new(&req.project, &req.zone);
        let region = Place::new(&req.project, convert::region_of(&req.zone));
        match piece {
            Piece::Policy => self
                .api
                .insert_resource_policy(&region, key, convert::policy_body(shared))
                .await
                .map(|op| regional(&region, &op)),
            Piece::Template => self
                .api
                .insert_instance_template(&region, key, convert::template_body(shared))
                .await
                .map(|op| regional(&region, &op)),
            Piece::Group => self
                .api
                .insert_instance_group_manager(&zone, key, group_body(req, &region, &shared.id))
                .await
                .map(|op| zonal(&zone, &op)),
            Piece::ResizeRequest => {
                let Provisioning::FlexStart { run_seconds } = req.provisioning else {
                    unreachable!("resize requests are for flex-start only")
                };
                self.api
                    .insert_resize_request(&zone, &req.id, key, convert::resize_body(req, run_seconds))
                    .await
                    .map(|op| zonal(&zone, &op))
            }
        }
    }

    /// Deletes the template and workload policy the slice's groups shared, once no group uses
    /// them. `Ok(true)` when both are gone (NOT_FOUND); `Ok(false)` while a delete was started
    /// or one is still in use: call again later.
    pub async fn release(&self, project: &str, zone: &str, shared_id: &str) -> Result<bool> {
        self.made
            .lock()
            .expect("made lock")
            .retain(|(id, _)| id != shared_id);
        let region = Place::new(project, convert::region_of(zone));
        let mut gone = true;
        for result in [
            self.api.delete_instance_template(&region, shared_id).await,
            self.api.delete_resource_policy(&region, shared_id).await,
        ] {
            match result {
                Ok(_) => gone = false,
                Err(e) if e.is_not_found() => {}
                // A group still being deleted holds them: not an error, wait. Compute Engine
                // answers 400 with reason `resourceInUseByAnotherResource`.
                Err(e) if e.reason.as_deref() == Some(IN_USE) => gone = false,
                Err(e) => return Err(e),
            }
        }
        Ok(gone)
    }
}

/// A zonal operation as a long-running operation the controller can poll by name.
fn zonal(zone: &Place, op: &ComputeOperation) -> Operation {
    let name = format!(
        "projects/{}/zones/{}/operations/{}",
        zone.project,
        zone.location,
        op.name.as_deref().unwrap_or_default()
    );
    convert::operation(&name, op)
}

fn regional(region: &Place, op: &ComputeOperation) -> Operation {
    let name = format!(
        "projects/{}/regions/{}/operations/{}",
        region.project,
        region.location,
        op.name.as_deref().unwrap_or_default()
    );
    convert::operation(&name, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerator_types_from_machines() {
        assert_eq!(accelerator_of("ct6e-standard-8t", 1), "v6e-8");
        assert_eq!(accelerator_of("ct6e-standard-4t", 4), "v6e-16");
        assert_eq!(accelerator_of("ct5p-hightpu-4t", 2), "v5p-16");
        assert_eq!(accelerator_of("tpu7x-standard-4t", 1), "tpu7x-8");
    }

    #[test]
    fn piece_keys_are_distinct_and_stable() {
        let id = "6f1c2d8e-9a4b-5c3d-8e7f-0a1b2c3d4e5f";
        assert_eq!(
            piece_request_id(id, "instance-group"),
            piece_request_id(id, "instance-group")
        );
        assert_ne!(
            piece_request_id(id, "instance-group"),
            piece_request_id(id, "instance-template")
        );
    }
}
