//! A cloud call Google refused (HTTP 403 `PERMISSION_DENIED`, 401 `UNAUTHENTICATED`), as status
//! says it: the service and method, what it addressed, and the IAM permission and predefined role
//! to grant the operator's Google service account (the roles of docs/install.md).
//!
//! The kinds report a refused create or delete themselves, with their own phase. Every other
//! refused call (a read, a list, a cancel, on any kind and backend) used to leave the pass with an
//! error and the status as it was: none at all for a slice whose first `nodes.get` was refused,
//! which kstatus judges `Current` (Flux `wait` passed), or a stale `Running`. The driver now writes
//! this message as `Stalled=True`, reason `PermissionDenied`, whenever a pass fails on a refusal.

use tpu_operator_gcp::{ErrorKind, GcpError, Service};

/// Whether Google refused the call for want of permission or credentials.
pub fn is_refusal(err: &GcpError) -> bool {
    matches!(err.kind, ErrorKind::PermissionDenied | ErrorKind::Unauthenticated)
}

/// The IAM permission a method needs: `tpu.nodes.get`, `aiplatform.customJobs.list`, ...
/// (`None` for an error carried by a finished operation: its method is not the call's).
pub fn permission(service: Service, method: &str) -> Option<String> {
    if method == "operation" || method.is_empty() {
        return None;
    }
    let prefix = match service {
        Service::Tpu => "tpu",
        Service::Dataproc => "dataproc",
        Service::Vertex => "aiplatform",
        Service::Storage => "storage",
        Service::Compute => "compute",
        Service::Logging => "logging",
        // generateAccessToken needs getAccessToken.
        Service::Iam => return Some("iam.serviceAccounts.getAccessToken".into()),
    };
    Some(format!("{prefix}.{method}"))
}

/// The predefined role docs/install.md grants for the service, and where.
fn role(service: Service) -> &'static str {
    match service {
        Service::Tpu => "roles/tpu.admin on the project",
        Service::Dataproc => "roles/dataproc.editor on the project",
        Service::Vertex => "roles/aiplatform.user on the project",
        Service::Storage => "roles/storage.objectViewer on the bucket",
        Service::Compute => "roles/compute.instanceAdmin.v1 on the project",
        Service::Logging => "roles/logging.viewer on the project",
        Service::Iam => "roles/iam.serviceAccountTokenCreator on the service account it acts as",
    }
}

/// What status says of a refused call made for `action` (`observe TPU slice`, ...).
pub fn message(action: &str, err: &GcpError) -> String {
    let service = err.service.as_str();
    let on = if err.target.is_empty() {
        String::new()
    } else {
        format!(" on {}", err.target)
    };
    if err.kind == ErrorKind::Unauthenticated {
        return format!(
            "{action}: Google did not accept the operator's credentials for {service} {}{on}: check \
             its Workload Identity binding (docs/install.md, GCP credentials failures)",
            err.method
        );
    }
    // A call made as a namespace's own service account: that account is refused, and the grant
    // is the platform team's to make to it (docs/policy.md); minting its token is the operator's.
    let (actor, who) = match (err.identity.as_deref(), err.service) {
        (Some(sa), Service::Iam) => (
            format!(" acting as {sa}"),
            format!("the operator's Google service account (on {sa})"),
        ),
        (Some(sa), _) => (format!(" as {sa}"), sa.clone()),
        (None, _) => (String::new(), "the operator's Google service account".to_string()),
    };
    let grant = match permission(err.service, err.method) {
        Some(p) => format!("grant {who} {p} ({})", role(err.service)),
        None => format!("grant {who} {}", role(err.service)),
    };
    format!(
        "{action}: Google refused {service} {}{on}{actor} (permission denied): {grant}; docs/install.md lists the roles per service",
        err.method
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_follow_the_service_and_method() {
        assert_eq!(
            permission(Service::Tpu, "nodes.get").as_deref(),
            Some("tpu.nodes.get")
        );
        assert_eq!(
            permission(Service::Vertex, "customJobs.list").as_deref(),
            Some("aiplatform.customJobs.list")
        );
        assert_eq!(
            permission(Service::Storage, "objects.list").as_deref(),
            Some("storage.objects.list")
        );
        assert_eq!(permission(Service::Dataproc, "operation"), None);
    }
}
