//! gcp-emulator's API suites, one module each, in one test binary (one link instead of twelve;
//! issue 34). One suite: `cargo test -p gcp-emulator --test apis vertex::`.

/// An emulator on a manual clock, the official clients pointed at it, a clock ticker.
mod common;

mod capacity;
mod compute;
mod compute_maintenance;
mod dataproc;
mod dataproc_ttl;
mod golden;
mod iam;
mod maintenance;
mod scarcity;
mod storage;
mod tpu;
mod vertex;
mod vertex_flex_start;
mod vertex_spot_preemption;
mod wire_facts;
