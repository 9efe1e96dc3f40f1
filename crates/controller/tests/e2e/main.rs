//! The controllers' end-to-end suites, one module each, in one test binary: linking one
//! binary instead of 23 is what a controller change costs before its tests run (issue 34;
//! docs/testing.md, "Measurements"). One suite: `cargo test -p tpu-operator-controller --test e2e
//! training_pipeline::`; one test: `... --test e2e training_pipeline::quickstart_reaches_succeeded`.

/// Slices, policies and helpers the tenancy suites share.
mod tenant;

mod budget_suspension;
mod budgets;
mod capacity_plan;
mod checkpoints;
mod cloud_watch;
mod compute_engine;
mod create_failures;
mod create_limiter;
mod early_start;
mod events;
mod gitops_health;
mod google_identity;
mod guardrails;
mod harness;
mod hostile_billing;
mod hostile_holds;
mod hostile_references;
mod hostile_tenant;
mod kueue;
mod kueue_eta;
mod kueue_pipelines;
mod kueue_unlabelled;
mod kueue_wakes;
mod kueue_workload;
mod large_objects;
mod maintenance;
mod multislice;
mod preprocess_batch;
mod preprocess_ttl;
mod refusal_wakes;
mod refused_calls;
mod status_writes;
mod stockout_memory;
mod sweeper;
mod tenancy_admission;
mod time_spent;
mod tpu_capacity;
mod tpu_slice;
mod training_pipeline;
mod variants;
mod version_skew;
mod vertex_duplicates;
mod vertex_spot;
/// Waiting for a Vertex pipeline to train without letting its job end first.
mod vertex_training;
