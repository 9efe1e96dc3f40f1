//! Cloud TPU API v2: nodes, queued resources and their operations.

use std::future::Future;

use async_trait::async_trait;
use google_cloud_longrunning::model::Operation;
use google_cloud_tpu_v2::{
    client::Tpu,
    model::{Node, QueuedResource},
};
use google_cloud_wkt::FieldMask;

use crate::{
    error::{GcpError, Result, Service},
    metrics::GcpMetrics,
    tpu_alpha::{PERFORM_MAINTENANCE, PERFORM_MAINTENANCE_QUEUED_RESOURCE, TpuAlpha},
};

/// Upper bound on pages read by one list call (a server that keeps returning tokens cannot trap
/// a reconcile): 100,000 items at [`LIST_PAGE_SIZE`].
pub(crate) const MAX_PAGES: usize = 200;

/// Items asked for per list page, in every service: Compute Engine's documented maximum
/// (`maxResults`, "Acceptable values are 0 to 500, inclusive" in compute.v1.json; Dataproc's
/// `batches.list` pageSize allows 1,000; TPU and Vertex document none). The page is what the
/// operator holds while it reads a listing (the body, then the decoded items): a TPU node carries
/// its startup script, so a page of 1,000 was ≈ 12 MiB decoded, the largest single part of the
/// operator's peak memory at 10,000 objects (heaptrack, docs/benchmarks.md). Pages of 200 held
/// that to ≈ 2.4 MiB but cost too many calls: with changes spread over time the cloud watch lists
/// a zone of 5,000 nodes every poll (25 pages, not 10), and convergence took 1.32 × the minimum
/// calls, over the 1.3 × budget. 500 is ≈ 6 MiB for 2.5 × fewer listing calls than 200.
pub(crate) const LIST_PAGE_SIZE: i32 = 500;

/// The TPU calls the controllers make. Names are full resource names
/// (`projects/{p}/locations/{zone}/nodes/{id}`), parents are `projects/{p}/locations/{zone}`.
/// Mutations return the started operation; poll it with [`TpuApi::get_operation`].
#[async_trait]
pub trait TpuApi: Send + Sync {
    async fn get_node(&self, name: &str) -> Result<Node>;
    /// `nodes.create` with a deterministic `node_id` (a repeat gets ALREADY_EXISTS).
    async fn create_node(&self, parent: &str, node_id: &str, node: Node) -> Result<Operation>;
    async fn delete_node(&self, name: &str) -> Result<Operation>;
    /// `nodes.patch` of `node` (its `name` is set from `name`) with the given update mask, e.g.
    /// `["labels", "metadata", "tags"]`.
    async fn update_node(&self, name: &str, node: Node, update_mask: &[&str]) -> Result<Operation>;
    async fn start_node(&self, name: &str) -> Result<Operation>;
    async fn stop_node(&self, name: &str) -> Result<Operation>;
    /// Every node in a zone (all pages), for orphan sweeping. TPU v2 has no server-side filter.
    async fn list_nodes(&self, parent: &str) -> Result<Vec<Node>> {
        let mut nodes = Vec::new();
        self.list_nodes_by_page(parent, &mut |page| nodes.extend(page))
            .await?;
        Ok(nodes)
    }
    /// Every node in a zone, handed to `sift` a page at a time as pages arrive, so a caller that
    /// keeps only a few never holds the whole zone (nodes carry their startup scripts: a
    /// thousand are megabytes).
    async fn list_nodes_by_page(&self, parent: &str, sift: &mut (dyn FnMut(Vec<Node>) + Send)) -> Result<()>;

    async fn get_queued_resource(&self, name: &str) -> Result<QueuedResource>;
    /// `queuedResources.create` with a deterministic id and an idempotency `request_id`.
    async fn create_queued_resource(
        &self,
        parent: &str,
        queued_resource_id: &str,
        request_id: &str,
        queued_resource: QueuedResource,
    ) -> Result<Operation>;
    /// `force` also deletes the queued resource's running nodes.
    async fn delete_queued_resource(&self, name: &str, force: bool) -> Result<Operation>;
    /// Puts a FAILED / SUSPENDED queued resource back in the queue.
    async fn reset_queued_resource(&self, name: &str) -> Result<Operation>;
    /// Every queued resource in a zone (all pages).
    async fn list_queued_resources(&self, parent: &str) -> Result<Vec<QueuedResource>>;

    async fn get_operation(&self, name: &str) -> Result<Operation>;

    /// `nodes.performMaintenance` (`v2alpha1`, see [`crate::tpu_alpha`]): starts the node's
    /// announced, reschedulable maintenance now. The operation is done when it is over.
    async fn perform_maintenance(&self, name: &str) -> Result<Operation>;

    /// `queuedResources.performMaintenanceQueuedResource` (`v2alpha1`): starts the announced,
    /// reschedulable maintenance of `nodes` (full names), nodes of queued resource `name`, now.
    async fn perform_maintenance_queued_resource(&self, name: &str, nodes: &[String]) -> Result<Operation>;
}

/// [`TpuApi`] over Google's `google-cloud-tpu-v2` client.
#[derive(Clone, Debug)]
pub struct TpuClient {
    client: Tpu,
    /// The `v2alpha1` methods the client lacks.
    alpha: TpuAlpha,
    metrics: GcpMetrics,
}

