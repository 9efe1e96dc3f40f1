//! Cloud Storage, through plain HTTP calls to the GCS JSON API.
//!
//! The official `google-cloud-storage` client lists objects only over gRPC
//! (`StorageControl::list_objects`), which neither the emulator nor a plain HTTP proxy serves, so
//! the few reads the controllers need (does an output prefix exist, list a prefix, read a small
//! `_FAILED` marker) are `reqwest` calls to `/storage/v1/b/{bucket}/o`, authenticated with the same
//! `google-cloud-auth` credentials as the other clients.

use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use google_cloud_auth::credentials::Credentials;
use serde::Deserialize;

use crate::{
    error::{ErrorKind, GcpError, Result, Service},
    identity::{Auth, Impersonation, http_client, transport_error},
    metrics::GcpMetrics,
};

/// Largest object [`StorageApi::read_object`] returns in full; longer content is cut there.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// One object of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectInfo {
    pub name: String,
    /// Bytes (the JSON API sends it as a string).
    #[serde(deserialize_with = "u64_from_string")]
    pub size: u64,
    /// RFC 3339 time of the last update.
    pub updated: String,
}

/// The Cloud Storage reads the controllers make.
#[async_trait]
pub trait StorageApi: Send + Sync {
    /// True when at least one object exists under `gs://bucket/prefix` (a missing bucket is a
    /// NOT_FOUND error, not `false`: it is usually a configuration mistake worth reporting).
    /// The match is a plain name prefix: end a "directory" with `/` (`gs://b/out/`) so that
    /// `gs://b/out-old/x` does not count.
    async fn prefix_exists(&self, gs_uri: &str) -> Result<bool>;
    /// Up to `max` objects whose names start with `prefix`, in name order.
    async fn list_objects(&self, bucket: &str, prefix: &str, max: u32) -> Result<Vec<ObjectInfo>>;
    /// The content of a small object as text (cut at [`MAX_READ_BYTES`], invalid UTF-8 replaced).
    async fn read_object(&self, gs_uri: &str) -> Result<String>;
}

/// A parsed `gs://bucket/object-or-prefix` URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GsUri<'a> {
    pub bucket: &'a str,
    /// Object name or prefix, without the leading slash (may be empty).
    pub path: &'a str,
}

/// Splits `gs://bucket/path`; `None` when it is not a `gs://` URI with a bucket.
pub fn parse_gs_uri(uri: &str) -> Option<GsUri<'_>> {
    let rest = uri.strip_prefix("gs://")?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    (!bucket.is_empty()).then_some(GsUri { bucket, path })
}

/// [`StorageApi`] over `reqwest` and the GCS JSON API.
#[derive(Clone, Debug)]
pub struct StorageClient {
    http: reqwest::Client,
    endpoint: String,
    /// The operator's credentials, a tenant service account's tokens, or none (emulator).
    auth: Auth,
    metrics: GcpMetrics,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectsPage {
    #[serde(default)]
    items: Vec<ObjectInfo>,
    #[serde(default)]
    next_page_token: String,
}

impl StorageClient {
    /// `endpoint` is the API root (`https://storage.googleapis.com`, or the emulator's base URL).
    pub fn new(
        endpoint: &str,
        credentials: Option<Credentials>,
        call_timeout: Duration,
        metrics: GcpMetrics,
    ) -> Result<Self> {
        let http = http_client(Service::Storage, endpoint, call_timeout)?;
        Ok(Self {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            auth: credentials.map(Auth::Credentials).unwrap_or_default(),
            metrics,
        })
    }

    /// The same client acting as `service_account`, with tokens from `tokens` (one connection
    /// pool for every identity).
    pub fn acting_as(&self, tokens: Arc<Impersonation>, service_account: &str) -> Self {
        Self {
            auth: Auth::Impersonated(tokens, service_account.to_string()),
            ..self.clone()
        }
    }

