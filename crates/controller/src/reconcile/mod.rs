//! The reconcile pass, written once, and the controller around it.
//!
//! - [`kind`]: the [`Kind`](kind::Kind) trait: what a kind supplies (its target, what it
//!   observes, a pure plan, how it acts, a pure status, what it waits on, its cleanup step).
//! - [`plan`]: the one shape of every kind's plan (an action and a verdict).
//! - [`pass`]: the apply pass; [`deletion`]: the deletion pass. They own the sequence, every
//!   tenancy decision, the one status write ([`status`]), Events, the cloud-watch registration
//!   ([`wait`]) and the requeue.
//! - [`driver`]: the controller around a pass (settled skip, fair share, finalizer, backoff).
//! - [`context`]: the plain bag of handles a pass uses; [`handles`]: the narrow views of it a
//!   kind's hooks get.

// `ReconcileError` (shared, crate::runtime::error) carries a `GcpError` inline; boxing it is a
// crate-wide decision, not one for this module.
#![allow(clippy::result_large_err)]

pub mod context;
pub mod deletion;
pub mod driver;
pub mod handles;
pub mod kind;
pub mod pass;
pub mod plan;
pub mod report;
pub mod retry;
pub mod status;
pub mod wait;
pub mod waits;

#[cfg(test)]
mod tests;
