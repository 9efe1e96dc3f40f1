//! IAM Service Account Credentials API v1, the one method an impersonating client needs:
//! `POST /iamcredentials/v1/projects/-/serviceAccounts/{sa}:generateAccessToken`
//! (request `{delegates, scope, lifetime}`, response `{accessToken, expireTime}`; see the public
//! reference cited in [`super`]). The token is tied to the service account it was minted for: a
//! request carrying it acts as that account until `expireTime` (emulated time).

use super::{Iam, Minted, principal};
use crate::api::{Reply, Req};
use crate::errors::{ApiError, ApiResult, Code};
use crate::wire::time::{parse_duration, ts};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// The longest lifetime without the `iam.allowServiceAccountCredentialLifetimeExtension`
/// organization policy (the reference's `lifetime` field: "default 3600s, at most 1 hour").
pub const MAX_LIFETIME_SECS: i64 = 3600;
/// The method id calls are recorded under.
pub const METHOD: &str = "serviceAccounts.generateAccessToken";

/// The service account of `projects/-/serviceAccounts/{sa}:generateAccessToken`.
pub fn route(req: &Req) -> Option<String> {
    let s = &req.segs;
    let ok = req.method == axum::http::Method::POST
        && req.verb.as_deref() == Some("generateAccessToken")
        && s.len() == 4
        && s[0] == "projects"
        && s[2] == "serviceAccounts";
    ok.then(|| s[3].clone())
}

/// 403 as IAM answers a caller without `iam.serviceAccounts.getAccessToken`.
fn denied() -> ApiError {
    let mut e = ApiError::new(
        Code::PermissionDenied,
        "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
    );
    e.details.push(json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "IAM_PERMISSION_DENIED",
        "domain": "iam.googleapis.com",
        "metadata": {"permission": "iam.serviceAccounts.getAccessToken"},
    }));
    e
}

fn lifetime(body: &Value) -> ApiResult<i64> {
    let Some(text) = body.get("lifetime").and_then(Value::as_str) else {
        return Ok(MAX_LIFETIME_SECS);
    };
    let secs = parse_duration(text).map(|d| d.num_seconds()).ok_or_else(|| {
        ApiError::invalid_field("lifetime", format!("Invalid value at 'lifetime' ({text})"))
    })?;
    if !(1..=MAX_LIFETIME_SECS).contains(&secs) {
        return Err(ApiError::invalid_field(
            "lifetime",
            format!("The lifetime must be between 1s and {MAX_LIFETIME_SECS}s (requested {text})."),
        ));
    }
    Ok(secs)
}

impl Iam {
    /// `generateAccessToken` for `service_account`, called by `caller`, at `now`.
    pub fn generate_access_token(
        &mut self,
        caller: &str,
        service_account: &str,
        req: &Req,
        now: DateTime<Utc>,
        token_id: &str,
    ) -> ApiResult<Reply> {
        let body = req.json()?;
        let scopes = body.get("scope").and_then(Value::as_array);
        if scopes.is_none_or(|s| s.is_empty()) {
            return Err(ApiError::invalid_field("scope", "Scope is required."));
        }
        if body
            .get("delegates")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty())
        {
            return Err(ApiError::new(
                Code::Unimplemented,
                "delegates are not supported by gcp-emulator",
            ));
        }
        let secs = lifetime(&body)?;
        let sa = principal(service_account);
        if let Some(creators) = self.token_creators.get(&sa)
            && !creators.contains(caller)
        {
            return Err(denied());
        }
        self.tokens.retain(|_, m| m.expire > now);
        let token = format!("ya29.emulator.{token_id}");
        let expire = now + chrono::Duration::seconds(secs);
        self.tokens.insert(
            token.clone(),
            Minted {
                principal: sa.clone(),
                expire,
            },
        );
        *self.minted.entry(sa).or_default() += 1;
        Ok(Reply::json(
            json!({"accessToken": token, "expireTime": ts(expire)}),
        ))
    }
}
