//! Kubernetes API conformance of kube-emulator: the differential suite's machinery. Which server the
//! suite runs against is the `test-kit` crate's switch (`TPU_OPERATOR_KUBE`).
//!
//! [`scenario::run`] sends one fixed request sequence to a server and records a [`Transcript`];
//! [`compare`] lines up two transcripts after [`normalize::Normalizer`] replaced uids, timestamps,
//! resourceVersions and generated names.

pub mod diff;
pub mod known;
pub mod normalize;
pub mod report;
pub mod scenario;
pub mod transcript;

pub use transcript::{Comparison, Exchange, StepDifference, Transcript, compare};
