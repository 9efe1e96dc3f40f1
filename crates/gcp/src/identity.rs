//! Per-namespace Google identity: the operator impersonates a tenant's Google service account
//! (GSA) for the calls it makes for that tenant's objects, as Config Connector's namespaced mode
//! binds one GSA per namespace.
//!
//! [`Impersonation`] mints access tokens with the IAM Service Account Credentials API
//! (`POST {iamcredentials}/v1/projects/-/serviceAccounts/{gsa}:generateAccessToken`, authorized by
//! the operator's own credentials: its GSA needs `roles/iam.serviceAccountTokenCreator` on each
//! tenant GSA) and keeps one per GSA until [`REFRESH_BEFORE`] its `expireTime`, one fetch at a
//! time per GSA, so a namespace costs about one token an hour however often it is reconciled.
//!
//! Why not `google-cloud-auth`'s `credentials::impersonated` (1.18): its IAM endpoint cannot be
//! pointed anywhere but `iamcredentials.{universe}` outside the crate's own tests, so it cannot be
//! tested against gcp-emulator; it judges `expireTime` by the host's wall clock (and panics on an
//! `expireTime` already past, e.g. on an emulator's manual clock); and it retries for up to 60 s
//! inside a call, against this crate's "one trait call, one bounded request" rule. No official
//! `google-cloud-iam-credentials-v1` Rust client exists (the generated `google-cloud-iam-v1` is the
//! IAM policy API). So this is one small `reqwest` call with the same TLS stack and credentials as
//! the storage client, and a cache judged by an injectable clock ([`Impersonation::set_clock`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use chrono::{DateTime, Utc};
use google_cloud_auth::credentials::{CacheableResource, Credentials};
use serde::Deserialize;
use serde_json::json;

use crate::error::{ErrorKind, GcpError, Result, Service};

/// Production endpoint of the IAM Service Account Credentials API.
pub const IAM_CREDENTIALS_ENDPOINT: &str = "https://iamcredentials.googleapis.com";
/// Lifetime asked for each token (the API's default and maximum without an org policy).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// A cached token is replaced this long before its `expireTime`, so no call starts with a token
/// that expires during it.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// The scope of the minted tokens.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The role the operator's service account needs on each tenant service account.
pub const TOKEN_CREATOR_ROLE: &str = "roles/iam.serviceAccountTokenCreator";

/// What "now" is for token expiry: the wall clock, or an emulator's clock in tests.
pub type TokenClock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

#[derive(Clone)]
struct Token {
    value: String,
    expire: DateTime<Utc>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Token>>>;

/// Tokens of impersonated service accounts, minted and cached per account. Cheap to share.
pub struct Impersonation {
    http: reqwest::Client,
    endpoint: String,
    /// The operator's own credentials (`None`: anonymous, an emulator).
    source: Option<Credentials>,
    clock: RwLock<TokenClock>,
    slots: Mutex<HashMap<String, Slot>>,
    minted: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Impersonation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impersonation")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Minted {
    access_token: String,
    expire_time: String,
}

impl Impersonation {
    /// `endpoint`: the IAM Credentials API root ([`IAM_CREDENTIALS_ENDPOINT`], or an emulator's
    /// `{url}/iamcredentials`).
    pub fn new(endpoint: &str, source: Option<Credentials>, call_timeout: Duration) -> Result<Self> {
        let http = http_client(Service::Iam, endpoint, call_timeout)?;
        Ok(Self {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            source,
            clock: RwLock::new(Arc::new(Utc::now)),
            slots: Mutex::default(),
            minted: Mutex::default(),
        })
    }

    /// Judges expiry by `clock` (an emulator's, whose `expireTime`s are in its own time).
    pub fn set_clock(&self, clock: TokenClock) {
        *self.clock.write().expect("clock lock poisoned") = clock;
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock.read().expect("clock lock poisoned"))()
    }

    /// Tokens minted for `service_account` by this process.
    pub fn minted(&self, service_account: &str) -> u64 {
        let minted = self.minted.lock().expect("minted lock poisoned");
        minted.get(service_account).copied().unwrap_or(0)
    }

    /// A token of `service_account`: the cached one while it has more than [`REFRESH_BEFORE`]
    /// left, else a new one (callers for the same account wait for one fetch).
    pub async fn token(&self, service_account: &str) -> Result<String> {
        let slot = {
            let mut slots = self.slots.lock().expect("slots lock poisoned");
            slots.entry(service_account.to_string()).or_default().clone()
        };
        let mut cached = slot.lock().await;
        let fresh_until = self.now() + chrono::Duration::from_std(REFRESH_BEFORE).unwrap_or_default();
        if let Some(t) = cached.as_ref().filter(|t| t.expire > fresh_until) {
            return Ok(t.value.clone());
        }
        let token = self.mint(service_account).await?;
        *self
            .minted
            .lock()
            .expect("minted lock poisoned")
            .entry(service_account.to_string())
            .or_default() += 1;
        let value = token.value.clone();
        *cached = Some(token);
        Ok(value)
    }

