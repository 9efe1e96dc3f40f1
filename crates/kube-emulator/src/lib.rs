//! A local, in-memory Kubernetes API server for kube-rs controllers and kubectl.
#![forbid(unsafe_code)]
#![recursion_limit = "256"]

pub mod validation;