impl TpuClient {
    pub fn new(client: Tpu, alpha: TpuAlpha, metrics: GcpMetrics) -> Self {
        Self {
            client,
            alpha,
            metrics,
        }
    }

    async fn call<T>(
        &self,
        method: &'static str,
        target: &str,
        call: impl Future<Output = google_cloud_gax::Result<T>>,
    ) -> Result<T> {
        let ready = std::future::ready(Ok(()));
        self.metrics
            .observe_gax(Service::Tpu, method, target, ready, |()| call)
            .await
    }
}

#[async_trait]
impl TpuApi for TpuClient {
    async fn get_node(&self, name: &str) -> Result<Node> {
        self.call("nodes.get", name, self.client.get_node().set_name(name).send())
            .await
    }

    async fn create_node(&self, parent: &str, node_id: &str, node: Node) -> Result<Operation> {
        let request = self
            .client
            .create_node()
            .set_parent(parent)
            .set_node_id(node_id)
            .set_node(node);
        self.call("nodes.create", parent, request.send()).await
    }

    async fn delete_node(&self, name: &str) -> Result<Operation> {
        self.call(
            "nodes.delete",
            name,
            self.client.delete_node().set_name(name).send(),
        )
        .await
    }

    async fn update_node(&self, name: &str, node: Node, update_mask: &[&str]) -> Result<Operation> {
        let mask = FieldMask::default().set_paths(update_mask.iter().copied());
        let request = self
            .client
            .update_node()
            .set_node(node.set_name(name))
            .set_update_mask(mask);
        self.call("nodes.patch", name, request.send()).await
    }

    async fn start_node(&self, name: &str) -> Result<Operation> {
        self.call(
            "nodes.start",
            name,
            self.client.start_node().set_name(name).send(),
        )
        .await
    }

    async fn stop_node(&self, name: &str) -> Result<Operation> {
        self.call("nodes.stop", name, self.client.stop_node().set_name(name).send())
            .await
    }

    async fn list_nodes_by_page(&self, parent: &str, sift: &mut (dyn FnMut(Vec<Node>) + Send)) -> Result<()> {
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let request = self
                .client
                .list_nodes()
                .set_parent(parent)
                .set_page_size(LIST_PAGE_SIZE)
                .set_page_token(token);
            let page = self.call("nodes.list", parent, request.send()).await?;
            sift(page.nodes);
            if page.next_page_token.is_empty() {
                return Ok(());
            }
            token = page.next_page_token;
        }
        Err(too_many_pages(Service::Tpu, "nodes.list", parent))
    }

    async fn get_queued_resource(&self, name: &str) -> Result<QueuedResource> {
        let request = self.client.get_queued_resource().set_name(name);
        self.call("queuedResources.get", name, request.send()).await
    }

    async fn create_queued_resource(
        &self,
        parent: &str,
        queued_resource_id: &str,
        request_id: &str,
        queued_resource: QueuedResource,
    ) -> Result<Operation> {
        let request = self
            .client
            .create_queued_resource()
            .set_parent(parent)
            .set_queued_resource_id(queued_resource_id)
            .set_request_id(request_id)
            .set_queued_resource(queued_resource);
        self.call("queuedResources.create", parent, request.send()).await
    }

    async fn delete_queued_resource(&self, name: &str, force: bool) -> Result<Operation> {
        let request = self
            .client
            .delete_queued_resource()
            .set_name(name)
            .set_force(force);
        self.call("queuedResources.delete", name, request.send()).await
    }

    async fn reset_queued_resource(&self, name: &str) -> Result<Operation> {
        let request = self.client.reset_queued_resource().set_name(name);
        self.call("queuedResources.reset", name, request.send()).await
    }

    async fn list_queued_resources(&self, parent: &str) -> Result<Vec<QueuedResource>> {
        let mut resources = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let request = self
                .client
                .list_queued_resources()
                .set_parent(parent)
                .set_page_size(LIST_PAGE_SIZE)
                .set_page_token(token);
            let page = self.call("queuedResources.list", parent, request.send()).await?;
            resources.extend(page.queued_resources);
            if page.next_page_token.is_empty() {
                return Ok(resources);
            }
            token = page.next_page_token;
        }
        Err(too_many_pages(Service::Tpu, "queuedResources.list", parent))
    }

    async fn get_operation(&self, name: &str) -> Result<Operation> {
        self.call(
            "operations.get",
            name,
            self.client.get_operation().set_name(name).send(),
        )
        .await
    }

    async fn perform_maintenance(&self, name: &str) -> Result<Operation> {
        let call = self.alpha.perform_maintenance(name);
        self.metrics
            .observe(Service::Tpu, PERFORM_MAINTENANCE, name, call)
            .await
    }

    async fn perform_maintenance_queued_resource(&self, name: &str, nodes: &[String]) -> Result<Operation> {
        let call = self.alpha.perform_maintenance_queued_resource(name, nodes);
        self.metrics
            .observe(Service::Tpu, PERFORM_MAINTENANCE_QUEUED_RESOURCE, name, call)
            .await
    }
}

pub(crate) fn too_many_pages(service: Service, method: &'static str, parent: &str) -> GcpError {
    GcpError::new(
        crate::error::ErrorKind::Other,
        service,
        method,
        parent,
        format!("more than {MAX_PAGES} pages; the listing was stopped"),
    )
}
