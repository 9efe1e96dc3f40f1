//! What a slice's cloud objects are called: the deterministic names of the current incarnation
//! and of the one before it, from the object's identity and status (never from a listing, so a
//! create whose result was never written to status is still found by name).

use tpu_operator_api::{
    naming::{self, ObjectIdentity},
    tpu_slice::{Provisioner, TpuSlice, TpuSliceSpec, TpuSliceStatus},
};

use super::backend::{self, SliceBackend};

/// Full resource names of one incarnation (recreation) of the slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    /// `projects/<p>/locations/<zone>/nodes/<id>`.
    pub node: String,
    /// The queued resource, for `capacity.queued` and `capacity.reserved`.
    pub queued: Option<String>,
    /// The node / queued resource id (for a multislice, the node id prefix).
    pub id: String,
    /// Multislice: the nodes of slices 1..N-1 (`node` is slice 0's); empty otherwise.
    pub other_slices: Vec<String>,
    /// Multislice with one queued resource per slice: those of slices 1..N-1 (`queued` is slice
    /// 0's). Empty for a plain slice, and for a multislice created before this layout as one
    /// queued resource (`multisliceParams`), which keeps that layout until it is recreated.
    pub other_queues: Vec<String>,
    /// Multislice with one queued resource per slice: for each slice being replaced
    /// (`status.replacingSlices`), the queued resource it was lost in, deleted before it is
    /// forgotten. The replacement has a name of its own (`status.sliceRestarts`).
    pub replaced: Vec<(usize, String)>,
}

/// `projects/<p>/locations/<zone>` of the spec's zone.
fn parent_of(project: &str, spec: &TpuSliceSpec) -> String {
    format!("projects/{project}/locations/{}", spec.zone)
}

impl Incarnation {
    /// Incarnation `n` of the slice, asking where `spec` says (its zone and kind of capacity).
    /// `one_queue`: a multislice created as one queued resource (before one per slice);
    /// `status`: how often each slice was replaced, and which are being replaced.
    fn new(
        identity: &ObjectIdentity,
        project: &str,
        spec: &TpuSliceSpec,
        n: u32,
        one_queue: bool,
        status: Option<&TpuSliceStatus>,
    ) -> Self {
        let parent = parent_of(project, spec);
        let slices = spec.slice_count();
        if let Some(count) = slices.filter(|_| !one_queue) {
            return Self::per_slice(identity, &parent, n, count, status);
        }
        let id = naming::tpu_node_id(identity, n);
        // A multislice queued resource names its nodes `<prefix>-<k>` (see
        // `spec::queued_resource`); the prefix is the id a plain slice's node would have.
        let node = match slices {
            Some(_) => format!("{parent}/nodes/{id}-0"),
            None => format!("{parent}/nodes/{id}"),
        };
        Incarnation {
            other_slices: (1..slices.unwrap_or(1))
                .map(|k| format!("{parent}/nodes/{id}-{k}"))
                .collect(),
            node,
            queued: spec.uses_queued_resource().then(|| {
                format!(
                    "{parent}/queuedResources/{}",
                    naming::queued_resource_id(identity, n)
                )
            }),
            id,
            other_queues: Vec::new(),
            replaced: Vec::new(),
        }
    }

    /// A multislice of `count` slices, each its own queued resource with one node of the same id.
    fn per_slice(
        identity: &ObjectIdentity,
        parent: &str,
        n: u32,
        count: u32,
        status: Option<&TpuSliceStatus>,
    ) -> Self {
        let restarts = |k: u32| {
            let r = status.and_then(|s| s.slice_restarts.get(k as usize).copied());
            u32::try_from(r.unwrap_or(0)).unwrap_or(0)
        };
        let ids: Vec<String> = (0..count)
            .map(|k| naming::slice_node_id(identity, n, k, restarts(k)))
            .collect();
        let node = |id: &String| format!("{parent}/nodes/{id}");
        let queue = |id: &String| format!("{parent}/queuedResources/{id}");
        let replacing = status.into_iter().flat_map(|s| &s.replacing_slices);
        let replaced = replacing
            .filter_map(|k| u32::try_from(*k).ok().filter(|k| *k < count && restarts(*k) > 0))
            .map(|k| {
                (
                    k as usize,
                    queue(&naming::slice_node_id(identity, n, k, restarts(k) - 1)),
                )
            })
            .collect();
        Incarnation {
            replaced,
            node: node(&ids[0]),
            queued: Some(queue(&ids[0])),
            other_slices: ids[1..].iter().map(node).collect(),
            other_queues: ids[1..].iter().map(queue).collect(),
            id: ids[0].clone(),
        }
    }

