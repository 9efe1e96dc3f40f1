//! The emulated world every tpu-operator harness starts from, in one place:
//!
//! * [`target()`] / [`TestCluster`]: the Kubernetes switch. An in-process `kube-emulator` by
//!   default, the real control plane with `TPU_OPERATOR_KUBE=real` plus `KUBECONFIG` (as
//!   `tests/control-plane/up.sh run -- ...` sets them); a kubeconfig file for kubectl / helm
//!   either way.
//! * [`emulators`]: kube-emulator with the project's CRDs, gcp-emulator on a manual clock.
//! * [`ContextSpec`]: a controller `Context` against gcp-emulator, as an operator process builds it.
//! * [`TestEnv`]: the controller suites' harness on top of those (one namespace per test on the
//!   real server), with [`objects`] to create and `wait_for` / `wait_gone` to wait on them.
//! * [`Tenant`] ([`identity`]): who acts in a tenancy test: a namespace's `edit` ServiceAccount
//!   with the chart's aggregated roles on the real server, the admin client on kube-emulator.
//!
//! Users: the controller e2e suites, `tpu-operator-reliability` (suites and benches), the operator's
//! RBAC suite, the differential suite's switch, and `tpu-operator local` (behind the operator's
//! `local` feature, which is why nothing here may depend on a test-only crate).

pub mod cluster;
pub mod context;
pub mod emulators;
pub mod env;
pub mod identity;
pub mod objects;
mod real_server;
pub mod target;
mod wait;

pub use cluster::{ConnectError, TestCluster};
pub use context::{ContextError, ContextSpec, Polls};
pub use emulators::start_time;
pub use env::{EMULATOR_NS, TestEnv};
pub use identity::Tenant;
pub use objects::{NamespacedObject, create_in, from_yaml};
pub use target::{
    ClientError, KUBECONFIG_ENV, TARGET_ENV, Target, TargetError, real_client, target, target_from,
};
pub use wait::{Done, passes, until, wait_limit};
