//! Reliability harness for tpu-operator: the two emulators, an operator that can be killed
//! (in-process controllers as abortable tokio tasks, or the real `tpu-operator` binary with
//! SIGKILL), object fixtures for the three kinds, and the invariants every suite checks.
//!
//! The suites (`tests/`) and the long runs (`src/bin/`) are described in `docs/reliability.md`
//! and `docs/benchmarks.md`.

pub mod budget_crossing;
pub mod corrupt;
pub mod crash;
pub mod fixtures;
pub mod invariants;
pub mod kube_faults;
pub mod process;
pub mod world;

pub use invariants::{Expected, Violations};
pub use world::World;

/// A seeded generator: every random choice of a suite comes from one of these, so a failure is
/// reproduced by its seed.
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// The number after flag `name` on a bench's command line (`--n 1000`), or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("number"))
        .unwrap_or(default)
}

/// Logs of the in-process controllers to stderr when `RELIABILITY_LOG` is set (an `EnvFilter`
/// such as `tpu_operator_controller=debug`).
pub fn init_logs() {
    if let Ok(filter) = std::env::var("RELIABILITY_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}
