//! IAM per identity: who a request acts as, which principal may read, list or write which
//! bucket, and which principal may impersonate which service account.
//!
//! * **Principals** are e-mails (`team-a@p.iam.gserviceaccount.com`); bindings accept IAM's member
//!   form too (`serviceAccount:…`, `user:…`). A request acts as the service account its bearer
//!   token was minted for ([`credentials`]: `generateAccessToken`); a request with no token, or
//!   with a token the emulator did not mint (anonymous clients, ADC in tests), acts as the
//!   **default principal**, the operator's own identity ([`DEFAULT_PRINCIPAL`] unless set). An
//!   expired minted token is refused with 401, as Google does.
//! * **Open until bound.** A bucket with no binding is open to every principal, and a service
//!   account with no token creator may be impersonated by anyone: with no IAM configured the
//!   emulator behaves exactly as before. Once a bucket has a binding, only the principals with a
//!   role carrying the method's permission reach it (403 otherwise, whether or not the object
//!   exists); once a service account has a token creator, only its token creators may mint
//!   tokens for it (`iam.serviceAccounts.getAccessToken`, as `roles/iam.serviceAccountTokenCreator`
//!   grants).
//! * A read of a bucket that does not exist is still answered 404 by Cloud Storage itself
//!   (bucket names are global and their existence is not a secret on GCS either).
//!
//! Error shapes, from Google's public references:
//! * Cloud Storage JSON API, "HTTP status and error codes"
//!   (cloud.google.com/storage/docs/json_api/v1/status-codes): 403 `forbidden` in the legacy
//!   `errors[]` body; the message as gsutil/gcloud users report it verbatim, e.g.
//!   github.com/actions-hub/gcloud/issues/25 and github.com/zetaalphavector/InPars/issues/13:
//!   `"<principal> does not have storage.objects.list access to the Google Cloud Storage bucket.
//!   Permission 'storage.objects.list' denied on resource (or it may not exist)."`
//! * IAM Service Account Credentials API, `projects.serviceAccounts.generateAccessToken`
//!   (cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken):
//!   request `{delegates, scope, lifetime}`, response `{accessToken, expireTime}`; a caller without
//!   the permission gets google.rpc.Status 403 `PERMISSION_DENIED` with an `ErrorInfo` of reason
//!   `IAM_PERMISSION_DENIED`, domain `iam.googleapis.com` (verbatim body in
//!   github.com/google-github-actions/auth/issues/340).

pub mod admin;
pub mod credentials;

use crate::errors::{ApiError, ApiResult, Code};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Who a request acts as when it carries no token the emulator minted.
pub const DEFAULT_PRINCIPAL: &str = "tpu-operator@emulator.iam.gserviceaccount.com";
/// The role that carries `iam.serviceAccounts.getAccessToken`.
pub const TOKEN_CREATOR: &str = "roles/iam.serviceAccountTokenCreator";
/// The Cloud Storage roles the emulator knows, with the permissions each grants (the subset of
/// Google's predefined roles the emulated methods check).
pub const STORAGE_ROLES: &[(&str, &[&str])] = &[
    (
        "roles/storage.objectViewer",
        &["storage.objects.get", "storage.objects.list"],
    ),
    ("roles/storage.objectCreator", &["storage.objects.create"]),
    (
        "roles/storage.objectUser",
        &[
            "storage.objects.get",
            "storage.objects.list",
            "storage.objects.create",
            "storage.objects.delete",
        ],
    ),
    (
        "roles/storage.objectAdmin",
        &[
            "storage.objects.get",
            "storage.objects.list",
            "storage.objects.create",
            "storage.objects.delete",
        ],
    ),
    (
        "roles/storage.legacyBucketReader",
        &["storage.buckets.get", "storage.objects.list"],
    ),
    (
        "roles/storage.admin",
        &[
            "storage.buckets.get",
            "storage.buckets.delete",
            "storage.objects.get",
            "storage.objects.list",
            "storage.objects.create",
            "storage.objects.delete",
        ],
    ),
];

/// A token minted by `generateAccessToken`.
#[derive(Clone, Debug)]
struct Minted {
    principal: String,
    expire: DateTime<Utc>,
}

