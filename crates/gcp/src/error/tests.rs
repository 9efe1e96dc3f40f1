use bytes::Bytes;
use google_cloud_gax::error::{
    CredentialsError, Error as GaxError,
    rpc::{Code, Status},
};
use reqwest::header::HeaderMap;

use super::*;

/// A gax error as the REST transport builds it from an HTTP error response.
fn from_http_body(http_status: u16, body: &str) -> GaxError {
    let body = Bytes::from(body.to_string());
    match Status::try_from(&body) {
        Ok(status) => GaxError::service_with_http_metadata(status, Some(http_status), None),
        Err(_) => GaxError::http(http_status, HeaderMap::new(), body),
    }
}

fn esf(http: u16, status: &str, message: &str) -> String {
    format!(r#"{{"error":{{"code":{http},"message":"{message}","status":"{status}"}}}}"#)
}

#[test]
fn classifies_esf_error_bodies() {
    let cases: &[(u16, &str, ErrorKind, bool)] = &[
        (404, "NOT_FOUND", ErrorKind::NotFound, false),
        (409, "ALREADY_EXISTS", ErrorKind::AlreadyExists, false),
        (409, "ABORTED", ErrorKind::Transient, true),
        // A 429 on a read is a request-rate limit: retried with backoff.
        (429, "RESOURCE_EXHAUSTED", ErrorKind::ResourceExhausted, true),
        (403, "PERMISSION_DENIED", ErrorKind::PermissionDenied, false),
        (401, "UNAUTHENTICATED", ErrorKind::Unauthenticated, false),
        (400, "FAILED_PRECONDITION", ErrorKind::FailedPrecondition, false),
        (400, "INVALID_ARGUMENT", ErrorKind::InvalidArgument, false),
        (400, "OUT_OF_RANGE", ErrorKind::InvalidArgument, false),
        (503, "UNAVAILABLE", ErrorKind::Transient, true),
        (504, "DEADLINE_EXCEEDED", ErrorKind::Transient, true),
        (500, "INTERNAL", ErrorKind::Transient, true),
        (500, "UNKNOWN", ErrorKind::Transient, true),
        (499, "CANCELLED", ErrorKind::Cancelled, false),
        (501, "UNIMPLEMENTED", ErrorKind::Other, false),
        (500, "DATA_LOSS", ErrorKind::Other, false),
    ];
    for &(http, status, kind, retryable) in cases {
        let gax = from_http_body(http, &esf(http, status, "boom"));
        let err = GcpError::from_gax(Service::Tpu, "nodes.get", "projects/p/locations/z/nodes/n", &gax);
        assert_eq!(err.kind, kind, "{status}");
        assert_eq!(err.is_retryable(), retryable, "{status}");
        assert_eq!(err.http_status, Some(http), "{status}");
        // gax parses an explicit UNKNOWN like a missing `status`; the HTTP status decides then.
        let expected_status = (status != "UNKNOWN").then_some(status);
        assert_eq!(err.status, expected_status, "{status}");
        assert_eq!(err.message, "boom");
    }
}

#[test]
fn falls_back_to_http_status_without_a_status_name() {
    let cases: &[(u16, ErrorKind)] = &[
        (400, ErrorKind::InvalidArgument),
        (401, ErrorKind::Unauthenticated),
        (403, ErrorKind::PermissionDenied),
        (404, ErrorKind::NotFound),
        (409, ErrorKind::AlreadyExists),
        (412, ErrorKind::FailedPrecondition),
        (429, ErrorKind::ResourceExhausted),
        (408, ErrorKind::Transient),
        (500, ErrorKind::Transient),
        (502, ErrorKind::Transient),
        (503, ErrorKind::Transient),
        (418, ErrorKind::Other),
    ];
    for &(http, kind) in cases {
        // GCS-style legacy body (no `status`), then a non-JSON proxy page.
        let legacy = format!(r#"{{"error":{{"code":{http},"message":"m","errors":[{{"reason":"x"}}]}}}}"#);
        let err = GcpError::from_gax(
            Service::Storage,
            "objects.list",
            "b",
            &from_http_body(http, &legacy),
        );
        assert_eq!(err.kind, kind, "legacy body, HTTP {http}");
        assert_eq!(err.status, None, "legacy body, HTTP {http}");
        assert_eq!(err.reason.as_deref(), Some("x"));
        let html = from_http_body(http, "<html>bad gateway</html>");
        let err = GcpError::from_gax(Service::Dataproc, "batches.get", "b", &html);
        assert_eq!(err.kind, kind, "html body, HTTP {http}");
    }
}

#[test]
fn rate_limits_are_retryable_but_stockouts_are_not() {
    let rate_limited = r#"{"error":{"code":429,"message":"Quota exceeded for quota metric 'Read requests'","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{}}]}}"#;
    let err = GcpError::from_gax(Service::Tpu, "nodes.get", "n", &from_http_body(429, rate_limited));
    assert_eq!(err.kind, ErrorKind::ResourceExhausted);
    assert_eq!(err.reason.as_deref(), Some("RATE_LIMIT_EXCEEDED"));
    assert!(err.is_rate_limited());
    assert!(err.is_retryable());

    let stockout = esf(429, "RESOURCE_EXHAUSTED", "There is no more capacity in the zone");
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &stockout));
    assert_eq!(err.kind, ErrorKind::ResourceExhausted);
    assert!(!err.is_rate_limited());
    assert!(!err.is_retryable());

    // Without a reason, what the call asked for decides: only capacity-taking calls wait.
    let bare = esf(429, "RESOURCE_EXHAUSTED", "Quota exceeded");
    for (method, rate_limited) in [
        ("nodes.create", false),
        ("queuedResources.create", false),
        ("operation", false),
        ("nodes.start", false),
        ("batches.create", false),
        ("nodes.delete", true),
        ("nodes.get", true),
        ("customJobs.list", true),
        ("customJobs.cancel", true),
    ] {
        let err = GcpError::from_gax(Service::Tpu, method, "n", &from_http_body(429, &bare));
        assert_eq!(err.is_rate_limited(), rate_limited, "{method}");
        assert_eq!(err.is_retryable(), rate_limited, "{method}");
    }
}

