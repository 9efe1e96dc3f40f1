//! Dataproc Serverless: batches and their operations.

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use async_trait::async_trait;
use google_cloud_auth::credentials::Credentials;
use google_cloud_dataproc_v1::{client::BatchController, model::Batch};
use google_cloud_longrunning::model::Operation;

use crate::{
    config,
    error::{ErrorKind, GcpError, Result, Service},
    metrics::GcpMetrics,
    tpu::{LIST_PAGE_SIZE, MAX_PAGES, too_many_pages},
};

/// The Dataproc calls the controllers make. Batch names are
/// `projects/{p}/locations/{region}/batches/{id}`; operation names are as the server returns them
/// (`projects/{p}/regions/{region}/operations/{id}`, also in `Batch.operation`).
#[async_trait]
pub trait DataprocApi: Send + Sync {
    /// `batches.create` with a deterministic `batch_id` and an idempotency `request_id` (a repeat
    /// with the same request id returns the first operation). The operation stays pending for the
    /// whole Spark run: never wait on it, poll the batch.
    async fn create_batch(
        &self,
        parent: &str,
        batch_id: &str,
        request_id: &str,
        batch: Batch,
    ) -> Result<Operation>;
    async fn get_batch(&self, name: &str) -> Result<Batch>;
    /// All batches of a location matching an AIP-160 `filter`, e.g.
    /// `labels.tpu-operator-uid = "<uid>"` (empty: all).
    async fn list_batches(&self, parent: &str, filter: &str) -> Result<Vec<Batch>> {
        let mut batches = Vec::new();
        self.list_batches_by_page(parent, filter, &mut |page| batches.extend(page))
            .await?;
        Ok(batches)
    }
    /// [`DataprocApi::list_batches`], handed to `sift` a page at a time as pages arrive.
    async fn list_batches_by_page(
        &self,
        parent: &str,
        filter: &str,
        sift: &mut (dyn FnMut(Vec<Batch>) + Send),
    ) -> Result<()>;
    /// Only allowed once the batch is terminal (else FAILED_PRECONDITION).
    async fn delete_batch(&self, name: &str) -> Result<()>;
    async fn get_operation(&self, name: &str) -> Result<Operation>;
    /// Cancels a batch = cancels its operation (`Batch.operation`); the batch then goes
    /// CANCELLING → CANCELLED.
    async fn cancel_operation(&self, name: &str) -> Result<()>;
}

/// [`DataprocApi`] over Google's `google-cloud-dataproc-v1` `BatchController` client: one client
/// for every region, or (endpoint with a `{region}` placeholder, e.g. the regional
/// `https://{region}-dataproc.googleapis.com`) one per region, built on first use.
#[derive(Clone, Debug)]
pub struct DataprocClient {
    clients: Clients,
    metrics: GcpMetrics,
}

#[derive(Clone, Debug)]
enum Clients {
    Fixed(BatchController),
    Regional(Arc<Regional>),
}

#[derive(Debug)]
struct Regional {
    template: String,
    credentials: Credentials,
    call_timeout: Duration,
    built: tokio::sync::Mutex<HashMap<String, BatchController>>,
}

impl DataprocClient {
    /// One client for every region.
    pub fn new(client: BatchController, metrics: GcpMetrics) -> Self {
        Self {
            clients: Clients::Fixed(client),
            metrics,
        }
    }

    /// One client per region: `{region}` in `template` is replaced by the region of the
    /// resource a call addresses.
    pub fn regional(
        template: String,
        credentials: Credentials,
        call_timeout: Duration,
        metrics: GcpMetrics,
    ) -> Self {
        Self {
            clients: Clients::Regional(Arc::new(Regional {
                template,
                credentials,
                call_timeout,
                built: tokio::sync::Mutex::default(),
            })),
            metrics,
        }
    }

    /// The client for the resource `name` addresses.
    async fn client_for(&self, method: &'static str, name: &str) -> Result<BatchController> {
        let regional = match &self.clients {
            Clients::Fixed(client) => return Ok(client.clone()),
            Clients::Regional(regional) => regional,
        };
        let region = region_of(name).ok_or_else(|| {
            GcpError::new(
                ErrorKind::InvalidArgument,
                Service::Dataproc,
                method,
                name,
                "expected a resource name starting with projects/{project}/locations/{region} or \
                 projects/{project}/regions/{region}",
            )
        })?;
        let mut built = regional.built.lock().await;
        if let Some(client) = built.get(region) {
            return Ok(client.clone());
        }
        let endpoint = regional.template.replace("{region}", region);
        let client = config::configure(
            BatchController::builder(),
            endpoint.clone(),
            &regional.credentials,
            regional.call_timeout,
        )
        .build()
        .await
        .map_err(|err| config::build_error(Service::Dataproc, &endpoint, err))?;
        built.insert(region.to_string(), client.clone());
        Ok(client)
    }

    async fn call<T, F>(
        &self,
        method: &'static str,
        target: &str,
        call: impl FnOnce(BatchController) -> F,
    ) -> Result<T>
    where
        F: Future<Output = google_cloud_gax::Result<T>>,
    {
        let client = self.client_for(method, target);
        self.metrics
            .observe_gax(Service::Dataproc, method, target, client, call)
            .await
    }
}

/// The region of `projects/{p}/locations/{region}/...` (batches) or
/// `projects/{p}/regions/{region}/...` (operations), if it is a plausible region (it may become
/// part of a host name).
pub fn region_of(name: &str) -> Option<&str> {
    config::region_in(name, &["locations", "regions"])
}

#[async_trait]
impl DataprocApi for DataprocClient {
    async fn create_batch(
        &self,
        parent: &str,
        batch_id: &str,
        request_id: &str,
        batch: Batch,
    ) -> Result<Operation> {
        self.call("batches.create", parent, |client| async move {
            client
                .create_batch()
                .set_parent(parent)
                .set_batch_id(batch_id)
                .set_request_id(request_id)
                .set_batch(batch)
                .send()
                .await
        })
        .await
    }

    async fn get_batch(&self, name: &str) -> Result<Batch> {
        self.call("batches.get", name, |client| async move {
            client.get_batch().set_name(name).send().await
        })
        .await
    }

    async fn list_batches_by_page(
        &self,
        parent: &str,
        filter: &str,
        sift: &mut (dyn FnMut(Vec<Batch>) + Send),
    ) -> Result<()> {
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let page = self
                .call("batches.list", parent, |client| async move {
                    client
                        .list_batches()
                        .set_parent(parent)
                        .set_filter(filter)
                        .set_page_size(LIST_PAGE_SIZE)
                        .set_page_token(token)
                        .send()
                        .await
                })
                .await?;
            sift(page.batches);
            if page.next_page_token.is_empty() {
                return Ok(());
            }
            token = page.next_page_token;
        }
        Err(too_many_pages(Service::Dataproc, "batches.list", parent))
    }

    async fn delete_batch(&self, name: &str) -> Result<()> {
        self.call("batches.delete", name, |client| async move {
            client.delete_batch().set_name(name).send().await
        })
        .await
    }

    async fn get_operation(&self, name: &str) -> Result<Operation> {
        self.call("operations.get", name, |client| async move {
            client.get_operation().set_name(name).send().await
        })
        .await
    }

    async fn cancel_operation(&self, name: &str) -> Result<()> {
        self.call("operations.cancel", name, |client| async move {
            client.cancel_operation().set_name(name).send().await
        })
        .await
    }
}