/// The IAM state: bindings (kept across [`crate::World::reset`], like configuration) and the
/// tokens minted so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Iam {
    /// Who requests without a minted token act as; [`DEFAULT_PRINCIPAL`] when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_principal: Option<String>,
    /// Bucket → role → principals.
    #[serde(default)]
    pub buckets: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Service account → principals that may mint its tokens.
    #[serde(default)]
    pub token_creators: BTreeMap<String, BTreeSet<String>>,
    #[serde(skip)]
    tokens: BTreeMap<String, Minted>,
    /// Tokens minted per service account (kept when expired ones are forgotten).
    #[serde(default)]
    pub minted: BTreeMap<String, u64>,
}

/// `serviceAccount:a@b` → `a@b` (IAM member form or a bare e-mail).
pub fn principal(member: &str) -> String {
    let m = member.trim();
    ["serviceAccount:", "user:", "group:"]
        .iter()
        .find_map(|p| m.strip_prefix(p))
        .unwrap_or(m)
        .to_string()
}

fn role_permissions(role: &str) -> Option<&'static [&'static str]> {
    STORAGE_ROLES.iter().find(|(r, _)| *r == role).map(|(_, p)| *p)
}

/// The permission a Cloud Storage method needs on its bucket; `None`: not checked (project-level
/// methods: `buckets.insert`, `buckets.list`).
pub fn storage_permission(method: &str) -> Option<&'static str> {
    Some(match method {
        "objects.list" => "storage.objects.list",
        "objects.get" => "storage.objects.get",
        "objects.insert" => "storage.objects.create",
        "objects.delete" => "storage.objects.delete",
        "buckets.get" => "storage.buckets.get",
        "buckets.delete" => "storage.buckets.delete",
        _ => return None,
    })
}

impl Iam {
    pub fn default_principal(&self) -> &str {
        self.default_principal.as_deref().unwrap_or(DEFAULT_PRINCIPAL)
    }

    /// Who a request with this `Authorization` header acts as. A minted token past its
    /// `expireTime` is UNAUTHENTICATED; anything else not minted here is the default principal.
    pub fn caller(&self, authorization: Option<&str>, now: DateTime<Utc>) -> ApiResult<String> {
        let token =
            authorization.and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")));
        match token.and_then(|t| self.tokens.get(t.trim())) {
            None => Ok(self.default_principal().to_string()),
            Some(m) if m.expire > now => Ok(m.principal.clone()),
            Some(_) => Err(ApiError::new(
                Code::Unauthenticated,
                Code::Unauthenticated.default_message(),
            )),
        }
    }

    /// Grants `role` on `bucket` to `member`.
    pub fn grant_bucket(&mut self, bucket: &str, role: &str, member: &str) -> ApiResult<()> {
        if role_permissions(role).is_none() {
            let known: Vec<&str> = STORAGE_ROLES.iter().map(|(r, _)| *r).collect();
            return Err(ApiError::invalid(format!(
                "Role {role} is not supported by gcp-emulator's Cloud Storage IAM; known: {}",
                known.join(", ")
            )));
        }
        self.buckets
            .entry(bucket.to_string())
            .or_default()
            .entry(role.to_string())
            .or_default()
            .insert(principal(member));
        Ok(())
    }

    /// Lets `member` mint tokens for `service_account` (`roles/iam.serviceAccountTokenCreator`).
    pub fn grant_token_creator(&mut self, service_account: &str, member: &str) {
        self.token_creators
            .entry(principal(service_account))
            .or_default()
            .insert(principal(member));
    }

    /// Whether `principal` may call storage `method` on `bucket` (`exists`: the bucket exists;
    /// a read of a missing bucket is left to Cloud Storage's own 404).
    pub fn authorize_storage(
        &self,
        principal: &str,
        method: &str,
        bucket: &str,
        object: Option<&str>,
        exists: bool,
    ) -> ApiResult<()> {
        let (Some(permission), Some(bindings)) = (storage_permission(method), self.buckets.get(bucket))
        else {
            return Ok(());
        };
        if !exists && method != "objects.insert" {
            return Ok(());
        }
        let granted = bindings.iter().any(|(role, members)| {
            members.contains(principal) && role_permissions(role).is_some_and(|p| p.contains(&permission))
        });
        if granted {
            return Ok(());
        }
        let resource = if object.is_some() { "object" } else { "bucket" };
        Err(ApiError::gcs(
            Code::PermissionDenied,
            "forbidden",
            format!(
                "{principal} does not have {permission} access to the Google Cloud Storage {resource}. \
                 Permission '{permission}' denied on resource (or it may not exist)."
            ),
        ))
    }

    /// Forgets the minted tokens (bindings are configuration and stay).
    pub fn forget_tokens(&mut self) {
        self.tokens.clear();
        self.minted.clear();
    }
}

#[cfg(test)]
mod tests;
