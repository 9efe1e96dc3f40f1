//! What one pass of a `TpuSlice` works on: its identity, its names in the cloud, the values its
//! node must carry and the spec checked and mapped once (shape, create request, price).

use kube::ResourceExt;
use tpu_operator_api::{
    accelerator::SliceShape,
    naming::ObjectIdentity,
    tpu_slice::{CapacityMode, DONE_URI_ANNOTATION, TpuSlice, TpuSliceSpec, TpuSliceStatus},
    training_pipeline::ATTEMPT_LABEL,
};
use tpu_operator_gcp::tpu_v2::model::Node;

use super::{act, backend, observe::Names, spec, spec::Desired};
use crate::{
    governance::tenancy,
    reconcile::{handles::Settings, kind::OwnedHolder},
    runtime::capacity::Place,
    runtime::error::{ReconcileError, Result},
};

/// Whether the operator may read marker files under `uri` (the done-uri annotation) for a slice of
/// `namespace`. The annotation is the tenant's to write like the spec, and the operator reads with
/// its own identity, so `allowedBuckets` holds for it too. A refused one is ignored (the slice runs
/// on without workload markers), logged with the policy's message.
fn done_uri_allowed(settings: Settings<'_>, namespace: &str, uri: &str) -> bool {
    let req = tenancy::Request {
        what: "TpuSlice".into(),
        storage: vec![tenancy::request::Named {
            field: format!("metadata.annotations[{DONE_URI_ANNOTATION}]"),
            value: uri.to_owned(),
        }],
        ..tenancy::Request::default()
    };
    match tenancy::check_storage(settings.policies, namespace, &req) {
        Ok(()) => true,
        Err(denial) => {
            tracing::warn!(namespace, message = %denial.message, "ignoring the done-uri annotation");
            false
        }
    }
}

/// The labels of the workload's log entries: the slice, and for a pipeline's training slice (its
/// controller is a TrainingPipeline) the pipeline's uid and the attempt its label names.
fn log_labels(slice: &TpuSlice, identity: &ObjectIdentity) -> spec::LogLabels {
    let pipeline = slice
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "TrainingPipeline")
        .map(|o| {
            let attempt = slice.labels().get(ATTEMPT_LABEL).cloned().unwrap_or_default();
            (o.uid.clone(), attempt)
        });
    spec::LogLabels {
        slice: identity.uid.clone(),
        pipeline,
    }
}

/// What the slice is called in the cloud and what its node must carry.
pub struct Target {
    pub(super) identity: ObjectIdentity,
    /// With a capacity plan, the spec as this pass runs it: the place's zone and capacity stand
    /// in for `zone` and `capacity` ([`Target::spec`]). Without one, the spec itself is used, not
    /// copied: a spec may carry 0.5 MiB of metadata.
    at_place: Option<TpuSliceSpec>,
    pub(super) names: Names,
    pub(super) desired: Desired,
    /// The spec checked and mapped once per pass: one slice's shape and the current
    /// incarnation's create request (`Err`: what in the spec cannot be provisioned, by field).
    pub(super) checked: Result<spec::Checked, String>,
    /// `TpuSlice <name>`, as usage lists it.
    pub(super) holder: String,
    /// What a create asks of the namespace's policy (`None`: the spec has no valid shape).
    pub(super) request: Option<tenancy::Request>,
    /// Estimated US dollars per hour while the node runs, and the price key.
    pub(super) price: Option<(f64, String)>,
    /// Where a direct create asks for capacity, for the stockout memory (`None`: the slice
    /// queues for it, or adopts a node, or its spec has no shape).
    pub(super) place: Option<Place>,
}

/// The stockout memory's place of a slice that creates its node directly. A queued resource
/// waits for capacity instead of being refused, so it is never blocked; an adopted node is not
/// created; a reservation is its owner's capacity, not the zone's stock, so one team's full
/// reservation must not hold back another team's creates.
fn place_of(spec: &TpuSliceSpec, names: &Names, checked: &Result<spec::Checked, String>) -> Option<Place> {
    let shape = &checked.as_ref().ok()?.shape;
    let mode = spec.capacity_mode();
    if spec.uses_queued_resource() || names.adopted || mode == CapacityMode::Reserved {
        return None;
    }
    Some(Place {
        project: names.project.clone(),
        zone: spec.zone.clone(),
        accelerator: shape.accelerator_type(),
        kind: mode.field(),
    })
}

impl Target {
    /// `None` when no project is known (spec nor operator default).
    pub(super) fn new(slice: &TpuSlice, settings: Settings<'_>) -> Result<Option<Self>> {
        let identity = ObjectIdentity::new(
            slice
                .namespace()
                .ok_or(ReconcileError::MissingMetadata("namespace"))?,
            slice.name_any(),
            slice.uid().ok_or(ReconcileError::MissingMetadata("uid"))?,
        );
        let Some(project) = settings.project_for(&identity.namespace, slice.spec.project.as_deref()) else {
            return Ok(None);
        };
        let done_uri = slice
            .annotations()
            .get(DONE_URI_ANNOTATION)
            .map(String::as_str)
            .filter(|uri| done_uri_allowed(settings, &identity.namespace, uri));
        let logs = log_labels(slice, &identity);
        let at_place = slice.place_in_effect().map(|p| slice.spec.at(Some(&p)));
        let here = at_place.as_ref().unwrap_or(&slice.spec);
        let before = slice.previous_place().map(|p| slice.spec.at(Some(&p)));
        let desired = spec::desired(here, &identity, &settings.config.cluster_id, done_uri, &logs);
        let names = Names::new(slice, here, before.as_ref().unwrap_or(here), &identity, project);
        let checked = backend::check(here, &desired, &identity, &names.create_at());
        let prices = settings.prices;
        let place = place_of(here, &names, &checked);
        Ok(Some(Self {
            place,
            request: super::policy::request(here, &names.project, prices),
            price: super::policy::per_hour(here, prices),
            holder: format!("TpuSlice {}", identity.name),
            at_place,
            identity,
            names,
            desired,
            checked,
        }))
    }

    /// The spec as this pass runs it (`declared`: the slice's own spec): at its capacity plan's
    /// place, or the spec itself.
    pub(super) fn spec<'a>(&'a self, declared: &'a TpuSliceSpec) -> &'a TpuSliceSpec {
        self.at_place.as_ref().unwrap_or(declared)
    }

    /// The slice as the namespace's usage names it.
    pub(super) fn holder(&self) -> OwnedHolder {
        OwnedHolder {
            uid: self.identity.uid.clone(),
            what: self.holder.clone(),
            holds: true,
        }
    }

    /// One slice's shape; `None` when the spec is invalid.
    pub(super) fn shape(&self) -> Option<&SliceShape> {
        self.checked.as_ref().ok().map(|c| &c.shape)
    }

    /// What `act` needs for one call on this slice; `node` as observed this pass, if read.
    pub(super) fn request<'a>(&'a self, old: &'a TpuSliceStatus, node: Option<&'a Node>) -> act::Request<'a> {
        act::Request {
            names: &self.names,
            desired: &self.desired,
            identity: &self.identity,
            create: self.checked.as_ref().ok().map(|c| &c.create),
            recreations: old.incarnation(),
            slice_restarts: &old.slice_restarts,
            node,
            place: self.place.as_ref(),
        }
    }
}
