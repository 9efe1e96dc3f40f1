//! Reconcilers for the tpu-operator custom resources.
//!
//! Every kind follows the same shape: guards → finalizer → observe → plan (pure) → act (at most one
//! mutating cloud call) → report (status by server-side apply). Shared machinery lives at the top
//! level of this crate; each kind has its own module.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod clock;
pub mod cloud_watch;
pub mod context;
pub mod error;
pub mod events;
pub mod metrics;
pub mod policy;
pub mod preprocess_batch;
pub mod pricing;
pub mod report;
pub mod settled;
pub mod sweeper;
pub mod tenancy;
pub mod tpu_slice;
pub mod training_pipeline;
pub mod watched;

pub use context::{Context, ControllerConfig};
pub use error::{ReconcileError, Result};

/// The finalizer every kind uses to clean up its cloud resources before the object goes away.
pub const FINALIZER: &str = "tpu-operator.dev/cleanup";

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
