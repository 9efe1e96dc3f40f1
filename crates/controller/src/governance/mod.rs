//! What the operator allows and what it costs: tenancy policy (`TpuPolicy` admission, usage and
//! adoption), the price table behind every cost figure, and the orphan sweeper.

pub mod pricing;
pub mod sweeper;
pub mod tenancy;
