//! Reading long-running operations without blocking on them.
//!
//! Controllers store an operation's name in status, requeue, and on a later reconcile fetch it
//! with `get_operation` and look at it with [`operation_state`] (done or not, error or not) or
//! [`operation_result`] (also decodes `response` into the expected message, e.g. a TPU `Node`).
//!
//! Note for Dataproc: a batch's create operation stays pending for the whole Spark run and also
//! completes *successfully* for a cancelled or failed batch (its `response` is the final `Batch`):
//! decide by `Batch.state`, not by operation success alone.

use google_cloud_gax::error::rpc::Status;
use google_cloud_longrunning::model::{Operation, operation};
use google_cloud_wkt::message::Message;

use crate::error::{ErrorKind, GcpError, Service};

/// Method label used for errors carried by a finished operation.
pub const OPERATION_METHOD: &str = "operation";

/// Where a long-running operation stands.
#[derive(Clone, Debug, PartialEq)]
pub enum OperationState<T> {
    /// Not done yet: poll again later.
    Pending,
    /// Done and successful, with the decoded response (`()` when not decoded).
    Succeeded(T),
    /// Done with an error (for example RESOURCE_EXHAUSTED for a TPU stockout, CANCELLED after a
    /// cancel), classified like a failed call.
    Failed(GcpError),
}

impl<T> OperationState<T> {
    pub fn is_done(&self) -> bool {
        !matches!(self, OperationState::Pending)
    }
}

/// Done / pending / failed, without looking at the response payload (delete, start, stop, ...).
pub fn operation_state(service: Service, op: &Operation) -> OperationState<()> {
    if !op.done {
        return OperationState::Pending;
    }
    match &op.result {
        Some(operation::Result::Error(status)) => OperationState::Failed(GcpError::from_status(
            service,
            OPERATION_METHOD,
            &op.name,
            &Status::from(&**status),
        )),
        _ => OperationState::Succeeded(()),
    }
}

/// Like [`operation_state`], decoding a successful operation's `response` into `T`
/// (`Node`, `QueuedResource`, `Batch`, ...).
///
/// Errors (not a failed operation, but an operation that cannot be read): the response's `@type`
/// is not `T`'s, or the operation is done with neither response nor error.
pub fn operation_result<T: Message>(service: Service, op: &Operation) -> Result<OperationState<T>, GcpError> {
    match operation_state(service, op) {
        OperationState::Pending => Ok(OperationState::Pending),
        OperationState::Failed(err) => Ok(OperationState::Failed(err)),
        OperationState::Succeeded(()) => {
            let Some(response) = op.response() else {
                return Err(unreadable(
                    service,
                    op,
                    "the operation is done but has neither response nor error",
                ));
            };
            response
                .to_msg::<T>()
                .map(OperationState::Succeeded)
                .map_err(|err| {
                    unreadable(
                        service,
                        op,
                        format!("cannot decode response as {}: {err}", T::typename()),
                    )
                })
        }
    }
}

fn unreadable(service: Service, op: &Operation, message: impl Into<String>) -> GcpError {
    GcpError::new(
        ErrorKind::Other,
        service,
        OPERATION_METHOD,
        op.name.clone(),
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_dataproc_v1::model::{Batch, batch};
    use google_cloud_tpu_v2::model::{Node, node};
    use serde_json::json;

    fn op(value: serde_json::Value) -> Operation {
        serde_json::from_value(value).expect("valid Operation JSON")
    }

    #[test]
    fn pending_operation() {
        let pending = op(json!({"name": "projects/p/locations/z/operations/o1"}));
        assert_eq!(operation_state(Service::Tpu, &pending), OperationState::Pending);
        assert_eq!(
            operation_result::<Node>(Service::Tpu, &pending),
            Ok(OperationState::Pending)
        );
        assert!(!operation_state(Service::Tpu, &pending).is_done());
    }

    #[test]
    fn done_operation_decodes_its_response() {
        let done = op(json!({
            "name": "projects/p/locations/z/operations/o1", "done": true,
            "response": {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node",
                         "name": "projects/p/locations/z/nodes/n1", "state": "READY"}
        }));
        let OperationState::Succeeded(node) = operation_result::<Node>(Service::Tpu, &done).unwrap() else {
            panic!("expected a decoded node");
        };
        assert_eq!(node.name, "projects/p/locations/z/nodes/n1");
        assert_eq!(node.state, node::State::Ready);
        assert_eq!(
            operation_state(Service::Tpu, &done),
            OperationState::Succeeded(())
        );

        let batch_done = op(json!({
            "name": "projects/p/regions/r/operations/o2", "done": true,
            "response": {"@type": "type.googleapis.com/google.cloud.dataproc.v1.Batch",
                         "name": "projects/p/locations/r/batches/b1", "state": 4}
        }));
        let OperationState::Succeeded(batch) =
            operation_result::<Batch>(Service::Dataproc, &batch_done).unwrap()
        else {
            panic!("expected a decoded batch");
        };
        assert_eq!(batch.state, batch::State::Cancelled);
    }

    #[test]
    fn failed_operation_is_classified() {
        let failed = op(json!({
            "name": "projects/p/locations/z/operations/o1", "done": true,
            "error": {"code": 8, "message": "no more capacity in zone us-central2-b"}
        }));
        let OperationState::Failed(err) = operation_result::<Node>(Service::Tpu, &failed).unwrap() else {
            panic!("expected a failure");
        };
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert_eq!(err.method, OPERATION_METHOD);
        assert_eq!(err.target, "projects/p/locations/z/operations/o1");
        assert_eq!(err.message, "no more capacity in zone us-central2-b");

        let cancelled = op(json!({"name": "o", "done": true, "error": {"code": 1, "message": "cancelled"}}));
        let OperationState::Failed(err) = operation_state(Service::Vertex, &cancelled) else {
            panic!("expected a failure");
        };
        assert_eq!(err.kind, ErrorKind::Cancelled);
    }

    #[test]
    fn unreadable_operations_are_errors() {
        let wrong_type = op(json!({
            "name": "o", "done": true,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"}
        }));
        let err = operation_result::<Node>(Service::Tpu, &wrong_type).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Other);
        assert!(err.message.contains("google.cloud.tpu.v2.Node"), "{err}");
        // Still fine when the payload is not needed (a delete's Empty response).
        assert_eq!(
            operation_state(Service::Tpu, &wrong_type),
            OperationState::Succeeded(())
        );

        let empty = op(json!({"name": "o", "done": true}));
        let err = operation_result::<Node>(Service::Tpu, &empty).unwrap_err();
        assert!(err.message.contains("neither response nor error"), "{err}");
    }
}
