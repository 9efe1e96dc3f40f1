//! One module per custom resource, each in the same shape: guards → finalizer → observe → plan
//! (pure) → act (at most one mutating cloud call) → report (status by server-side apply).

pub mod links;
pub mod preprocess_batch;
pub mod tpu_slice;
pub mod training_pipeline;
