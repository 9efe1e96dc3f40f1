//! The cloud resources the watch lists: their [`Collection`]s, how one travels as [`Listed`],
//! and the states a listing shows ([`Listable::lists`]).

use tpu_operator_gcp::{
    aiplatform_v1::model::{CustomJob, JobState},
    dataproc_v1::model::{Batch, batch::State as BatchState},
    tpu_v2::model::{Node, node::State as NodeState},
};

/// A kind of cloud resource the watch can list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collection {
    TpuNodes,
    DataprocBatches,
    VertexJobs,
    /// Compute Engine slices, listed as the instances of this cluster in a zone and compared as
    /// the TPU nodes they are read as (`tpu_operator_gcp::compute::convert::listed_slices`). Only
    /// compared: a woken owner reads its slice by name, since a listing lacks the group's size,
    /// template and metadata.
    ComputeSlices,
}

/// One listed resource.
#[derive(Clone, Debug)]
pub enum Listed {
    Node(Box<Node>),
    Batch(Box<Batch>),
    Job(Box<CustomJob>),
}

impl Listed {
    pub fn name(&self) -> &str {
        match self {
            Listed::Node(n) => &n.name,
            Listed::Batch(b) => &b.name,
            Listed::Job(j) => &j.name,
        }
    }

    pub fn state(&self) -> String {
        match self {
            Listed::Node(n) => node_seen(n),
            Listed::Batch(b) => state_of(&b.state),
            Listed::Job(j) => state_of(&j.state),
        }
    }
}

/// A cloud resource type the watch lists: which collection holds it, and how it travels as
/// [`Listed`].
pub trait Listable: Sized {
    /// Its state as the API returns it.
    type State: std::fmt::Debug;
    const COLLECTION: Collection;
    fn into_listed(self: Box<Self>) -> Listed;
    fn from_listed(listed: Listed) -> Option<Box<Self>>;
    /// Whether a resource in `state` shows in the watch's listing, so that it can be waited on
    /// (one absent from the listing would wake its owner on every round).
    fn lists(state: &Self::State) -> bool;
}

impl Listable for Node {
    type State = NodeState;
    const COLLECTION: Collection = Collection::TpuNodes;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Node(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Node(n) => Some(n),
            _ => None,
        }
    }

    /// TPU nodes cannot be filtered: every node is listed.
    fn lists(_: &NodeState) -> bool {
        true
    }
}

impl Listable for Batch {
    type State = BatchState;
    const COLLECTION: Collection = Collection::DataprocBatches;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Batch(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Batch(b) => Some(b),
            _ => None,
        }
    }

    fn lists(state: &BatchState) -> bool {
        BATCH_STATES_LISTED.contains(state)
    }
}

impl Listable for CustomJob {
    type State = JobState;
    const COLLECTION: Collection = Collection::VertexJobs;

    fn into_listed(self: Box<Self>) -> Listed {
        Listed::Job(self)
    }

    fn from_listed(listed: Listed) -> Option<Box<Self>> {
        match listed {
            Listed::Job(j) => Some(j),
            _ => None,
        }
    }

    fn lists(state: &JobState) -> bool {
        JOB_STATES_LISTED.contains(state)
    }
}

/// Dataproc batch states the service leaves on its own: the watch lists only these, so only a
/// batch in one of them may be waited on (any other is absent from the listing, which would wake
/// its owner on every round).
pub(super) const BATCH_STATES_LISTED: [BatchState; 3] =
    [BatchState::Pending, BatchState::Running, BatchState::Cancelling];

/// Vertex job states the service leaves on its own (the same rule as [`BATCH_STATES_LISTED`]).
pub(super) const JOB_STATES_LISTED: [JobState; 6] = [
    JobState::Queued,
    JobState::Pending,
    JobState::Running,
    JobState::Cancelling,
    JobState::Updating,
    JobState::Paused,
];

/// `state = A OR state = B ...` for `states`, each name written by `quote`.
pub(super) fn state_filter<S>(
    states: &[S],
    name: fn(&S) -> Option<&str>,
    quote: fn(&str) -> String,
) -> String {
    states
        .iter()
        .filter_map(name)
        .map(|n| format!("state = {}", quote(n)))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// How a state is compared between a reconcile's read and a listing.
pub fn state_of(state: &impl std::fmt::Debug) -> String {
    format!("{state:?}")
}

/// What a listing compares of a TPU node: its state and, while it is READY, its health and the
/// maintenance announced for it, which change without the state changing. A node in any other
/// state compares as its state alone (as [`state_of`] says it).
pub fn node_seen(n: &Node) -> String {
    let state = state_of(&n.state);
    if n.state != NodeState::Ready {
        return state;
    }
    let notice = tpu_operator_gcp::maintenance::upcoming_maintenance(n)
        .map(|m| {
            format!(
                "{}@{}",
                m.maintenance_status,
                m.window_start_time.unwrap_or_default()
            )
        })
        .unwrap_or_default();
    format!("{state}/{:?}/{notice}", n.health)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_filters_name_the_states_owners_wait_in() {
        assert_eq!(
            state_filter(&BATCH_STATES_LISTED, BatchState::name, str::to_owned),
            "state = PENDING OR state = RUNNING OR state = CANCELLING"
        );
        assert_eq!(
            state_filter(&JOB_STATES_LISTED, JobState::name, |n| format!("\"{n}\"")),
            ["QUEUED", "PENDING", "RUNNING", "CANCELLING", "UPDATING", "PAUSED"]
                .map(|s| format!("state = \"JOB_STATE_{s}\""))
                .join(" OR ")
        );
        assert!(Batch::lists(&BatchState::Running) && !Batch::lists(&BatchState::Succeeded));
        assert!(CustomJob::lists(&JobState::Queued) && !CustomJob::lists(&JobState::Succeeded));
    }
}
