//! What a batch holds, as the namespace's usage counts it: no chips, only its estimated spend
//! while it has one. Governance lists batches through [`HOLDINGS`] without knowing what a batch
//! is.

use kube::ResourceExt;
use tpu_operator_api::preprocess_batch::PreprocessBatch;

use crate::governance::{
    pricing::PriceTable,
    tenancy::{Holding, HoldingsOf},
};

/// How usage lists a namespace's batches.
pub const HOLDINGS: HoldingsOf<PreprocessBatch> = HoldingsOf {
    action: "list PreprocessBatches for the namespace's usage",
    holding,
    conditions: |b| b.status.as_ref().map(|st| st.conditions.as_slice()),
};

/// A batch holds no chips, only its estimated spend while it has one (its status says it; the
/// price table is not needed).
pub fn holding(b: &PreprocessBatch, _prices: &PriceTable) -> Option<Holding> {
    let per_hour = b
        .status
        .as_ref()
        .and_then(|s| s.estimated_cost.as_ref())
        .map_or(0.0, |c| c.per_hour_usd);
    (per_hour > 0.0).then(|| Holding::new(b.uid(), format!("PreprocessBatch {}", b.name_any()), 0, per_hour))
}