    /// One queued resource per slice (a multislice in today's layout).
    pub fn per_slice_queues(&self) -> bool {
        !self.other_queues.is_empty()
    }

    /// Slice `k`'s queued resource (per-slice layout).
    pub fn slice_queue(&self, k: usize) -> Option<&str> {
        match k {
            0 => self.queued.as_deref(),
            k => self.other_queues.get(k - 1).map(String::as_str),
        }
    }

    /// The full name of a queued resource `qr` created as one for the whole multislice
    /// (`multisliceParams`) for incarnation `n`.
    fn one_queue_name(identity: &ObjectIdentity, project: &str, spec: &TpuSliceSpec, n: u32) -> String {
        let parent = parent_of(project, spec);
        format!(
            "{parent}/queuedResources/{}",
            naming::queued_resource_id(identity, n)
        )
    }
}

/// Where the slice's cloud objects live and what they are called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub project: String,
    /// `projects/<p>/locations/<zone>`.
    pub parent: String,
    /// The incarnation the slice should run now (`status.recreations`).
    pub current: Incarnation,
    /// The incarnation before the last preemption, which must be gone before `current` is created.
    pub previous: Option<Incarnation>,
    /// The node was adopted by `spec.adoptNodeId` (never created, never recreated).
    pub adopted: bool,
    /// Which API holds the slice's cloud objects.
    pub provisioner: Provisioner,
}

impl Names {
    /// Where the current incarnation is created.
    pub fn create_at(&self) -> super::spec::CreateAt<'_> {
        super::spec::CreateAt {
            project: &self.project,
            parent: &self.parent,
            id: &self.current.id,
            queued_id: self.current.queued.as_deref().and_then(|n| n.rsplit('/').next()),
        }
    }

    /// `spec`: the slice's spec as this pass runs it (at its capacity plan's place); `before`:
    /// where the previous incarnation asked (another zone or kind after a move on the plan).
    pub fn new(
        slice: &TpuSlice,
        spec: &TpuSliceSpec,
        before: &TpuSliceSpec,
        identity: &ObjectIdentity,
        project: String,
    ) -> Self {
        let parent = parent_of(&project, spec);
        let recreations = slice
            .status
            .as_ref()
            .map_or(0, tpu_operator_api::tpu_slice::TpuSliceStatus::incarnation);
        // A multislice that status says runs (or ran) as one queued resource keeps that layout
        // for that incarnation, so an upgrade neither loses nor duplicates it.
        let recorded = slice
            .status
            .as_ref()
            .and_then(|s| s.queued_resource_name.as_deref());
        let incarnation = |n: u32, spec: &TpuSliceSpec| {
            let one_queue = spec.slice_count().is_some()
                && recorded == Some(Incarnation::one_queue_name(identity, &project, spec, n).as_str());
            Incarnation::new(identity, &project, spec, n, one_queue, slice.status.as_ref())
        };
        let (current, previous, adopted) = match &spec.adopt_node_id {
            Some(id) => (
                Incarnation {
                    node: format!("{parent}/nodes/{id}"),
                    queued: None,
                    id: id.clone(),
                    other_slices: Vec::new(),
                    other_queues: Vec::new(),
                    replaced: Vec::new(),
                },
                None,
                true,
            ),
            None => (
                incarnation(recreations, spec),
                recreations.checked_sub(1).map(|n| incarnation(n, before)),
                false,
            ),
        };
        Self {
            project,
            parent,
            current,
            previous,
            adopted,
            provisioner: spec.provisioner,
        }
    }

    /// The backend the slice's objects are created, read, deleted and polled through.
    pub fn backend(&self) -> &'static dyn SliceBackend {
        backend::of(self.provisioner)
    }
}
