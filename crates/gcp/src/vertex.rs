//! Vertex AI custom jobs, through one `JobService` client per region.
//!
//! Real custom-job calls must go to the regional host (`https://{region}-aiplatform.googleapis.com`),
//! so the region is taken from the resource name each call addresses and a client is built for it
//! the first time it is needed.

use std::{collections::HashMap, future::Future, time::Duration};

use async_trait::async_trait;
use google_cloud_aiplatform_v1::{client::JobService, model::CustomJob};
use google_cloud_auth::credentials::Credentials;
use google_cloud_longrunning::model::Operation;
use tokio::sync::Mutex;

use crate::{
    config::{self, ResolvedEndpoints},
    error::{ErrorKind, GcpError, Result, Service},
    metrics::GcpMetrics,
    tpu::{LIST_PAGE_SIZE, MAX_PAGES, too_many_pages},
};

/// The Vertex AI calls the controllers make. Parents are `projects/{p}/locations/{region}`;
/// job names are server-assigned (`projects/{number}/locations/{region}/customJobs/{id}`), so jobs
/// are found again by label: `list_custom_jobs(parent, r#"labels.tpu-operator-uid="<uid>""#)`.
#[async_trait]
pub trait VertexApi: Send + Sync {
    /// Synchronous create (not an LRO): returns the job with its server-assigned name.
    async fn create_custom_job(&self, parent: &str, job: CustomJob) -> Result<CustomJob>;
    async fn get_custom_job(&self, name: &str) -> Result<CustomJob>;
    /// All jobs of a location matching `filter` (all pages).
    async fn list_custom_jobs(&self, parent: &str, filter: &str) -> Result<Vec<CustomJob>> {
        let mut jobs = Vec::new();
        self.list_custom_jobs_by_page(parent, filter, &mut |page| jobs.extend(page))
            .await?;
        Ok(jobs)
    }
    /// [`VertexApi::list_custom_jobs`], handed to `sift` a page at a time as pages arrive.
    async fn list_custom_jobs_by_page(
        &self,
        parent: &str,
        filter: &str,
        sift: &mut (dyn FnMut(Vec<CustomJob>) + Send),
    ) -> Result<()>;
    /// Best effort: the job goes CANCELLING → CANCELLED (and is not deleted).
    async fn cancel_custom_job(&self, name: &str) -> Result<()>;
    /// Returns the delete operation; only for terminal jobs.
    async fn delete_custom_job(&self, name: &str) -> Result<Operation>;
    async fn get_operation(&self, name: &str) -> Result<Operation>;
}

/// [`VertexApi`] over Google's `google-cloud-aiplatform-v1` `JobService` client.
#[derive(Debug)]
pub struct VertexClient {
    endpoints: ResolvedEndpoints,
    credentials: Credentials,
    call_timeout: Duration,
    clients: Mutex<HashMap<String, JobService>>,
    metrics: GcpMetrics,
}

impl VertexClient {
    pub fn new(
        endpoints: ResolvedEndpoints,
        credentials: Credentials,
        call_timeout: Duration,
        metrics: GcpMetrics,
    ) -> Self {
        Self {
            endpoints,
            credentials,
            call_timeout,
            clients: Mutex::default(),
            metrics,
        }
    }

    /// The region's client, built on first use.
    async fn client_for(&self, method: &'static str, name: &str) -> Result<JobService> {
        let region = region_of(name).ok_or_else(|| {
            GcpError::new(
                ErrorKind::InvalidArgument,
                Service::Vertex,
                method,
                name,
                "expected a resource name starting with projects/{project}/locations/{region}",
            )
        })?;
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(region) {
            return Ok(client.clone());
        }
        let endpoint = self.endpoints.vertex_for(region);
        let builder = config::configure(
            JobService::builder(),
            endpoint.clone(),
            &self.credentials,
            self.call_timeout,
        );
        let client = builder
            .build()
            .await
            .map_err(|err| config::build_error(Service::Vertex, &endpoint, err))?;
        clients.insert(region.to_string(), client.clone());
        Ok(client)
    }

    async fn call<T, F>(
        &self,
        method: &'static str,
        target: &str,
        call: impl FnOnce(JobService) -> F,
    ) -> Result<T>
    where
        F: Future<Output = google_cloud_gax::Result<T>>,
    {
        let client = self.client_for(method, target);
        self.metrics
            .observe_gax(Service::Vertex, method, target, client, call)
            .await
    }
}

/// The location segment of `projects/{p}/locations/{region}/...`, if it is a plausible region
/// (it becomes part of a host name).
pub fn region_of(name: &str) -> Option<&str> {
    config::region_in(name, &["locations"])
}

#[async_trait]
impl VertexApi for VertexClient {
    async fn create_custom_job(&self, parent: &str, job: CustomJob) -> Result<CustomJob> {
        self.call("customJobs.create", parent, |client| async move {
            client
                .create_custom_job()
                .set_parent(parent)
                .set_custom_job(job)
                .send()
                .await
        })
        .await
    }

    async fn get_custom_job(&self, name: &str) -> Result<CustomJob> {
        self.call("customJobs.get", name, |client| async move {
            client.get_custom_job().set_name(name).send().await
        })
        .await
    }

    async fn list_custom_jobs_by_page(
        &self,
        parent: &str,
        filter: &str,
        sift: &mut (dyn FnMut(Vec<CustomJob>) + Send),
    ) -> Result<()> {
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let page_token = std::mem::take(&mut token);
            let page = self
                .call("customJobs.list", parent, |client| async move {
                    let request = client
                        .list_custom_jobs()
                        .set_parent(parent)
                        .set_filter(filter)
                        .set_page_size(LIST_PAGE_SIZE);
                    request.set_page_token(page_token).send().await
                })
                .await?;
            sift(page.custom_jobs);
            if page.next_page_token.is_empty() {
                return Ok(());
            }
            token = page.next_page_token;
        }
        Err(too_many_pages(Service::Vertex, "customJobs.list", parent))
    }

    async fn cancel_custom_job(&self, name: &str) -> Result<()> {
        self.call("customJobs.cancel", name, |client| async move {
            client.cancel_custom_job().set_name(name).send().await
        })
        .await
    }

    async fn delete_custom_job(&self, name: &str) -> Result<Operation> {
        self.call("customJobs.delete", name, |client| async move {
            client.delete_custom_job().set_name(name).send().await
        })
        .await
    }

    async fn get_operation(&self, name: &str) -> Result<Operation> {
        self.call("operations.get", name, |client| async move {
            client.get_operation().set_name(name).send().await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_comes_from_the_resource_name() {
        let cases: &[(&str, Option<&str>)] = &[
            ("projects/p/locations/us-central1", Some("us-central1")),
            (
                "projects/123/locations/europe-west4/customJobs/77",
                Some("europe-west4"),
            ),
            (
                "projects/123/locations/us-central1/customJobs/77/operations/9",
                Some("us-central1"),
            ),
            (
                "projects/p/locations/us-central1/operations/9",
                Some("us-central1"),
            ),
            ("projects/p/regions/us-central1", None),
            ("projects//locations/us-central1", None),
            ("projects/p/locations/", None),
            ("projects/p/locations/evil.example.com#", None),
            ("locations/us-central1", None),
            ("", None),
        ];
        for &(name, region) in cases {
            assert_eq!(region_of(name), region, "{name}");
        }
    }
}
