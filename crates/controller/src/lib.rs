//! Reconcilers for the tpu-operator custom resources, in five folders, each importing only
//! from the ones before it, and the orphan sweeper:
//!
//! - [`runtime`]: the machinery every reconcile runs on, knowing no kind and no policy (settings,
//!   the compact watch cache and settled-object skip, the cloud watch, backoff, fair share,
//!   Events, metrics, the clock, the error type).
//! - [`governance`]: what is allowed and what it costs (tenancy policy, pricing).
//! - [`reconcile`]: the pass, written once (its order: [`reconcile::pass`]), the controller
//!   around it and the [`Context`] it runs with.
//! - [`kueue`]: Kueue as the admission gate of shared TPU capacity (the Workload contract).
//! - [`kinds`]: one folder per custom resource, each implementing
//!   [`Kind`](reconcile::kind::Kind): only what differs between kinds.
//! - [`sweeper`]: the orphan sweeper, a task beside the controllers (runtime, governance and the
//!   reconcile context below it; nothing but the binary above it).

pub mod governance;
pub mod kinds;
pub mod kueue;
pub mod reconcile;
pub mod runtime;
pub mod sweeper;

pub use reconcile::context::Context;
pub use runtime::{
    config::ControllerConfig,
    error::{ReconcileError, Result},
    shutdown::{Shutdown, never_shutdown, shutdown_on},
};

/// The finalizer every kind uses to clean up its cloud resources before the object goes away
/// (declared with the API contract).
pub use tpu_operator_api::FINALIZER;
