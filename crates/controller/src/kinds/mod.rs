//! One module per custom resource, each implementing [`Kind`](crate::reconcile::kind::Kind) in
//! the same files (`spec`, `observe`, `plan`, `act`, `status`). The order of a pass is the
//! pass's own ([`crate::reconcile::pass`]).

pub mod links;
pub mod preprocess_batch;
pub mod tpu_slice;
pub mod training_pipeline;