    async fn mint(&self, service_account: &str) -> Result<Token> {
        let url = format!(
            "{}/v1/projects/-/serviceAccounts/{}:generateAccessToken",
            self.endpoint,
            urlencoding::encode(service_account)
        );
        let target = format!("serviceAccounts/{service_account}");
        let request = self.http.post(&url).json(&json!({
            "scope": [SCOPE],
            "lifetime": format!("{}s", TOKEN_LIFETIME.as_secs()),
        }));
        let request = self.authorized(request, &target, service_account).await?;
        let response = request.send().await.map_err(|err| {
            mint_error(
                &target,
                service_account,
                ErrorKind::Transient,
                format!("request failed: {err}"),
            )
        })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            let mut err = GcpError::from_http_response(Service::Iam, METHOD, &target, status, &body);
            err.message = format!(
                "cannot act as {service_account}: {} (the operator's service account needs \
                 {TOKEN_CREATOR_ROLE} on it)",
                err.message
            );
            err.identity = Some(Box::new(service_account.to_string()));
            return Err(err);
        }
        read_token(&target, service_account, &body)
    }

    /// `request` with the operator's own credentials' headers (unchanged for an anonymous source,
    /// an emulator, or when the credentials report their headers as not modified).
    async fn authorized(
        &self,
        mut request: reqwest::RequestBuilder,
        target: &str,
        service_account: &str,
    ) -> Result<reqwest::RequestBuilder> {
        if let Some(source) = &self.source {
            let headers = source.headers(Default::default()).await.map_err(|err| {
                let kind = if err.is_transient() {
                    ErrorKind::Transient
                } else {
                    ErrorKind::Unauthenticated
                };
                mint_error(
                    target,
                    service_account,
                    kind,
                    format!("cannot get credentials: {err}"),
                )
            })?;
            if let CacheableResource::New { data, .. } = headers {
                request = request.headers(data);
            }
        }
        Ok(request)
    }
}

/// The token in a successful `generateAccessToken` response body: its value and `expireTime`.
fn read_token(target: &str, service_account: &str, body: &[u8]) -> Result<Token> {
    let minted: Minted = serde_json::from_slice(body).map_err(|err| {
        mint_error(
            target,
            service_account,
            ErrorKind::Unreadable,
            format!("bad response: {err}"),
        )
    })?;
    let expire = DateTime::parse_from_rfc3339(&minted.expire_time)
        .map_err(|err| {
            mint_error(
                target,
                service_account,
                ErrorKind::Unreadable,
                format!("bad expireTime: {err}"),
            )
        })?
        .with_timezone(&Utc);
    Ok(Token {
        value: minted.access_token,
        expire,
    })
}

/// The method id errors and metrics name.
pub const METHOD: &str = "serviceAccounts.generateAccessToken";

fn mint_error(target: &str, service_account: &str, kind: ErrorKind, message: String) -> GcpError {
    let mut err = GcpError::new(
        kind,
        Service::Iam,
        METHOD,
        target,
        format!("cannot act as {service_account}: {message}"),
    );
    err.identity = Some(Box::new(service_account.to_string()));
    err
}

/// The `reqwest` client of a plain-HTTP caller of `service` at `endpoint`, each request bounded
/// by `call_timeout`.
pub(crate) fn http_client(
    service: Service,
    endpoint: &str,
    call_timeout: Duration,
) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(call_timeout)
        .build()
        .map_err(|err| {
            let message = format!("cannot build the HTTP client: {err}");
            GcpError::new(ErrorKind::Other, service, "client.build", endpoint, message)
        })
}

/// A plain-HTTP request to `service` that got no answer (a timeout, a refused or reset
/// connection): worth a retry with backoff.
pub(crate) fn transport_error(
    service: Service,
    method: &'static str,
    target: &str,
    err: &reqwest::Error,
) -> GcpError {
    let message = format!("request failed: {err}");
    GcpError::new(ErrorKind::Transient, service, method, target, message)
}

/// How a storage (or other plain-HTTP) client authenticates.
#[derive(Clone, Debug, Default)]
pub enum Auth {
    /// No `Authorization` header (emulators).
    #[default]
    Anonymous,
    /// The operator's own credentials.
    Credentials(Credentials),
    /// A token of this service account, minted with the operator's credentials.
    Impersonated(Arc<Impersonation>, String),
}

impl Auth {
    /// `request` with this identity's `Authorization` header, if any; `service`, `method` and
    /// `target` name the call in the error when no token can be had.
    pub async fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        service: Service,
        method: &'static str,
        target: &str,
    ) -> Result<reqwest::RequestBuilder> {
        let credentials = match self {
            Auth::Anonymous => return Ok(request),
            Auth::Impersonated(tokens, sa) => return Ok(request.bearer_auth(tokens.token(sa).await?)),
            Auth::Credentials(credentials) => credentials,
        };
        let headers = credentials.headers(Default::default()).await.map_err(|err| {
            let kind = if err.is_transient() {
                ErrorKind::Transient
            } else {
                ErrorKind::Unauthenticated
            };
            GcpError::new(
                kind,
                service,
                method,
                target,
                format!("cannot get credentials: {err}"),
            )
        })?;
        Ok(match headers {
            CacheableResource::New { data, .. } => request.headers(data),
            CacheableResource::NotModified => request,
        })
    }

    /// The service account calls act as, when impersonating.
    pub fn service_account(&self) -> Option<&str> {
        match self {
            Auth::Impersonated(_, sa) => Some(sa),
            _ => None,
        }
    }
}
