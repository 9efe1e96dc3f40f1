//! Reconcilers for the tpu-operator custom resources, in three folders:
//!
//! - [`runtime`]: the machinery every reconcile runs on (the `Context`, the compact watch cache
//!   and settled-object skip, the cloud watch, backoff and the error-retry policy, status and
//!   Event reporting, metrics, the clock, the error type).
//! - [`governance`]: what is allowed and what it costs (tenancy policy, pricing, the orphan
//!   sweeper).
//! - [`kinds`]: one module per custom resource, each in the same shape: guards → finalizer →
//!   observe → plan (pure) → act (at most one mutating cloud call) → report (status by
//!   server-side apply).

pub mod governance;
pub mod kinds;
pub mod runtime;

pub use runtime::{
    context::{Context, ControllerConfig},
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
