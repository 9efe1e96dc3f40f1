//! Where a TpuSlice's cloud objects live: one [`SliceBackend`] per Google Cloud API that can
//! provision a slice ([`tpu_api`]: Cloud TPU nodes and queued resources; [`compute_engine`]:
//! instances and managed instance groups of TPU machine types).
//!
//! A backend answers in the TPU API's model (`Node`, `QueuedResource`, `Operation`), which the
//! pure plan consumes, so the slice controller observes, plans and cleans up every backend with
//! one code path. What a backend cannot do is not one of its methods: node updates (patch,
//! start) are a separate trait a backend offers or not ([`SliceBackend::updates`]), and the plan
//! consults it before planning one; a queued resource is only read or created where the spec
//! asks for one, which the backend's own spec check allows. So no backend refuses a call at
//! run time.
//!
//! [`of`] is the one place the backend is chosen from `spec.provisioner`. A third backend is one
//! file here, an arm in [`of`], and an arm in the orphan sweeper's zone listing (an exhaustive
//! match, so the compiler asks for it).

mod compute_engine;
mod tpu_api;

use std::collections::BTreeMap;

use async_trait::async_trait;
use tpu_operator_api::{
    accelerator::SliceShape,
    naming::ObjectIdentity,
    tpu_slice::{Provisioner, TpuSliceSpec},
};
use tpu_operator_gcp::{
    Gcp, GcpError,
    longrunning::model::Operation,
    tpu_v2::model::{Node, QueuedResource},
};

pub use self::{compute_engine::ComputeEngine, tpu_api::TpuApi};
use super::request::{Checked, Create, CreateAt, Desired};
use crate::runtime::error::ReconcileError;

/// The backend that holds slices of `provisioner`.
pub fn of(provisioner: Provisioner) -> &'static dyn SliceBackend {
    match provisioner {
        Provisioner::TpuApi => &TpuApi,
        Provisioner::ComputeEngine => &ComputeEngine,
    }
}

/// Generation, chips and hosts of the slice the spec asks for.
pub fn shape(spec: &TpuSliceSpec) -> Result<SliceShape, String> {
    let shape = spec.slice_shape()?;
    // What admission checks, checked again for objects admitted before the rules existed, so a
    // request is never sent that Google would refuse for a spec reason.
    of(spec.provisioner).check(spec, &shape)?;
    Ok(shape)
}

/// Checks the spec and maps it to the create request at `at`; `Err` names the field.
pub fn check(
    spec: &TpuSliceSpec,
    desired: &Desired,
    identity: &ObjectIdentity,
    at: &CreateAt<'_>,
) -> Result<Checked, String> {
    let shape = shape(spec)?;
    let create = of(spec.provisioner).create_request(spec, &shape, desired, identity, at)?;
    Ok(Checked { shape, create })
}

/// The incarnation a create makes: where, and whose (its request ids derive from the owner's
/// identity and recreation count, so a retried create is the same create).
pub struct Creating<'a> {
    /// `projects/<p>/locations/<zone>`.
    pub parent: &'a str,
    pub identity: &'a ObjectIdentity,
    pub recreations: u32,
    /// Multislice, one queued resource per slice: the slice asked for.
    pub slice: Option<SliceAsk>,
}

/// One slice of a multislice asked for: its slice id and how often it was replaced alone (its
/// create gets a request id of its own each time).
pub type SliceAsk = (usize, i32);

/// A deleted slice whose cloud objects are gone, for [`SliceBackend::release`].
pub struct Releasing<'a> {
    pub spec: &'a TpuSliceSpec,
    pub project: &'a str,
    pub identity: &'a ObjectIdentity,
}

/// What the slice controller and the orphan sweeper ask of one backend. Names are full TPU API
/// names (`projects/{p}/locations/{zone}/nodes/{id}`, `.../queuedResources/{id}`); mutations
/// return the started operation, polled with [`SliceBackend::get_operation`].
#[async_trait]
pub trait SliceBackend: Send + Sync {
    /// Refuses (naming the field) a spec this backend cannot provision; admission checks the
    /// same, this catches objects admitted before the rules existed.
    fn check(&self, spec: &TpuSliceSpec, shape: &SliceShape) -> Result<(), String>;

