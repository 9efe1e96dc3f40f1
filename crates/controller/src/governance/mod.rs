//! What the operator allows and what it costs: tenancy policy (`TpuPolicy` admission, usage and
//! adoption), and the price table behind every cost figure.

pub mod pricing;
pub mod tenancy;