/// Issue 21 item 4: quota and stockout arrive with the same code; the details (or the known
/// quota texts) tell them apart, in a call's body and in a failed operation alike.
#[test]
fn quota_and_stockout_are_told_apart_by_their_details() {
    let quota = r#"{"error":{"code":429,"message":"Quota limit 'TPUV6EPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone us-central2-b.","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RESOURCE_QUOTA_EXCEEDED","domain":"googleapis.com",
                        "metadata":{"service":"tpu.googleapis.com","quota_metric":"tpu.googleapis.com/v6e_chips","quota_limit":"TPUV6EPodPerProjectPerZoneForTPUAPI"}},
                       {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","description":"Quota limit exceeded",
                        "apiService":"tpu.googleapis.com","quotaMetric":"tpu.googleapis.com/v6e_chips","quotaId":"TPUV6EPodPerProjectPerZoneForTPUAPI"}]}]}}"#;
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, quota));
    assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
    assert!(err.quota.as_ref().unwrap().quota_failure);
    assert_eq!(err.quota_metric(), Some("tpu.googleapis.com/v6e_chips"));
    assert!(!err.is_retryable());

    // QuotaFailure alone (no ErrorInfo), with only a subject.
    let bare_failure = r#"{"error":{"code":429,"message":"exhausted","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","description":"d"}]}]}}"#;
    let err = GcpError::from_gax(
        Service::Tpu,
        "nodes.create",
        "p",
        &from_http_body(429, bare_failure),
    );
    assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
    assert_eq!(err.quota_metric(), Some("project:p"));

    let stockout = r#"{"error":{"code":429,"message":"There is no more capacity in the zone","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"STOCKOUT","domain":"tpu.googleapis.com","metadata":{}}]}}"#;
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, stockout));
    assert_eq!(err.exhaustion(), Some(Exhaustion::Stockout));
    assert_eq!(err.quota_metric(), None);

    // No details: the gcloud-seen quota text is quota, anything else is unknown.
    let text = esf(
        429,
        "RESOURCE_EXHAUSTED",
        "Quota limit 'TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone us-central1-a.",
    );
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &text));
    assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
    let plain = esf(429, "RESOURCE_EXHAUSTED", "There is no more capacity in the zone");
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &plain));
    assert_eq!(err.exhaustion(), Some(Exhaustion::Unknown));
    let read = GcpError::from_gax(Service::Tpu, "nodes.get", "n", &from_http_body(429, quota));
    assert_eq!(read.exhaustion(), Some(Exhaustion::RateLimit));
    let other = GcpError::new(ErrorKind::NotFound, Service::Tpu, "nodes.get", "n", "gone");
    assert_eq!(other.exhaustion(), None);

    // The same details inside a failed create operation (LRO `error`, code 8).
    let op: google_cloud_longrunning::model::Operation = serde_json::from_str(
            r#"{"name":"projects/p/locations/z/operations/o","done":true,"error":{"code":8,"message":"Quota limit exceeded",
                "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"subject":"project:p","quotaMetric":"tpu.googleapis.com/v6e_chips"}]}]}}"#,
        )
        .unwrap();
    let crate::lro::OperationState::Failed(err) = crate::lro::operation_state(Service::Tpu, &op) else {
        panic!("a failed operation");
    };
    assert_eq!(err.exhaustion(), Some(Exhaustion::Quota));
    assert_eq!(err.quota_metric(), Some("tpu.googleapis.com/v6e_chips"));
}

