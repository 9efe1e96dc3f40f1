//! Reconcilers for the tpu-operator custom resources.
//!
//! Every kind follows the same shape: guards → finalizer → observe → plan (pure) → act (at most one
//! mutating cloud call) → report (status by server-side apply). Shared machinery lives at the top
//! level of this crate; each kind has its own module.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod clock;
pub mod metrics;
