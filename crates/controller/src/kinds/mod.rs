//! One module per custom resource, each implementing [`Kind`](crate::reconcile::kind::Kind) in
//! the same files (`spec`, `observe`, `plan`, `act`, `status`). The order of a pass is the
//! pass's own ([`crate::reconcile::pass`]). Each kind also says what its objects hold and ask
//! of the namespace's policy (its `holding` and `policy` modules), so governance names no kind.

pub mod links;
pub mod preprocess_batch;
pub mod tpu_slice;
pub mod training_pipeline;

use crate::governance::tenancy::HoldingsLister;

/// Every kind's part of a namespace's usage, in the order usage names holders (slices, pipelines'
/// Vertex jobs, batches): given to the context when the process starts
/// ([`crate::Context::with_holdings`]).
pub fn holdings() -> Vec<Box<dyn HoldingsLister>> {
    vec![
        Box::new(tpu_slice::holding::HOLDINGS),
        Box::new(training_pipeline::holding::HOLDINGS),
        Box::new(preprocess_batch::holding::HOLDINGS),
    ]
}