    /// Sends a GET and returns the successful response, or the classified error.
    async fn get(
        &self,
        method: &'static str,
        target: &str,
        url: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::Response> {
        let request = self
            .auth
            .authorize(self.http.get(url).query(query), Service::Storage, method, target)
            .await?;
        let response = request
            .send()
            .await
            .map_err(|err| transport_error(Service::Storage, method, target, &err))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let http_status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        let mut err = http_error(method, target, http_status, &body);
        err.identity = self.auth.service_account().map(|sa| Box::new(sa.to_string()));
        Err(err)
    }

    fn objects_url(&self, bucket: &str) -> String {
        format!("{}/storage/v1/b/{}/o", self.endpoint, urlencoding::encode(bucket))
    }

    async fn list_page(
        &self,
        bucket: &str,
        prefix: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<ObjectsPage> {
        let target = format!("gs://{bucket}/{prefix}");
        let mut query = vec![
            ("prefix", prefix.to_string()),
            ("maxResults", page_size.to_string()),
        ];
        if !page_token.is_empty() {
            query.push(("pageToken", page_token.to_string()));
        }
        let call = async {
            let response = self
                .get("objects.list", &target, &self.objects_url(bucket), &query)
                .await?;
            response.json::<ObjectsPage>().await.map_err(|err| {
                GcpError::new(
                    ErrorKind::Unreadable,
                    Service::Storage,
                    "objects.list",
                    &target,
                    format!("cannot parse the listing: {err}"),
                )
            })
        };
        self.metrics
            .observe(Service::Storage, "objects.list", &target, call)
            .await
    }
}

fn invalid_uri(method: &'static str, uri: &str) -> GcpError {
    GcpError::new(
        ErrorKind::InvalidArgument,
        Service::Storage,
        method,
        uri,
        "expected a gs://bucket/path URI",
    )
}

/// Classifies a GCS error response (legacy `{"error":{"code","message","errors":[{"reason"}]}}`,
/// sometimes with a `status`), or a non-JSON body by its HTTP status alone.
fn http_error(method: &'static str, target: &str, http_status: u16, body: &[u8]) -> GcpError {
    GcpError::from_http_response(Service::Storage, method, target, http_status, body)
}

#[async_trait]
impl StorageApi for StorageClient {
    async fn prefix_exists(&self, gs_uri: &str) -> Result<bool> {
        let uri = parse_gs_uri(gs_uri).ok_or_else(|| invalid_uri("objects.list", gs_uri))?;
        let page = self.list_page(uri.bucket, uri.path, 1, "").await?;
        Ok(!page.items.is_empty())
    }

    async fn list_objects(&self, bucket: &str, prefix: &str, max: u32) -> Result<Vec<ObjectInfo>> {
        let mut objects = Vec::new();
        let mut token = String::new();
        // GCS caps a page at 1000 items.
        while (objects.len() as u64) < u64::from(max) {
            let want = (max - objects.len() as u32).min(1000);
            let page = self.list_page(bucket, prefix, want, &token).await?;
            objects.extend(page.items);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        objects.truncate(max as usize);
        Ok(objects)
    }

    async fn read_object(&self, gs_uri: &str) -> Result<String> {
        let uri = parse_gs_uri(gs_uri).ok_or_else(|| invalid_uri("objects.get", gs_uri))?;
        if uri.path.is_empty() {
            return Err(invalid_uri("objects.get", gs_uri));
        }
        let url = format!(
            "{}/{}",
            self.objects_url(uri.bucket),
            urlencoding::encode(uri.path)
        );
        let call = async {
            let mut response = self
                .get("objects.get", gs_uri, &url, &[("alt", "media".to_string())])
                .await?;
            let mut content = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|err| transport_error(Service::Storage, "objects.get", gs_uri, &err))?
            {
                content.extend_from_slice(&chunk);
                if content.len() >= MAX_READ_BYTES {
                    content.truncate(MAX_READ_BYTES);
                    break;
                }
            }
            Ok(String::from_utf8_lossy(&content).into_owned())
        };
        self.metrics
            .observe(Service::Storage, "objects.get", gs_uri, call)
            .await
    }
}

fn u64_from_string<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Text(String),
        Int(u64),
    }
    match Number::deserialize(deserializer)? {
        Number::Int(n) => Ok(n),
        Number::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gs_uris() {
        assert_eq!(
            parse_gs_uri("gs://bkt/models/run-1/"),
            Some(GsUri {
                bucket: "bkt",
                path: "models/run-1/"
            })
        );
        assert_eq!(
            parse_gs_uri("gs://bkt"),
            Some(GsUri {
                bucket: "bkt",
                path: ""
            })
        );
        assert_eq!(
            parse_gs_uri("gs://bkt/"),
            Some(GsUri {
                bucket: "bkt",
                path: ""
            })
        );
        assert_eq!(parse_gs_uri("gs:///x"), None);
        assert_eq!(parse_gs_uri("s3://bkt/x"), None);
        assert_eq!(parse_gs_uri("bkt/x"), None);
    }

    #[test]
    fn parses_listings_with_string_sizes_and_empty_results() {
        let page: ObjectsPage = serde_json::from_str(
            r#"{"kind":"storage#objects","nextPageToken":"t2","items":[
                {"kind":"storage#object","name":"out/_SUCCESS","size":"0","updated":"2026-01-01T00:00:00Z"},
                {"name":"out/part-00000","size":"1234"}]}"#,
        )
        .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.items[1].size, 1234);
        assert_eq!(page.next_page_token, "t2");
        let empty: ObjectsPage = serde_json::from_str(r#"{"kind":"storage#objects"}"#).unwrap();
        assert!(empty.items.is_empty());
        assert!(empty.next_page_token.is_empty());
    }

    #[test]
    fn classifies_gcs_error_bodies() {
        let bucket_missing = bytes::Bytes::from_static(
            br#"{"error":{"code":404,"errors":[{"domain":"global","message":"The specified bucket does not exist.","reason":"notFound"}],"message":"The specified bucket does not exist."}}"#,
        );
        let err = http_error("objects.list", "gs://nope/x", 404, &bucket_missing);
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(err.reason.as_deref(), Some("notFound"));
        assert_eq!(err.message, "The specified bucket does not exist.");
        assert_eq!(err.status, None);

        let rate = bytes::Bytes::from_static(
            br#"{"error":{"code":429,"errors":[{"domain":"usageLimits","reason":"rateLimitExceeded","message":"slow down"}],"message":"slow down"}}"#,
        );
        let err = http_error("objects.list", "gs://b/x", 429, &rate);
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        assert!(err.is_rate_limited() && err.is_retryable());

        let denied = bytes::Bytes::from_static(
            br#"{"error":{"code":403,"message":"sa lacks storage.objects.list","status":"PERMISSION_DENIED"}}"#,
        );
        let err = http_error("objects.list", "gs://b/x", 403, &denied);
        assert_eq!(err.kind, ErrorKind::PermissionDenied);
        assert_eq!(err.status, Some("PERMISSION_DENIED"));

        let proxy = bytes::Bytes::from_static(b"<html>502 Bad Gateway</html>");
        let err = http_error("objects.get", "gs://b/x", 502, &proxy);
        assert_eq!(err.kind, ErrorKind::Transient);
        assert_eq!(err.http_status, Some(502));
        assert!(err.message.contains("Bad Gateway"));
    }
}
