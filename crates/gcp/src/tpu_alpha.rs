//! The Cloud TPU API methods the operator calls that only `v2alpha1` has: today
//! `nodes.performMaintenance`, which starts a maintenance Google announced as reschedulable
//! (`upcomingMaintenance.canReschedule`) now instead of at its window.
//!
//! Google's `google-cloud-tpu-v2` client speaks `v2` only, and there is no official Rust client
//! of `v2alpha1`, so this is one plain `reqwest` call (`POST {endpoint}/v2alpha1/{name}:
//! performMaintenance`, an empty `PerformMaintenanceRequest`) with the same credentials and TLS
//! stack as the other clients. Its answer is the same `google.longrunning.Operation` the v2 calls
//! return, read with that crate's own deserializer.

use std::time::Duration;

use google_cloud_longrunning::model::Operation;

use crate::{
    error::{ErrorKind, GcpError, Result, Service},
    identity::{Auth, http_client, transport_error},
};

/// Method id of [`TpuAlpha::perform_maintenance`] in errors and metrics.
pub const PERFORM_MAINTENANCE: &str = "nodes.performMaintenance";

/// The `v2alpha1` calls, over one connection pool.
#[derive(Clone, Debug)]
pub struct TpuAlpha {
    http: reqwest::Client,
    /// The TPU API root (`https://tpu.googleapis.com`, or an emulator's).
    endpoint: String,
    auth: Auth,
}

impl TpuAlpha {
    pub fn new(endpoint: &str, auth: Auth, call_timeout: Duration) -> Result<Self> {
        let http = http_client(Service::Tpu, endpoint, call_timeout)?;
        Ok(Self {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            auth,
        })
    }

    /// `nodes.performMaintenance` of node `name` (`projects/{p}/locations/{zone}/nodes/{id}`):
    /// the started operation, done when the maintenance is over.
    pub async fn perform_maintenance(&self, name: &str) -> Result<Operation> {
        let method = PERFORM_MAINTENANCE;
        let url = format!("{}/v2alpha1/{name}:performMaintenance", self.endpoint);
        let request = self.http.post(url).json(&serde_json::json!({}));
        let request = self.auth.authorize(request, Service::Tpu, method, name).await?;
        let response = request
            .send()
            .await
            .map_err(|err| transport_error(Service::Tpu, method, name, &err))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err(GcpError::from_http_response(
                Service::Tpu,
                method,
                name,
                status,
                &body,
            ));
        }
        serde_json::from_slice(&body).map_err(|err| {
            GcpError::new(
                ErrorKind::Unreadable,
                Service::Tpu,
                method,
                name,
                format!("the answer is not an operation: {err}"),
            )
        })
    }
}
