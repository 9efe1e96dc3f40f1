//! The GCP client layer of tpu-operator.
//!
//! Controllers see GCP through narrow, object-safe traits ([`TpuApi`], [`DataprocApi`],
//! [`VertexApi`], [`StorageApi`], [`ComputeApi`], [`LoggingApi`]) held as `Arc<dyn ...>` in the [`Gcp`] bundle, so tests can swap in
//! fakes. The real implementations use Google's official Rust clients (REST transport) for TPU,
//! Dataproc and Vertex AI, and plain `reqwest` for the Cloud Storage JSON API (the official
//! storage client lists objects over gRPC only). Requests and responses are the clients' own
//! model types (`google_cloud_tpu_v2::model::Node`, ...), re-exported here so callers use the same
//! versions.
//!
//! Design choices:
//! * **No blocking on long-running operations.** Mutations return the started `Operation`;
//!   controllers store its name and poll with `get_operation` + [`lro::operation_result`].
//! * **No client-side retries.** The clients are built with `NeverRetry` and a per-attempt timeout
//!   ([`GcpConfig::call_timeout`]): one trait call is one HTTP request, and backoff belongs to the
//!   controllers (per object, by [`ErrorKind`]), so a reconcile never sits in a 60 s retry loop.
//! * **One error type.** [`GcpError`] classifies every failure into an [`ErrorKind`]; see
//!   [`error`] for how RESOURCE_EXHAUSTED (stockout vs rate limit) is treated.
//! * **Every call is measured** ([`GcpMetrics`]: `gcp_calls_total{service,method,outcome}`).

pub mod compute;
pub mod config;
pub mod credentials;
pub mod dataproc;
pub mod error;
pub mod identity;
pub mod logging;
pub mod lro;
pub mod maintenance;
pub mod metrics;
pub mod storage;
pub mod tpu;
pub mod tpu_alpha;
pub mod vertex;

use std::sync::Arc;

pub use compute::{ComputeApi, ComputeClient, Place, slices::ComputeSlices};
pub use config::{CredentialsMode, CustomCredentials, GcpConfig};
pub use dataproc::{DataprocApi, DataprocClient};
pub use error::{
    CreateFailure, ErrorKind, Exhaustion, GcpError, QuotaDetails, Service, ignore_not_found, is_not_found,
};
pub use identity::{Auth, Impersonation, TokenClock};
pub use logging::{LoggingApi, LoggingClient};
pub use lro::{OperationState, operation_result, operation_state};
pub use metrics::{CallHold, GcpMetrics};
pub use storage::{ObjectInfo, StorageApi, StorageClient, parse_gs_uri};
pub use tpu::{TpuApi, TpuClient};
use tpu_alpha::TpuAlpha;
pub use vertex::{VertexApi, VertexClient};

/// The official clients' crates, so callers build requests with exactly the versions used here.
pub use google_cloud_aiplatform_v1 as aiplatform_v1;
pub use google_cloud_compute_v1 as compute_v1;
pub use google_cloud_dataproc_v1 as dataproc_v1;
pub use google_cloud_longrunning as longrunning;
pub use google_cloud_tpu_v2 as tpu_v2;
pub use google_cloud_wkt as wkt;

/// Every GCP surface the controllers use.
#[derive(Clone)]
pub struct Gcp {
    pub tpu: Arc<dyn TpuApi>,
    pub dataproc: Arc<dyn DataprocApi>,
    pub vertex: Arc<dyn VertexApi>,
    pub storage: Arc<dyn StorageApi>,
    /// Compute Engine, for slices with `provisioner: ComputeEngine`: [`Gcp::compute_slices`]
    /// builds and reads them through `compute`.
    pub compute: Arc<dyn ComputeApi>,
    pub compute_slices: Arc<ComputeSlices>,
    /// Cloud Logging: a failed workload's last lines.
    pub logging: Arc<dyn LoggingApi>,
    /// Tokens of the Google service accounts the operator acts as for a namespace
    /// (`TpuPolicy.spec.googleServiceAccount`); see [`identity`].
    pub impersonation: Arc<Impersonation>,
    /// The storage client per impersonated service account (built on first use).
    storage_as: Arc<StorageAs>,
    /// What every client reports to, the credentials' recoveries included.
    metrics: GcpMetrics,
}

/// [`Gcp::storage_as`]'s clients.
struct StorageAs {
    base: StorageClient,
    clients: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn StorageApi>>>,
}

impl std::fmt::Debug for Gcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gcp").finish_non_exhaustive()
    }
}

impl Gcp {
    /// Cloud Storage as `service_account` (impersonated, its token cached until near expiry), or
    /// as the operator itself when `None`.
    pub fn storage_as(&self, service_account: Option<&str>) -> Arc<dyn StorageApi> {
        let Some(sa) = service_account else {
            return self.storage.clone();
        };
        let mut clients = self.storage_as.clients.lock().expect("storage clients poisoned");
        clients
            .entry(sa.to_string())
            .or_insert_with(|| Arc::new(self.storage_as.base.acting_as(self.impersonation.clone(), sa)))
            .clone()
    }

