//! When the operator stops: every controller and background task holds one [`Shutdown`].

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
