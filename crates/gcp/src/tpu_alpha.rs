//! The Cloud TPU API methods the operator calls that only `v2alpha1` has: today
//! `nodes.performMaintenance` and `queuedResources.performMaintenanceQueuedResource`, which
//! start a maintenance Google announced as reschedulable (`upcomingMaintenance.canReschedule`)
//! now instead of at its window: the first for a node of its own, the second for nodes of a
//! queued resource, which Google maintains through it.
//!
//! Google's `google-cloud-tpu-v2` client speaks `v2` only, and there is no official Rust client
//! of `v2alpha1`, so each is one plain `reqwest` call (`POST {endpoint}/v2alpha1/{name}:{verb}`)
//! with the same credentials and TLS stack as the other clients. Its answer is the same `google.longrunning.Operation` the v2 calls
//! return, read with that crate's own deserializer.

use std::time::Duration;

use google_cloud_longrunning::model::Operation;

use crate::{
    error::{ErrorKind, GcpError, Result, Service},
    identity::{Auth, http_client, transport_error},
};

/// Method id of [`TpuAlpha::perform_maintenance`] in errors and metrics.
pub const PERFORM_MAINTENANCE: &str = "nodes.performMaintenance";

/// Method id of [`TpuAlpha::perform_maintenance_queued_resource`] in errors and metrics.
pub const PERFORM_MAINTENANCE_QUEUED_RESOURCE: &str = "queuedResources.performMaintenanceQueuedResource";

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
        let body = serde_json::json!({});
        self.post(PERFORM_MAINTENANCE, name, "performMaintenance", body)
            .await
    }

    /// `queuedResources.performMaintenanceQueuedResource` of queued resource `name`
    /// (`projects/{p}/locations/{zone}/queuedResources/{id}`) for its nodes `nodes` (full
    /// names): the started operation.
    pub async fn perform_maintenance_queued_resource(
        &self,
        name: &str,
        nodes: &[String],
    ) -> Result<Operation> {
        let body = serde_json::json!({ "nodeNames": nodes });
        let verb = "performMaintenanceQueuedResource";
        self.post(PERFORM_MAINTENANCE_QUEUED_RESOURCE, name, verb, body)
            .await
    }

    /// `POST v2alpha1/{name}:{verb}` with `body`, answered by an operation.
    async fn post(
        &self,
        method: &'static str,
        name: &str,
        verb: &str,
        body: serde_json::Value,
    ) -> Result<Operation> {
        let url = format!("{}/v2alpha1/{name}:{verb}", self.endpoint);
        let request = self.http.post(url).json(&body);
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
