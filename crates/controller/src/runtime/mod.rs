//! The machinery every kind's reconcile runs on, knowing no kind and no policy: the settings
//! ([`config`]), the compact watch cache and the settled-object skip, the cloud watch, per-object
//! backoff, fair share of the workers, Event recording, metrics, the clock, the error type and
//! the values shared between passes by type ([`shared`]).
//! Each piece takes the handles it uses explicitly; none reaches back into the reconcile
//! [`Context`](crate::reconcile::context::Context).

pub mod backoff;
pub mod capacity;
pub mod clock;
pub mod cloud_watch;
pub mod compressed;
pub mod config;
pub mod error;
pub mod events;
pub mod fair_share;
pub mod lean;
pub mod listing;
pub mod metrics;
pub mod refused;
pub mod requeue;
pub mod settled;
pub mod shared;
pub mod shutdown;
pub mod spread;
pub mod stalled_on;
pub mod watched;
