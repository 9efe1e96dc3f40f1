//! Reconcilers for the tpu-operator custom resources, in four folders, each importing only
//! from the ones before it:
//!
//! - [`runtime`]: the machinery every reconcile runs on, knowing no kind and no policy (settings,
//!   the compact watch cache and settled-object skip, the cloud watch, backoff, fair share,
//!   Events, metrics, the clock, the error type).
//! - [`governance`]: what is allowed and what it costs (tenancy policy, pricing), and the orphan
//!   sweeper.
//! - [`kueue`]: Kueue as the admission gate of shared TPU capacity (the Workload contract).
//! - [`reconcile`]: the pass, written once (target → policy → observe → plan → admission → act →
//!   status → wait), the controller around it and the [`Context`] it runs with.
//! - [`kinds`]: one folder per custom resource, each implementing
//!   [`Kind`](reconcile::kind::Kind): only what differs between kinds.

pub mod governance;
pub mod kinds;
pub mod kueue;
pub mod reconcile;
pub mod runtime;

pub use reconcile::context::Context;
pub use runtime::{
    config::ControllerConfig,
    error::{ReconcileError, Result},
};

/// The finalizer every kind uses to clean up its cloud resources before the object goes away
/// (declared with the API contract).
pub use tpu_operator_api::FINALIZER;

/// Resolves when the operator should stop: controllers stop taking new work and let in-flight
/// reconciles finish (`Controller::graceful_shutdown_on`). Cloneable so every controller shares it.
pub type Shutdown = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// A `Shutdown` from any future (a signal handler, a lease loss, a test's oneshot).
pub fn shutdown_on(fut: impl std::future::Future<Output = ()> + Send + 'static) -> Shutdown {
    use futures::FutureExt;
    fut.boxed().shared()
}

/// A `Shutdown` that never fires.
pub fn never_shutdown() -> Shutdown {
    shutdown_on(futures::future::pending())
}
