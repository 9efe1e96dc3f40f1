//! Where the clients connect and as whom.
//!
//! Production talks to the public Google endpoints with Application Default Credentials (on GKE:
//! Workload Identity). Tests and `tpu-operator local` point everything at one `gcp-emulator` base
//! URL, which serves each surface under its own path prefix (`/tpu`, `/dataproc`, `/vertex`, and
//! the GCS JSON API at the root) with anonymous credentials.

use std::{sync::Arc, time::Duration};

use google_cloud_auth::{
    credentials::{self, Credentials, anonymous},
    errors::CredentialsError,
};
use google_cloud_gax::{client_builder::ClientBuilder, retry_policy::NeverRetry};
use reqwest::Url;

use crate::{
    credentials::{RecoveringCredentials, RecoveryPolicy},
    error::{ErrorKind, GcpError, Service},
    metrics::GcpMetrics,
};

/// Production endpoint of the Cloud TPU API.
pub const TPU_ENDPOINT: &str = "https://tpu.googleapis.com";
/// Production endpoint of the Dataproc API.
pub const DATAPROC_ENDPOINT: &str = "https://dataproc.googleapis.com";
/// Production endpoint template of Vertex AI: real custom-job calls must go to the regional host.
pub const VERTEX_ENDPOINT_TEMPLATE: &str = "https://{region}-aiplatform.googleapis.com";
/// Production endpoint of the Cloud Storage JSON API (paths start with `/storage/v1/`).
pub const STORAGE_ENDPOINT: &str = "https://storage.googleapis.com";
/// Compute Engine's public endpoint (the client appends `/compute/v1/...`).
pub const COMPUTE_ENDPOINT: &str = "https://compute.googleapis.com";
/// Production endpoint of Cloud Logging (requests go to `/v2/entries:list`).
pub const LOGGING_ENDPOINT: &str = crate::logging::LOGGING_ENDPOINT;
/// Default bound on one HTTP attempt; see [`GcpConfig::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Which credentials the clients send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CredentialsMode {
    /// Application Default Credentials: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user
    /// credentials, or the metadata server (GKE Workload Identity).
    #[default]
    Adc,
    /// No `Authorization` header at all (emulators).
    Anonymous,
    /// Credentials built by the caller, handled as ADC is (rebuilt after a permanent error, a
    /// failure reported, a recovery signalled) and kept with an emulator: how tests put a token
    /// source that fails, as GKE's metadata server does without a Workload Identity binding, in
    /// front of gcp-emulator (which takes any token it did not mint as the operator's own).
    Custom(CustomCredentials),
}

/// What [`CredentialsMode::Custom`] builds its credentials from, again after each failure.
#[derive(Clone)]
pub struct CustomCredentials(pub Arc<crate::credentials::BuildCredentials>);

impl std::fmt::Debug for CustomCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomCredentials")
    }
}

/// The same builder (a closure has no other identity).
impl PartialEq for CustomCredentials {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomCredentials {}

/// Endpoints, credentials and timeouts of the GCP client layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpConfig {
    /// Base URL of the Cloud TPU API (requests go to `{tpu_endpoint}/v2/...`).
    pub tpu_endpoint: String,
    /// Base URL of the Dataproc API (requests go to `{dataproc_endpoint}/v1/...`). `{region}` is
    /// replaced by the region of the batch or operation a call addresses (one client per region,
    /// built lazily), e.g. `https://{region}-dataproc.googleapis.com` for regional endpoints;
    /// without the placeholder every region uses the same endpoint.
    pub dataproc_endpoint: String,
    /// Base URL of Vertex AI. `{region}` is replaced by the location of the resource a call
    /// addresses (one client per region is built lazily); without the placeholder every region
    /// uses the same endpoint.
    pub vertex_endpoint: String,
    /// Base URL of the Cloud Storage JSON API (requests go to `{storage_endpoint}/storage/v1/...`).
    pub storage_endpoint: String,
    /// Base URL of Compute Engine (requests go to `{compute_endpoint}/compute/v1/...`).
    pub compute_endpoint: String,
    /// Base URL of Cloud Logging (requests go to `{logging_endpoint}/v2/entries:list`).
    pub logging_endpoint: String,
    /// Base URL of the IAM Service Account Credentials API (impersonation of a namespace's
    /// `googleServiceAccount`: `{iam_credentials_endpoint}/v1/projects/-/serviceAccounts/...`).
    pub iam_credentials_endpoint: String,
    /// Credentials of every client (including the plain-HTTP storage calls).
    pub credentials: CredentialsMode,
    /// When set, overrides every endpoint with `{url}/tpu`, `{url}/dataproc`, `{url}/vertex`,
    /// `{url}/logging`, `{url}` (storage, Compute Engine) and forces anonymous credentials
    /// (unless they are [`CredentialsMode::Custom`]).
    pub emulator: Option<Url>,
    /// Upper bound on one HTTP attempt. The clients never retry by themselves (see the crate
    /// docs), so this is also the longest a reconcile can wait on one GCP call.
    pub call_timeout: Duration,
}