    /// The create request of the incarnation at `at`, mapped before plan so that a create fails
    /// only for cloud reasons. `Err` names the field the request cannot carry.
    fn create_request(
        &self,
        spec: &TpuSliceSpec,
        shape: &SliceShape,
        desired: &Desired,
        identity: &ObjectIdentity,
        at: &CreateAt<'_>,
    ) -> Result<Create, String>;

    /// Node updates (labels / metadata / tags patches, starting a stopped node), if the backend
    /// has them. The plan plans none for a backend without.
    fn updates(&self) -> Option<&dyn NodeUpdates>;

    /// The cloud watch can list this backend's nodes per zone (and wake slices on a change);
    /// otherwise a changing slice is read by name at `poll_active`.
    fn watchable(&self) -> bool;

    /// An orphaned slice of this backend (deleted with `deletionPolicy: Orphan`) keeps counting
    /// against its namespace's quota and budget until a sweep no longer finds it.
    fn counts_orphans(&self) -> bool;

    /// A READY node that status fully describes may be deleted by name without reading it
    /// first (the first deletion pass).
    fn deletes_known_node(&self) -> bool;

    /// A queued slice's node can exist without its queued resource (Compute Engine inserts a
    /// flex-start group before its resize request), so deletion reads the node even when the
    /// queued resource is absent.
    fn node_without_queue(&self) -> bool;

    /// The Cloud Console page that shows node `node` of `project` (status `links.console`).
    fn console(&self, project: &str, node: &str) -> Option<String>;

    async fn get_node(&self, gcp: &Gcp, name: &str) -> Result<Node, GcpError>;
    async fn get_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<QueuedResource, GcpError>;
    /// Sends `create` (from this backend's [`SliceBackend::create_request`]).
    async fn create(&self, gcp: &Gcp, create: &Create, at: &Creating<'_>) -> Result<Operation, GcpError>;
    async fn delete_node(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError>;
    /// Deletes the queued resource with its nodes.
    async fn delete_queued_resource(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError>;
    async fn get_operation(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError>;
    /// Asks the workload of node `name` for a checkpoint before a maintenance: its metadata
    /// becomes `metadata` (as read, plus the request). `None` when nothing was left to change.
    async fn request_checkpoint(
        &self,
        gcp: &Gcp,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Option<Operation>, GcpError>;

    /// Starts node `name`'s announced, reschedulable maintenance now, through `queued` (full
    /// name) when the node is one of that queued resource's. `None` when nothing was left to
    /// start.
    async fn start_maintenance(
        &self,
        gcp: &Gcp,
        name: &str,
        queued: Option<&str>,
    ) -> Result<Option<Operation>, GcpError>;

    /// Once the slice's objects are gone: deletes what its incarnations shared. `None` when
    /// nothing is left; `Some(what)` while something is still being deleted (call again later).
    async fn release(&self, gcp: &Gcp, slice: &Releasing<'_>) -> Result<Option<String>, ReconcileError>;
}

/// Updates of an existing node, for backends that have them ([`SliceBackend::updates`]).
#[async_trait]
pub trait NodeUpdates: Send + Sync {
    /// `nodes.patch` of `node` (its name set to `name`) with `mask`, e.g.
    /// `["labels", "metadata", "tags"]`.
    async fn patch_node(
        &self,
        gcp: &Gcp,
        name: &str,
        node: Node,
        mask: &[&str],
    ) -> Result<Operation, GcpError>;
    async fn start_node(&self, gcp: &Gcp, name: &str) -> Result<Operation, GcpError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provisioner_has_its_backend() {
        assert!(of(Provisioner::TpuApi).updates().is_some());
        assert!(of(Provisioner::ComputeEngine).updates().is_none());
        assert!(of(Provisioner::TpuApi).watchable());
        assert!(!of(Provisioner::ComputeEngine).watchable());
    }
}
