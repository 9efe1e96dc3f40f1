//! A cloud call Google refused (HTTP 403 `PERMISSION_DENIED`, 401 `UNAUTHENTICATED`, or no token
//! to send at all), as status says it. Two causes, two fixes, two reasons:
//! * a missing role (`PermissionDenied`): the service and method, what it addressed, and the IAM
//!   permission and predefined role to grant (the roles of docs/install.md);
//! * no usable credentials (`CredentialsUnavailable`): on GKE, the metadata server refuses tokens
//!   while the operator's Kubernetes service account is not bound to its Google service account.
//!   No role grant helps; the message names the Workload Identity binding to fix.
//!
//! The kinds report a refused create or delete themselves, with their own phase. Every other
//! refused call (a read, a list, a cancel, on any kind and backend) used to leave the pass with an
//! error and the status as it was: none at all for a slice whose first `nodes.get` was refused,
//! which kstatus judges `Current` (Flux `wait` passed), or a stale `Running`. The driver now writes
//! this message as `Stalled=True`, with the refusal's reason, whenever a pass fails on a refusal.

use tpu_operator_api::conditions::reasons;
use tpu_operator_gcp::{ErrorKind, GcpError, Service};

/// Why Google refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No token, or a token Google did not accept: the operator's credentials.
    Credentials,
    /// The identity the call acted as lacks a permission.
    Permission,
}

impl Refusal {
    /// Why `err` was refused; `None`: it was not a refusal.
    pub fn of(err: &GcpError) -> Option<Self> {
        match err.kind {
            ErrorKind::Unauthenticated => Some(Self::Credentials),
            ErrorKind::PermissionDenied => Some(Self::Permission),
            _ => None,
        }
    }

    /// The status reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Credentials => reasons::CREDENTIALS_UNAVAILABLE,
            Self::Permission => reasons::PERMISSION_DENIED,
        }
    }
}

/// Whether Google refused the call for want of permission or credentials.
pub fn is_refusal(err: &GcpError) -> bool {
    Refusal::of(err).is_some()
}

/// The status reason of a refused call (`None`: not a refusal).
pub fn reason(err: &GcpError) -> Option<&'static str> {
    Refusal::of(err).map(Refusal::reason)
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

/// The role that lets a Kubernetes service account act as a Google service account.
pub const WORKLOAD_IDENTITY_USER: &str = "roles/iam.workloadIdentityUser";

/// What status says of a refused call made for `action` (`observe TPU slice`, ...).
pub fn message(action: &str, err: &GcpError) -> String {
    let service = err.service.as_str();
    let on = if err.target.is_empty() {
        String::new()
    } else {
        format!(" on {}", err.target)
    };
    if Refusal::of(err) == Some(Refusal::Credentials) {
        return format!(
            "{action}: no usable credentials for {service} {}{on} ({}): on GKE, bind the \
             operator's Kubernetes service account (tpu-operator/tpu-operator with the chart's \
             defaults) to its Google service account (the ServiceAccount's \
             iam.gke.io/gcp-service-account annotation): grant that Google service account \
             {WORKLOAD_IDENTITY_USER} to member \
             serviceAccount:PROJECT.svc.id.goog[NAMESPACE/KSA]; retried as soon as tokens arrive \
             (docs/install.md, GCP credentials failures)",
            err.method,
            err.stable_message()
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

    #[test]
    fn no_token_is_a_credentials_failure_naming_the_binding_not_a_missing_role() {
        let no_token = GcpError::new(
            ErrorKind::Unauthenticated,
            Service::Tpu,
            "nodes.get",
            "projects/p/locations/z/nodes/n",
            "the metadata server answered 403",
        );
        assert_eq!(reason(&no_token), Some(reasons::CREDENTIALS_UNAVAILABLE));
        let m = message("observe TPU slice", &no_token);
        for part in [
            "tpu nodes.get",
            "projects/p/locations/z/nodes/n",
            "metadata server answered 403",
            "tpu-operator/tpu-operator",
            "iam.gke.io/gcp-service-account",
            "roles/iam.workloadIdentityUser",
            "svc.id.goog[NAMESPACE/KSA]",
        ] {
            assert!(m.contains(part), "{part:?} missing: {m}");
        }
        assert!(!m.contains("permission denied"), "{m}");

        let denied = GcpError::new(
            ErrorKind::PermissionDenied,
            Service::Tpu,
            "nodes.get",
            "projects/p/locations/z/nodes/n",
            "denied",
        );
        assert_eq!(reason(&denied), Some(reasons::PERMISSION_DENIED));
        assert!(message("observe", &denied).contains("roles/tpu.admin"));
        let transient = GcpError::new(ErrorKind::Transient, Service::Tpu, "nodes.get", "", "503");
        assert_eq!(reason(&transient), None);
    }
}