impl Default for GcpConfig {
    fn default() -> Self {
        Self::production()
    }
}

/// The endpoints and credentials actually used, after applying [`GcpConfig::emulator`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedEndpoints {
    pub tpu: String,
    pub dataproc: String,
    pub vertex_template: String,
    pub storage: String,
    pub compute: String,
    pub logging: String,
    pub iam_credentials: String,
    pub credentials: CredentialsMode,
}

impl ResolvedEndpoints {
    /// The Vertex endpoint for one region (location), e.g. `us-central1`.
    pub fn vertex_for(&self, region: &str) -> String {
        self.vertex_template.replace("{region}", region)
    }
}

impl GcpConfig {
    /// Public Google endpoints with Application Default Credentials.
    pub fn production() -> Self {
        Self {
            tpu_endpoint: TPU_ENDPOINT.to_string(),
            dataproc_endpoint: DATAPROC_ENDPOINT.to_string(),
            vertex_endpoint: VERTEX_ENDPOINT_TEMPLATE.to_string(),
            storage_endpoint: STORAGE_ENDPOINT.to_string(),
            compute_endpoint: COMPUTE_ENDPOINT.to_string(),
            logging_endpoint: LOGGING_ENDPOINT.to_string(),
            iam_credentials_endpoint: crate::identity::IAM_CREDENTIALS_ENDPOINT.to_string(),
            credentials: CredentialsMode::Adc,
            emulator: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// Everything pointed at one `gcp-emulator` base URL, anonymously.
    pub fn emulator(url: Url) -> Self {
        Self {
            emulator: Some(url),
            ..Self::production()
        }
    }

    /// The endpoints and credentials to use, with the emulator override applied.
    pub fn resolve(&self) -> ResolvedEndpoints {
        match &self.emulator {
            Some(url) => {
                // `Url` displays a bare host with a trailing slash; the clients append `/v2/...`.
                let base = url.as_str().trim_end_matches('/');
                ResolvedEndpoints {
                    tpu: format!("{base}/tpu"),
                    dataproc: format!("{base}/dataproc"),
                    vertex_template: format!("{base}/vertex"),
                    storage: base.to_string(),
                    compute: base.to_string(),
                    logging: format!("{base}/logging"),
                    iam_credentials: format!("{base}/iamcredentials"),
                    credentials: match &self.credentials {
                        custom @ CredentialsMode::Custom(_) => custom.clone(),
                        _ => CredentialsMode::Anonymous,
                    },
                }
            }
            None => ResolvedEndpoints {
                tpu: trim(&self.tpu_endpoint),
                dataproc: trim(&self.dataproc_endpoint),
                vertex_template: trim(&self.vertex_endpoint),
                storage: trim(&self.storage_endpoint),
                compute: trim(&self.compute_endpoint),
                logging: trim(&self.logging_endpoint),
                iam_credentials: trim(&self.iam_credentials_endpoint),
                credentials: self.credentials.clone(),
            },
        }
    }
}

/// The credentials every client shares (one token cache for the whole process). Application
/// Default Credentials (and custom ones) are wrapped in [`RecoveringCredentials`]: bounded by a token deadline,
/// rebuilt after a permanent error or a timeout, failures counted in `metrics`.
pub(crate) fn build_credentials(
    mode: &CredentialsMode,
    call_timeout: Duration,
    metrics: &GcpMetrics,
) -> Result<Credentials, GcpError> {
    match mode {
        CredentialsMode::Anonymous => Ok(anonymous::Builder::new().build()),
        CredentialsMode::Adc => recovering(
            Box::new(|| {
                credentials::Builder::default()
                    .build()
                    .map_err(|err| CredentialsError::from_msg(false, err.to_string()))
            }),
            "Application Default Credentials",
            call_timeout,
            metrics,
        ),
        CredentialsMode::Custom(CustomCredentials(build)) => {
            let build = build.clone();
            recovering(
                Box::new(move || build()),
                "the custom credentials",
                call_timeout,
                metrics,
            )
        }
    }
}

/// `build`'s credentials, rebuilt after each permanent failure, probed while they fail.
fn recovering(
    build: Box<crate::credentials::BuildCredentials>,
    what: &str,
    call_timeout: Duration,
    metrics: &GcpMetrics,
) -> Result<Credentials, GcpError> {
    RecoveringCredentials::new(
        build,
        RecoveryPolicy::for_call_timeout(call_timeout),
        metrics.clone(),
    )
    .map(|credentials| {
        credentials.spawn_probe();
        credentials.into_credentials()
    })
    .map_err(|err| {
        GcpError::new(
            ErrorKind::Unauthenticated,
            Service::Tpu,
            "credentials",
            "application-default",
            format!("cannot load {what}: {err}"),
        )
    })
}

/// Applies endpoint, credentials and our retry choice to one of Google's client builders.
///
/// Retries are off (`NeverRetry`): the controllers own backoff per object (exponential with
/// jitter, keyed by UID) and a reconcile must never sit in the clients' default 60 s retry loop.
/// `call_timeout` bounds each HTTP attempt, so a hung connection surfaces as a `Transient` error.
pub(crate) fn configure<F, Cr>(
    builder: ClientBuilder<F, Cr>,
    endpoint: String,
    credentials: &Credentials,
    call_timeout: Duration,
) -> ClientBuilder<F, Cr>
where
    Credentials: Into<Cr>,
{
    builder
        .with_endpoint(endpoint)
        .with_credentials(credentials.clone())
        .with_retry_policy(NeverRetry)
        .with_attempt_timeout(call_timeout)
}

/// Maps a client construction failure.
pub(crate) fn build_error(
    service: Service,
    endpoint: &str,
    err: google_cloud_gax::client_builder::Error,
) -> GcpError {
    let kind = if err.is_default_credentials() {
        ErrorKind::Unauthenticated
    } else {
        ErrorKind::Other
    };
    GcpError::new(
        kind,
        service,
        "client.build",
        endpoint,
        format!("cannot build the client: {err}"),
    )
}

/// The region of a resource name `projects/{p}/{collection}/{region}/...` whose second
/// collection is one of `collections`, if it is a plausible region: it becomes part of a regional
/// endpoint's host name, so only lower-case letters, digits and `-` pass.
pub fn region_in<'a>(name: &'a str, collections: &[&str]) -> Option<&'a str> {
    let mut segments = name.split('/');
    let (Some("projects"), Some(project), Some(collection), Some(region)) =
        (segments.next(), segments.next(), segments.next(), segments.next())
    else {
        return None;
    };
    let valid = collections.contains(&collection)
        && !project.is_empty()
        && !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid.then_some(region)
}

