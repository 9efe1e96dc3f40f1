//! API types of tpu-operator: the `TpuSlice`, `PreprocessBatch` and `TrainingPipeline` custom
//! resources (group `tpu-operator.dev`, version `v1beta1`; `v1alpha1` is served beside it with the same schema), their status and condition vocabulary,
//! the admission-time validation rules that ship in the CRD schema, and the pure helpers the
//! controllers share (accelerator arithmetic, cloud-name derivation, identity labels).
//!
//! This crate deliberately has no Kubernetes client and no GCP dependency: everything here is data
//! and pure functions, so it can be unit-tested without any server.
// kube's `#[kube(printcolumn(..., type_ = "string", ...))]` repeats the same key/value in several
// printer columns, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod accelerator;
pub mod admission;
pub mod cel;
pub mod common;
pub mod conditions;
pub mod crds;
pub mod duration;
pub mod kueue;
pub mod naming;
pub mod preprocess_batch;
pub mod reference;
pub mod schema;
pub mod text;
pub mod tpu_policy;
pub mod tpu_slice;
pub mod training_pipeline;

pub use common::{ContainerSpec, CostEstimate, DeletionPolicy, EnvVar, KeepsNewerFields, NewerFields};

common::keeps_newer_fields!(
    TpuSliceStatus,
    PreprocessBatchStatus,
    TrainingPipelineStatus,
    TpuPolicyStatus
);
pub use preprocess_batch::{BatchTemplate, PreprocessBatch, PreprocessBatchSpec, PreprocessBatchStatus};
pub use tpu_policy::{TpuPolicy, TpuPolicySpec, TpuPolicyStatus};
pub use tpu_slice::{TpuSlice, TpuSliceSpec, TpuSliceStatus};
pub use training_pipeline::{TrainingPipeline, TrainingPipelineSpec, TrainingPipelineStatus};

/// API group of every tpu-operator custom resource.
pub const GROUP: &str = "tpu-operator.dev";

/// The finalizer every kind carries until its cloud resources are cleaned up (or orphaned).
pub const FINALIZER: &str = "tpu-operator.dev/cleanup";
