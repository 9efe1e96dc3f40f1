//! What a refused call stalls an object on, as a key shared by every object that one fix (a
//! binding, a grant) releases, and by no other.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_gcp::{GcpError, Service};

use crate::runtime::refused::Refusal;

/// The fix an object waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Blocker {
    /// The operator's own credentials give no token (or one Google does not accept). One token
    /// source serves every call of the process, so one fix releases every object stalled on it.
    Credentials,
    /// `identity` lacks a permission of `service` on `scope`.
    Permission {
        service: Service,
        /// The namespace's Google service account the call acted as; `None`: the operator's own.
        /// Part of the key so that one tenant's grant (or one tenant's object) never wakes the
        /// objects of a namespace acting as another identity.
        identity: Option<String>,
        /// Where IAM grants the role: the project (`projects/p`), the bucket (`gs://b`) or the
        /// impersonated service account (`serviceAccounts/sa`); empty when the target names none.
        scope: String,
    },
}

impl Blocker {
    /// What the refused call `err` waits for; `None`: it was not a refusal.
    pub fn of(err: &GcpError) -> Option<Self> {
        match Refusal::of(err)? {
            Refusal::Credentials => Some(Self::Credentials),
            Refusal::Permission => Some(Self::Permission {
                service: err.service,
                identity: err.identity.as_deref().cloned(),
                scope: scope(&err.target),
            }),
        }
    }
}

/// The resource an IAM grant for `target` is made on: its project, bucket or service account.
fn scope(target: &str) -> String {
    if let Some(rest) = target.strip_prefix("gs://") {
        let bucket = rest.split('/').next().unwrap_or_default();
        return format!("gs://{bucket}");
    }
    let mut segments = target.split('/');
    match (segments.next(), segments.next()) {
        (Some(collection @ ("projects" | "serviceAccounts")), Some(id)) if !id.is_empty() => {
            format!("{collection}/{id}")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use tpu_operator_gcp::ErrorKind;

    use super::*;

    fn refused(kind: ErrorKind, service: Service, target: &str, identity: Option<&str>) -> GcpError {
        let mut err = GcpError::new(kind, service, "m.get", target, "refused");
        err.identity = identity.map(|sa| Box::new(sa.to_string()));
        err
    }

    fn permission(service: Service, identity: Option<&str>, scope: &str) -> Option<Blocker> {
        Some(Blocker::Permission {
            service,
            identity: identity.map(str::to_string),
            scope: scope.into(),
        })
    }

    #[test]
    fn a_missing_role_is_keyed_by_service_identity_and_where_it_is_granted() {
        use ErrorKind::PermissionDenied as Denied;
        let node = "projects/p/locations/z/nodes/n";
        assert_eq!(
            Blocker::of(&refused(Denied, Service::Tpu, node, None)),
            permission(Service::Tpu, None, "projects/p")
        );
        assert_eq!(
            Blocker::of(&refused(Denied, Service::Tpu, node, Some("a@x"))),
            permission(Service::Tpu, Some("a@x"), "projects/p")
        );
        assert_eq!(
            Blocker::of(&refused(
                Denied,
                Service::Storage,
                "gs://b/in/part-0",
                Some("a@x")
            )),
            permission(Service::Storage, Some("a@x"), "gs://b")
        );
        assert_eq!(
            Blocker::of(&refused(Denied, Service::Iam, "serviceAccounts/a@x", Some("a@x"))),
            permission(Service::Iam, Some("a@x"), "serviceAccounts/a@x")
        );
        assert_eq!(
            Blocker::of(&refused(Denied, Service::Vertex, "", None)),
            permission(Service::Vertex, None, "")
        );
    }

    #[test]
    fn no_token_is_one_blocker_for_every_identity_and_other_errors_none() {
        let no_token = |identity| refused(ErrorKind::Unauthenticated, Service::Storage, "gs://b/o", identity);
        assert_eq!(Blocker::of(&no_token(None)), Some(Blocker::Credentials));
        assert_eq!(Blocker::of(&no_token(Some("a@x"))), Some(Blocker::Credentials));
        assert_eq!(
            Blocker::of(&refused(ErrorKind::Transient, Service::Tpu, "projects/p", None)),
            None
        );
    }
}
