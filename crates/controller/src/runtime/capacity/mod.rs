//! Getting TPUs when they are scarce, the parts every kind shares and none owns: why creates
//! fail, counted by reason ([`metrics`]).

pub mod metrics;

pub use metrics::CapacityMetrics;
