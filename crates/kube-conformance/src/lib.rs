//! Kubernetes API conformance for tpu-operator's tests.
//!
//! * [`target()`]: the harness switch. Suites call it to learn whether to start an in-process
//!   `kube-emulator` (default) or to use a real control plane (`TPU_OPERATOR_KUBE=real` plus
//!   `KUBECONFIG`, as `tests/control-plane/up.sh run -- ...` sets them); [`real_client`] connects
//!   to the latter. [`TestCluster::connect`] does both in one call and also hands out a kubeconfig
//!   file (kubectl, helm) for whichever cluster it picked.
//! * The differential suite's machinery: [`scenario::run`] sends one fixed request sequence to a
//!   server and records a [`Transcript`]; [`compare`] lines up two transcripts after
//!   [`normalize::Normalizer`] replaced uids, timestamps, resourceVersions and generated names.

pub mod cluster;
pub mod diff;
pub mod known;
pub mod normalize;
pub mod report;
pub mod scenario;
pub mod target;
pub mod transcript;

pub use cluster::{ConnectError, TestCluster};
pub use target::{
    ClientError, KUBECONFIG_ENV, TARGET_ENV, Target, TargetError, real_client, target, target_from,
};
pub use transcript::{Comparison, Exchange, StepDifference, Transcript, compare};
