//! Dataproc Serverless: batches and their operations.

use std::future::Future;

use async_trait::async_trait;
use google_cloud_dataproc_v1::{client::BatchController, model::Batch};
use google_cloud_longrunning::model::Operation;

use crate::{
    error::{GcpError, Result, Service},
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

/// [`DataprocApi`] over Google's `google-cloud-dataproc-v1` `BatchController` client.
#[derive(Clone, Debug)]
pub struct DataprocClient {
    client: BatchController,
    metrics: GcpMetrics,
}

impl DataprocClient {
    pub fn new(client: BatchController, metrics: GcpMetrics) -> Self {
        Self { client, metrics }
    }

    async fn call<T>(
        &self,
        method: &'static str,
        target: &str,
        call: impl Future<Output = google_cloud_gax::Result<T>>,
    ) -> Result<T> {
        let call = async {
            call.await
                .map_err(|err| GcpError::from_gax(Service::Dataproc, method, target, &err))
        };
        self.metrics.observe(Service::Dataproc, method, call).await
    }
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
        let request = self
            .client
            .create_batch()
            .set_parent(parent)
            .set_batch_id(batch_id)
            .set_request_id(request_id)
            .set_batch(batch);
        self.call("batches.create", parent, request.send()).await
    }

    async fn get_batch(&self, name: &str) -> Result<Batch> {
        self.call("batches.get", name, self.client.get_batch().set_name(name).send())
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
            let request = self
                .client
                .list_batches()
                .set_parent(parent)
                .set_filter(filter)
                .set_page_size(LIST_PAGE_SIZE)
                .set_page_token(token);
            let page = self.call("batches.list", parent, request.send()).await?;
            sift(page.batches);
            if page.next_page_token.is_empty() {
                return Ok(());
            }
            token = page.next_page_token;
        }
        Err(too_many_pages(Service::Dataproc, "batches.list", parent))
    }

    async fn delete_batch(&self, name: &str) -> Result<()> {
        self.call(
            "batches.delete",
            name,
            self.client.delete_batch().set_name(name).send(),
        )
        .await
    }

    async fn get_operation(&self, name: &str) -> Result<Operation> {
        self.call(
            "operations.get",
            name,
            self.client.get_operation().set_name(name).send(),
        )
        .await
    }

    async fn cancel_operation(&self, name: &str) -> Result<()> {
        self.call(
            "operations.cancel",
            name,
            self.client.cancel_operation().set_name(name).send(),
        )
        .await
    }
}