    /// Changes each time the shared credentials recover after failing (see
    /// [`GcpMetrics::credentials_recoveries`]); never, for anonymous credentials.
    pub fn credentials_recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.metrics.credentials_recoveries()
    }

    /// Builds the real clients. No API call is sent yet (Vertex clients are built per region on
    /// first use), but ADC must be loadable in [`CredentialsMode::Adc`], and the clients ask the
    /// credentials for their universe domain (the metadata server, on GKE): that question is
    /// bounded by the token deadline ([`credentials::RecoveryPolicy`]), asked once, and answered
    /// with the default (`googleapis.com`) when the metadata server does not answer, so this
    /// returns within about `call_timeout / 2` even then.
    ///
    /// Every call of the returned clients, the wait for a token included, is bounded by
    /// `config.call_timeout` and counted in `metrics` when it fails.
    pub async fn connect(config: GcpConfig, metrics: GcpMetrics) -> Result<Gcp, GcpError> {
        let endpoints = config.resolve();
        let timeout = config.call_timeout;
        let metrics = metrics.with_deadline(timeout);
        let credentials = config::build_credentials(&endpoints.credentials, timeout, &metrics)?;

        let tpu = config::configure(
            google_cloud_tpu_v2::client::Tpu::builder(),
            endpoints.tpu.clone(),
            &credentials,
            timeout,
        )
        .build()
        .await
        .map_err(|err| config::build_error(Service::Tpu, &endpoints.tpu, err))?;
        let dataproc = dataproc_client(&endpoints.dataproc, &credentials, timeout, metrics.clone()).await?;
        // The plain-HTTP clients (impersonation, TPU v2alpha1, storage) send no header at all
        // with anonymous credentials.
        let http_credentials = match endpoints.credentials {
            CredentialsMode::Adc | CredentialsMode::Custom(_) => Some(credentials.clone()),
            CredentialsMode::Anonymous => None,
        };
        let impersonation = Arc::new(Impersonation::new(
            &endpoints.iam_credentials,
            http_credentials.clone(),
            timeout,
        )?);
        let auth = http_credentials
            .clone()
            .map(Auth::Credentials)
            .unwrap_or_default();
        let tpu_alpha = TpuAlpha::new(&endpoints.tpu, auth, timeout)?;
        let storage = StorageClient::new(&endpoints.storage, http_credentials, timeout, metrics.clone())?;
        let compute = compute_client(&endpoints.compute, &credentials, timeout, metrics.clone()).await?;
        let logging = logging_client(&endpoints.logging, &credentials, timeout, metrics.clone()).await?;
        let vertex = VertexClient::new(endpoints.clone(), credentials, timeout, metrics.clone());

        let compute: Arc<dyn ComputeApi> = Arc::new(compute);
        Ok(Gcp {
            tpu: Arc::new(TpuClient::new(tpu, tpu_alpha, metrics.clone())),
            dataproc: Arc::new(dataproc),
            vertex: Arc::new(vertex),
            storage_as: Arc::new(StorageAs {
                base: storage.clone(),
                clients: Default::default(),
            }),
            storage: Arc::new(storage),
            impersonation,
            compute_slices: Arc::new(ComputeSlices::new(compute.clone())),
            compute,
            logging: Arc::new(logging),
            metrics,
        })
    }

    /// Only the Cloud Logging client (`tpu-operator logs`, which reads nothing else).
    pub async fn connect_logging(config: GcpConfig, metrics: GcpMetrics) -> Result<LoggingClient, GcpError> {
        let endpoints = config.resolve();
        let timeout = config.call_timeout;
        let metrics = metrics.with_deadline(timeout);
        let credentials = config::build_credentials(&endpoints.credentials, timeout, &metrics)?;
        logging_client(&endpoints.logging, &credentials, timeout, metrics).await
    }
}

/// Dataproc's client: one per region for an endpoint with a `{region}` placeholder (replaced by
/// the region a call addresses), else one client for every region.
async fn dataproc_client(
    endpoint: &str,
    credentials: &google_cloud_auth::credentials::Credentials,
    timeout: std::time::Duration,
    metrics: GcpMetrics,
) -> Result<DataprocClient, GcpError> {
    if endpoint.contains("{region}") {
        return Ok(DataprocClient::regional(
            endpoint.to_string(),
            credentials.clone(),
            timeout,
            metrics,
        ));
    }
    let client = config::configure(
        google_cloud_dataproc_v1::client::BatchController::builder(),
        endpoint.to_string(),
        credentials,
        timeout,
    )
    .build()
    .await
    .map_err(|err| config::build_error(Service::Dataproc, endpoint, err))?;
    Ok(DataprocClient::new(client, metrics))
}

/// Cloud Logging's client.
async fn logging_client(
    endpoint: &str,
    credentials: &google_cloud_auth::credentials::Credentials,
    timeout: std::time::Duration,
    metrics: GcpMetrics,
) -> Result<LoggingClient, GcpError> {
    let client = config::configure(
        google_cloud_logging_v2::client::LoggingServiceV2::builder(),
        endpoint.to_string(),
        credentials,
        timeout,
    )
    .build()
    .await
    .map_err(|err| config::build_error(Service::Logging, endpoint, err))?;
    Ok(LoggingClient::new(client, metrics))
}

/// Compute Engine's clients, one per service the TPU backend uses, sharing endpoint and
/// credentials.
async fn compute_client(
    endpoint: &str,
    credentials: &google_cloud_auth::credentials::Credentials,
    timeout: std::time::Duration,
    metrics: GcpMetrics,
) -> Result<ComputeClient, GcpError> {
    use google_cloud_compute_v1::client as c;
    let fail = |err| config::build_error(Service::Compute, endpoint, err);
    macro_rules! build {
        ($client:ty) => {
            config::configure(
                <$client>::builder(),
                endpoint.to_string(),
                credentials,
                timeout,
            )
            .build()
            .await
            .map_err(fail)?
        };
    }
    Ok(ComputeClient {
        instances: build!(c::Instances),
        templates: build!(c::RegionInstanceTemplates),
        policies: build!(c::ResourcePolicies),
        managers: build!(c::InstanceGroupManagers),
        resize_requests: build!(c::InstanceGroupManagerResizeRequests),
        zone_operations: build!(c::ZoneOperations),
        region_operations: build!(c::RegionOperations),
        metrics,
    })
}
