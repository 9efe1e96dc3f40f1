//! The machinery every kind's reconcile runs on: the reconcile [`driver`] (the shape every kind
//! shares), the [`Context`](context::Context), the compact watch cache and the settled-object
//! skip, the cloud watch, per-object backoff and the error-retry policy, status and Event
//! reporting, metrics, the clock and the error type.

pub mod backoff;
pub mod clock;
pub mod cloud_watch;
pub mod compressed;
pub mod context;
pub mod driver;
pub mod error;
pub mod events;
pub mod fair_share;
pub mod metrics;
pub mod refused;
pub mod report;
pub mod requeue;
pub mod retry;
pub mod settled;
pub mod watched;
