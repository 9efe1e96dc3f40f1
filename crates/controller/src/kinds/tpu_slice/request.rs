//! What a slice's create is made of: the node fields the controller keeps equal to the spec, the
//! create request of the current incarnation, and where it is created. Types only: the spec maps
//! into them ([`super::spec`]), the backends send them ([`super::backend`]).

use std::collections::BTreeMap;

use tpu_operator_api::accelerator::SliceShape;
use tpu_operator_gcp::{
    compute::convert::SliceRequest,
    tpu_v2::model::{Node, QueuedResource, queued_resource},
};

/// The node fields the controller keeps equal to the spec with `nodes.patch`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub labels: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
}

/// The create request of the slice's current incarnation, mapped from the spec before plan: a
/// spec the request cannot carry is an invalid spec there, so `act` fails only for cloud reasons.
#[derive(Clone, Debug, PartialEq)]
pub enum Create {
    /// `nodes.create` of the node with this id.
    Node { id: String, node: Box<Node> },
    /// `queuedResources.create` of the queued resource with this id.
    QueuedResource { id: String, body: QueuedResource },
    /// The Compute Engine instance, or group with its template, policy and resize request.
    ComputeEngine(SliceRequest),
}

impl Create {
    /// Multislice, one queued resource per slice: slice `id`'s queued resource, the same request
    /// as slice 0's (which the incarnation's request is made for) under its own id, and its one
    /// node of that id too. `None` for a request that is not a queued resource.
    pub fn for_slice(&self, id: &str) -> Option<Create> {
        let Create::QueuedResource { body, .. } = self else {
            return None;
        };
        let spec = body.tpu()?.node_spec.first()?.clone().set_node_id(id);
        let body = body
            .clone()
            .set_tpu(queued_resource::Tpu::new().set_node_spec([spec]));
        Some(Create::QueuedResource {
            id: id.to_string(),
            body,
        })
    }
}

/// The spec checked and mapped, once per pass: one slice's shape and the current incarnation's
/// create request.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub shape: SliceShape,
    pub create: Create,
}

/// Where the current incarnation is created: `project`, `parent` (`projects/<p>/locations/<zone>`),
/// its node (or group) id and, for a queued resource, that resource's id.
pub struct CreateAt<'a> {
    pub project: &'a str,
    pub parent: &'a str,
    pub id: &'a str,
    pub queued_id: Option<&'a str>,
}
