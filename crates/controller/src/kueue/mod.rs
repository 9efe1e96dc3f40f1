//! Kueue as the admission gate of TPU capacity shared between teams (docs/kueue.md).
//!
//! Kueue's contract for a controller of its own kind ("external framework"; observed against
//! Kueue v0.17.0 in tests/kueue/README.md): the controller writes a `Workload` that says what its
//! work will hold, owned by the object; Kueue reserves quota in a ClusterQueue and marks it
//! `Admitted`; only then does the work start. When Kueue evicts it (a higher priority preempted
//! it, the queue was stopped, it was deactivated), the controller stops the work and releases the
//! reservation itself, and Kueue queues it again. Kueue never stops a TPU node on its own: that
//! is this operator's side of the contract.
//!
//! - [`workload`]: the Workload as this operator writes and reads it (typed, only the fields used).
//! - [`demand`]: pure: what a TpuSlice will hold, as Kueue's pod sets (hosts × chips of
//!   `google.com/tpu`, node selectors GKE's TPU nodes carry, so the flavors of a team's GKE TPU
//!   pods govern its slices too).
//! - [`follow`]: pure: what the object's own Workload follows in place (its priority class).
//! - [`gate`]: pure: a Workload's status as the gate a pass obeys, and the release write.
//! - [`queued`]: what a pass reads of a gated object's Workload, and the writes its plan asks
//!   for (the same for every gated kind).
//! - [`eta`]: when a waiting Workload will likely be admitted, from its position and the hold
//!   times seen in its LocalQueue.
//! - [`waits`]: what a gated object awaits besides its Workload (a priority class, its queue's
//!   line), and the watches that wake it when that changes.
//! - [`client`]: the Kubernetes calls (Workload, WorkloadPriorityClass, the visibility API).

pub mod client;
pub mod demand;
pub mod eta;
pub mod follow;
pub mod gate;
pub mod queued;
pub mod waits;
pub mod workload;

pub use gate::Gate;
pub use tpu_operator_api::kueue::{PRIORITY_CLASS_LABEL, QUEUE_LABEL};

/// The finalizer on every Workload the operator writes, Kueue's own (its job integrations keep it
/// on theirs until their job has stopped): a Workload deleted by hand keeps its quota reserved
/// until the object's cloud work is gone and the operator lets it go.
pub const IN_USE_FINALIZER: &str = "kueue.x-k8s.io/resource-in-use";

/// The extended resource Kueue counts TPU chips in: the one GKE's TPU device plugin exposes and
/// the team's GKE TPU pods request, so one ClusterQueue quota covers both.
pub const TPU_RESOURCE: &str = "google.com/tpu";