fn trim(endpoint: &str) -> String {
    endpoint.trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_uses_public_endpoints_and_adc() {
        let resolved = GcpConfig::production().resolve();
        assert_eq!(resolved.tpu, "https://tpu.googleapis.com");
        assert_eq!(resolved.dataproc, "https://dataproc.googleapis.com");
        assert_eq!(resolved.storage, "https://storage.googleapis.com");
        assert_eq!(resolved.logging, "https://logging.googleapis.com");
        assert_eq!(resolved.credentials, CredentialsMode::Adc);
        assert_eq!(
            resolved.vertex_for("us-central1"),
            "https://us-central1-aiplatform.googleapis.com"
        );
        assert_eq!(
            resolved.vertex_for("europe-west4"),
            "https://europe-west4-aiplatform.googleapis.com"
        );
    }

    #[test]
    fn emulator_overrides_every_endpoint_and_credentials() {
        let mut config = GcpConfig::emulator(Url::parse("http://127.0.0.1:8085").unwrap());
        // Explicit endpoints and ADC are ignored once an emulator is set.
        config.tpu_endpoint = "https://elsewhere.example".into();
        config.credentials = CredentialsMode::Adc;
        let resolved = config.resolve();
        assert_eq!(resolved.tpu, "http://127.0.0.1:8085/tpu");
        assert_eq!(resolved.dataproc, "http://127.0.0.1:8085/dataproc");
        assert_eq!(resolved.vertex_for("us-central1"), "http://127.0.0.1:8085/vertex");
        assert_eq!(resolved.vertex_for("asia-east1"), "http://127.0.0.1:8085/vertex");
        assert_eq!(resolved.storage, "http://127.0.0.1:8085");
        assert_eq!(resolved.logging, "http://127.0.0.1:8085/logging");
        assert_eq!(resolved.credentials, CredentialsMode::Anonymous);
        // Custom credentials are a test's token source in front of the emulator: kept.
        let custom = CredentialsMode::Custom(CustomCredentials(Arc::new(|| {
            Ok(anonymous::Builder::new().build())
        })));
        config.credentials = custom.clone();
        assert_eq!(config.resolve().credentials, custom);
    }

    #[test]
    fn emulator_with_path_keeps_the_path() {
        let config = GcpConfig::emulator(Url::parse("http://localhost:9/base/").unwrap());
        let resolved = config.resolve();
        assert_eq!(resolved.tpu, "http://localhost:9/base/tpu");
        assert_eq!(resolved.storage, "http://localhost:9/base");
    }

    #[test]
    fn custom_endpoints_lose_trailing_slashes_and_fixed_vertex_endpoint_serves_all_regions() {
        let config = GcpConfig {
            tpu_endpoint: "http://proxy:1/tpu/".into(),
            vertex_endpoint: "https://private-vertex.example/".into(),
            credentials: CredentialsMode::Anonymous,
            ..GcpConfig::production()
        };
        let resolved = config.resolve();
        assert_eq!(resolved.tpu, "http://proxy:1/tpu");
        assert_eq!(resolved.vertex_for("us-east1"), "https://private-vertex.example");
        assert_eq!(resolved.credentials, CredentialsMode::Anonymous);
        assert_eq!(config.call_timeout, DEFAULT_CALL_TIMEOUT);
    }
}