#[test]
fn per_request_error_ids_stay_out_of_the_message() {
    let body = esf(
        429,
        "RESOURCE_EXHAUSTED",
        "There is no more capacity in the zone [EID: 0x1f]",
    );
    let err = GcpError::from_gax(Service::Tpu, "nodes.create", "p", &from_http_body(429, &body));
    assert_eq!(err.stable_message(), "There is no more capacity in the zone");
    assert_eq!(err.error_id(), Some("0x1f"));
    assert!(!err.to_string().contains("EID"), "{err}");
    let plain = GcpError::new(
        ErrorKind::Other,
        Service::Tpu,
        "m",
        "t",
        "an [EID: x] in the middle",
    );
    assert_eq!(plain.stable_message(), "an [EID: x] in the middle");
    assert_eq!(plain.error_id(), None);
}

#[test]
fn client_side_failures_are_classified() {
    let timeout = GaxError::timeout("attempt took longer than 30s");
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &timeout).kind,
        ErrorKind::Transient
    );
    let connect = GaxError::connect("connection refused");
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &connect).kind,
        ErrorKind::Transient
    );
    let io = GaxError::io("connection reset");
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &io).kind,
        ErrorKind::Transient
    );
    let binding = GaxError::binding("name does not match projects/*/locations/*/nodes/*");
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &binding).kind,
        ErrorKind::InvalidArgument
    );
    let deser = GaxError::deser("expected a string");
    let err = GcpError::from_gax(Service::Tpu, "m", "t", &deser);
    assert_eq!(err.kind, ErrorKind::Unreadable);
    assert!(err.is_retryable());
    let auth = GaxError::authentication(CredentialsError::from_msg(false, "no ADC found"));
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &auth).kind,
        ErrorKind::Unauthenticated
    );
    let auth = GaxError::authentication(CredentialsError::from_msg(true, "metadata server timeout"));
    assert_eq!(
        GcpError::from_gax(Service::Tpu, "m", "t", &auth).kind,
        ErrorKind::Transient
    );
}

#[test]
fn operation_status_maps_by_code() {
    let status = Status::default()
        .set_code(Code::ResourceExhausted)
        .set_message("stockout in us-central2-b");
    let err = GcpError::from_status(
        Service::Tpu,
        "operation",
        "projects/p/locations/z/operations/o",
        &status,
    );
    assert_eq!(err.kind, ErrorKind::ResourceExhausted);
    assert_eq!(err.http_status, None);
    assert_eq!(err.status, Some("RESOURCE_EXHAUSTED"));
    let cancelled = Status::default()
        .set_code(Code::Cancelled)
        .set_message("cancelled");
    let err = GcpError::from_status(Service::Dataproc, "operation", "op", &cancelled);
    assert_eq!(err.kind, ErrorKind::Cancelled);
}

#[test]
fn display_names_service_method_target_and_codes() {
    let gax = from_http_body(404, &esf(404, "NOT_FOUND", "TPU node not found"));
    let err = GcpError::from_gax(Service::Tpu, "nodes.get", "projects/p/locations/z/nodes/n", &gax);
    assert_eq!(
        err.to_string(),
        "tpu nodes.get projects/p/locations/z/nodes/n: not_found (NOT_FOUND, HTTP 404): TPU node not found"
    );
    let err = GcpError::new(
        ErrorKind::InvalidArgument,
        Service::Storage,
        "objects.list",
        "s3://x",
        "bad",
    );
    assert_eq!(
        err.to_string(),
        "storage objects.list s3://x: invalid_argument: bad"
    );
}

#[test]
fn not_found_helpers() {
    let missing = GcpError::new(ErrorKind::NotFound, Service::Dataproc, "batches.get", "b", "gone");
    let denied = GcpError::new(
        ErrorKind::PermissionDenied,
        Service::Dataproc,
        "batches.get",
        "b",
        "no",
    );
    assert!(is_not_found::<()>(&Err(missing.clone())));
    assert!(!is_not_found::<()>(&Err(denied.clone())));
    assert!(!is_not_found(&Ok(1)));
    assert_eq!(ignore_not_found::<u8>(Err(missing)), Ok(None));
    assert_eq!(ignore_not_found(Ok(7)), Ok(Some(7)));
    assert_eq!(ignore_not_found::<u8>(Err(denied.clone())), Err(denied));
}
