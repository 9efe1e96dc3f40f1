//! IAM through the admin API (`/emulator/v1/iam...`) and the in-process [`Emulator`] handle.
//!
//! | method | path | body |
//! |---|---|---|
//! | GET | `iam` | → the bindings, the default principal and the tokens minted per service account |
//! | POST | `iam/bucketBindings` | `{"bucket", "role", "member"}`: `role` on `bucket` (a `roles/storage.*` role) |
//! | POST | `iam/tokenCreators` | `{"serviceAccount", "member"}`: `member` may impersonate `serviceAccount` |
//! | PUT | `iam/defaultPrincipal` | `{"principal"}`: who requests without a minted token act as |

use super::Iam;
use crate::emulator::Emulator;
use crate::errors::{ApiError, ApiResult, Code};
use crate::world::Shared;
use axum::http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BucketBinding {
    bucket: String,
    role: String,
    member: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenCreator {
    service_account: String,
    member: String,
}

#[derive(Deserialize)]
struct DefaultPrincipal {
    principal: String,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid admin request body: {e}")))
}

/// Serves `/emulator/v1/iam[/...]` (`rest`: after `iam`).
pub fn handle(shared: &Shared, method: &Method, rest: &str, body: &[u8]) -> ApiResult<Value> {
    let mut w = shared.world();
    match (method.clone(), rest) {
        (Method::GET, "") => Ok(serde_json::to_value(&w.iam).unwrap_or_default()),
        (Method::POST, "/bucketBindings") => {
            let b: BucketBinding = parse(body)?;
            w.iam.grant_bucket(&b.bucket, &b.role, &b.member)?;
            Ok(json!({}))
        }
        (Method::POST, "/tokenCreators") => {
            let t: TokenCreator = parse(body)?;
            w.iam.grant_token_creator(&t.service_account, &t.member);
            Ok(json!({}))
        }
        (Method::PUT, "/defaultPrincipal") => {
            let d: DefaultPrincipal = parse(body)?;
            w.iam.default_principal = Some(super::principal(&d.principal));
            Ok(json!({}))
        }
        _ => Err(ApiError::new(
            Code::NotFound,
            format!("unknown admin endpoint {method} /emulator/v1/iam{rest}"),
        )),
    }
}

impl Emulator {
    /// Grants `role` (`roles/storage.objectViewer`, `…objectUser`, `…objectAdmin`, …) on `bucket`
    /// to `member` (an e-mail or `serviceAccount:…`). From then on the bucket is reached only by
    /// principals with a role on it.
    pub fn grant_bucket(&self, bucket: &str, role: &str, member: &str) -> Result<(), ApiError> {
        self.with_world(|w| w.iam.grant_bucket(bucket, role, member))
    }

    /// Lets `member` impersonate `service_account` (`roles/iam.serviceAccountTokenCreator` on it).
    /// From then on only its token creators may mint its tokens.
    pub fn grant_token_creator(&self, service_account: &str, member: &str) {
        self.with_world(|w| w.iam.grant_token_creator(service_account, member))
    }

    /// Who requests without a minted token act as (the operator's own identity).
    pub fn set_default_principal(&self, principal: &str) {
        self.with_world(|w| w.iam.default_principal = Some(super::principal(principal)))
    }

    /// Tokens `generateAccessToken` minted for `service_account` so far.
    pub fn tokens_minted(&self, service_account: &str) -> u64 {
        self.with_world(|w| w.iam.minted.get(service_account).copied().unwrap_or(0))
    }

    /// The IAM bindings and counters.
    pub fn iam(&self) -> Iam {
        self.with_world(|w| w.iam.clone())
    }
}
