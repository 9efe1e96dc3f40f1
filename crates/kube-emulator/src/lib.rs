//! A local, in-memory Kubernetes API server for kube-rs controllers and kubectl.
#![forbid(unsafe_code)]
#![recursion_limit = "256"]

pub mod crd;
pub mod errors;
pub mod fieldset;
pub mod meta;
pub mod patch;
pub mod resources;
pub mod selectors;
pub mod ssa;
pub mod store;
pub mod validation;
