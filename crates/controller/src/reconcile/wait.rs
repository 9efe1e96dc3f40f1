//! What a pass waits on, as a kind's pure [`Kind::wait`](super::kind::Kind::wait) says it; the
//! pass registers it with the cloud watch and turns it into the controller's requeue.

use std::time::Duration;

use crate::runtime::cloud_watch::{Collection, Listable, Listed, node_seen, state_of};

/// A cloud resource the object waits on to change state by itself.
#[derive(Clone, Debug)]
pub struct Watch {
    pub collection: Collection,
    pub name: String,
    /// The state last seen, as the listing compares it.
    pub state: String,
    /// The resource as read, reused until a listing shows it change (see
    /// [`crate::runtime::cloud_watch::CloudWatch::unchanged`]).
    pub read: Option<Listed>,
}

impl Watch {
    /// `name`, last seen in `state`.
    pub fn state<T: Listable>(name: &str, state: &T::State) -> Self {
        Self {
            collection: T::COLLECTION,
            name: name.to_owned(),
            state: state_of(state),
            read: None,
        }
    }

    /// A TPU node as read, compared by what a listing shows changing on it by itself (its state,
    /// and on a READY node its health and announced maintenance: [`node_seen`]).
    pub fn node(node: &tpu_operator_gcp::tpu_v2::model::Node) -> Self {
        Self {
            collection: Collection::TpuNodes,
            name: node.name.clone(),
            state: node_seen(node),
            read: None,
        }
    }

    /// A Compute Engine slice as read (in the TPU API's model), under the name a listing of its
    /// zone's instances shows it by (`group`: a managed instance group), compared like a node.
    pub fn compute_slice(node: &tpu_operator_gcp::tpu_v2::model::Node, group: bool) -> Option<Self> {
        Some(Self {
            collection: Collection::ComputeSlices,
            name: tpu_operator_gcp::compute::convert::watch_name(&node.name, group)?,
            state: node_seen(node),
            read: None,
        })
    }

    /// `resource` as read.
    pub fn read<T: Listable + Clone>(resource: &T) -> Self {
        let listed = Box::new(resource.clone()).into_listed();
        Self {
            collection: T::COLLECTION,
            name: listed.name().to_owned(),
            state: listed.state(),
            read: Some(listed),
        }
    }
}

/// A resource no longer waited on.
#[derive(Clone, Debug)]
pub struct Unwatch {
    pub collection: Collection,
    pub name: String,
}

impl Unwatch {
    pub fn of<T: Listable>(name: &str) -> Self {
        Self {
            collection: T::COLLECTION,
            name: name.to_owned(),
        }
    }
}

/// When the pass looks again.
#[derive(Clone, Debug)]
pub enum Wait {
    /// Woken by the cloud watch when `Watch` changes; polled at its backstop, and never later
    /// than `cap`. While the collection cannot be listed (listing refused, the watch off), polled
    /// every `unlisted` instead (default: `poll_active`, for a resource that changes by itself
    /// soon; a settled one waits longer).
    Watch {
        watch: Watch,
        cap: Option<Duration>,
        unlisted: Option<Duration>,
    },
    /// Looked at again after `after`; `unwatch`: what the object no longer waits on.
    Poll {
        after: Duration,
        unwatch: Option<Unwatch>,
    },
}

impl Wait {
    /// Poll after `after`, watching nothing.
    pub fn after(after: Duration) -> Self {
        Self::Poll { after, unwatch: None }
    }

    /// Poll after `after`, no longer watching `name`.
    pub fn poll_unwatching<T: Listable>(after: Duration, name: Option<&str>) -> Self {
        Self::Poll {
            after,
            unwatch: name.map(Unwatch::of::<T>),
        }
    }

    /// This wait, but looked at again after `limit` at the latest.
    pub fn at_most(self, limit: Duration) -> Self {
        match self {
            Self::Poll { after, unwatch } => Self::Poll {
                after: after.min(limit),
                unwatch,
            },
            Self::Watch { watch, cap, unlisted } => Self::Watch {
                watch,
                cap: Some(cap.map_or(limit, |c| c.min(limit))),
                unlisted,
            },
        }
    }

    /// Watch `watch`.
    pub fn watch(watch: Watch) -> Self {
        Self::Watch {
            watch,
            cap: None,
            unlisted: None,
        }
    }
}
