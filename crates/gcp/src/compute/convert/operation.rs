//! Compute Engine errors and operations in the TPU API's terms: canonical codes and long-running
//! operations.

use google_cloud_compute_v1::model as compute;
use google_cloud_longrunning::model::{Operation as Lro, operation};
use google_cloud_rpc::model::{ErrorInfo, Status};
use google_cloud_wkt::Any;

/// The canonical code (`google.rpc.Code` number) of a Compute Engine error code, falling back
/// on the HTTP status. Capacity and quota codes are RESOURCE_EXHAUSTED with the Compute code as
/// `ErrorInfo.reason`, which [`crate::GcpError::exhaustion`] reads.
pub fn code_number(code: &str, http: Option<i32>) -> i32 {
    match code {
        c if c.contains("RESOURCE_POOL_EXHAUSTED") || c.contains("QUOTA") || c == "STOCKOUT" => 8,
        "RESOURCE_ALREADY_EXISTS" | "alreadyExists" => 6,
        "RESOURCE_NOT_FOUND" | "notFound" => 5,
        "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE" | "resourceInUseByAnotherResource" | "resourceNotReady" => 9,
        _ => match http {
            Some(400) => 3,
            Some(401) => 16,
            Some(403) => 7,
            Some(404) => 5,
            Some(409) => 6,
            Some(412) => 9,
            Some(429) => 8,
            Some(503) => 14,
            Some(c) if c >= 500 => 13,
            _ => 2,
        },
    }
}

pub(super) fn rpc_status(code: i32, message: &str, reason: Option<&str>) -> Status {
    quota_status(code, message, reason, None)
}

/// [`rpc_status`] with the operation error's `quotaInfo` (Compute Engine's `QuotaExceededInfo`:
/// `metricName`, `limitName`, `limit`) as the ErrorInfo's `quota_metric`, `quota_limit` and
/// `quota_limit_value`, the keys googleapis `error_reason.proto` gives quota errors, so a
/// Compute quota names its metric and limit as a TPU API one does.
fn quota_status(
    code: i32,
    message: &str,
    reason: Option<&str>,
    quota: Option<&compute::QuotaExceededInfo>,
) -> Status {
    let mut status = Status::new().set_code(code).set_message(message);
    let Some(reason) = reason.filter(|r| !r.is_empty()) else {
        return status;
    };
    let mut info = ErrorInfo::new()
        .set_reason(reason)
        .set_domain("compute.googleapis.com");
    if let Some(q) = quota {
        let mut meta = std::collections::HashMap::new();
        if let Some(m) = &q.metric_name {
            meta.insert("quota_metric".to_string(), m.clone());
        }
        if let Some(l) = &q.limit_name {
            meta.insert("quota_limit".to_string(), l.clone());
        }
        if let Some(v) = q.limit {
            meta.insert("quota_limit_value".to_string(), format!("{v}"));
        }
        info = info.set_metadata(meta);
    }
    if let Ok(detail) = Any::from_msg(&info) {
        status = status.set_details([detail]);
    }
    status
}

/// A Compute Engine operation as a long-running operation named `name` (the operation's
/// `projects/{p}/zones|regions/{l}/operations/{op}` path), done when its status is DONE.
pub fn operation(name: &str, op: &compute::Operation) -> Lro {
    let done = op.status == Some(compute::operation::Status::Done);
    let mut lro = Lro::new().set_name(name).set_done(done);
    if !done {
        return lro;
    }
    let first = op.error.as_ref().and_then(|e| e.errors.first());
    if let Some(first) = first {
        let code = first.code.clone().unwrap_or_default();
        let message = first
            .message
            .clone()
            .or_else(|| op.http_error_message.clone())
            .unwrap_or_default();
        let quota = first.error_details.iter().find_map(|d| d.quota_info.as_ref());
        let status = quota_status(
            code_number(&code, op.http_error_status_code),
            &message,
            Some(&code),
            quota,
        );
        lro = lro.set_result(operation::Result::Error(Box::new(status)));
    } else {
        lro = lro.set_response(Any::from_msg(&google_cloud_wkt::Empty::default()).unwrap_or_default());
    }
    lro
}
