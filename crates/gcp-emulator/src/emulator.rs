//! In-process use: start the emulator on a loopback port and drive it through a Rust handle.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use gcp_emulator::{Emulator, Fault, Code};
//! let emu = Emulator::builder().manual_clock(chrono::Utc::now()).start().await?;
//! let tpu_endpoint = format!("{}/tpu", emu.url());      // for google_cloud_tpu_v2 .with_endpoint()
//! emu.inject(Fault::FailCalls { service: "tpu".into(), method: "nodes.create".into(), count: 1,
//!                               code: Code::Unavailable, message: None }).unwrap();
//! emu.clock().advance(std::time::Duration::from_secs(300));
//! assert!(emu.nodes().is_empty());
//! emu.shutdown().await;
//! # let _ = tpu_endpoint; Ok(()) }
//! ```

use crate::admin::{self, ResourceSummary};
use crate::calls::CallRecord;
use crate::clock::Clock;
use crate::config::Config;
use crate::errors::ApiError;
use crate::faults::Fault;
use crate::server::router;
use crate::training::{CheckpointRequest, WorkloadInterruption};
use crate::world::Shared;
use crate::world::World;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Builder for [`Emulator`].
#[derive(Debug, Default)]
pub struct EmulatorBuilder {
    addr: Option<SocketAddr>,
    manual_start: Option<DateTime<Utc>>,
    time_scale: Option<f64>,
    config: Config,
}

impl EmulatorBuilder {
    /// Use a manual clock starting at `start` (only [`Clock::advance`] / [`Clock::set`] move it).
    pub fn manual_clock(mut self, start: DateTime<Utc>) -> Self {
        self.manual_start = Some(start);
        self
    }
    /// Run emulated time `scale` times faster than real time (ignored with a manual clock).
    pub fn time_scale(mut self, scale: f64) -> Self {
        self.time_scale = Some(scale);
        self
    }
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// Listen on `addr` instead of `127.0.0.1:0`.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.addr = Some(addr);
        self
    }

    /// Binds, starts serving in a background tokio task and returns the handle.
    pub async fn start(self) -> std::io::Result<Emulator> {
        let clock = match self.manual_start {
            Some(t) => Clock::manual(t),
            None => Clock::scaled(self.time_scale.unwrap_or(1.0)),
        };
        let addr = self.addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            world: Mutex::new(World::new(self.config, clock.now())),
            clock,
        });
        let (tx, rx) = oneshot::channel::<()>();
        let app = router(shared.clone());
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "gcp-emulator server stopped");
            }
        });
        Ok(Emulator {
            addr,
            shared,
            shutdown: Some(tx),
            task: Some(task),
        })
    }
}

/// A stored object, as returned by [`Emulator::objects`].
#[derive(Clone, Debug, PartialEq)]
pub struct StoredObject {
    pub name: String,
    pub content_type: String,
    pub data: Bytes,
    /// The object's JSON metadata as `objects.get` serves it.
    pub metadata: Value,
}

/// A running emulator. Dropping it stops the server too (without waiting).
pub struct Emulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Emulator {
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`. Services live under `{url}/tpu`, `{url}/dataproc`,
    /// `{url}/vertex`, and GCS at `{url}/storage/v1`, `{url}/upload/storage/v1`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn clock(&self) -> Clock {
        self.shared.clock.clone()
    }

    pub(crate) fn with_world<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        f(&mut self.shared.world())
    }

    /// Injects a fault (see [`Fault`]). Errors when the target does not exist or is not eligible
    /// (e.g. preempting an on-demand node).
    pub fn inject(&self, fault: Fault) -> Result<(), ApiError> {
        self.with_world(|w| admin::inject(w, fault))
    }

    /// Declares (or resizes) a TPU reservation of `chips` chips, full name
    /// `projects/{p}/locations/{zone}/reservations/{r}`, which queued resources can name in
    /// `reservationName` (`tpu/reservations.rs`). Waiting queued resources re-check at once.
    pub fn create_reservation(&self, name: &str, chips: u64) -> Result<(), ApiError> {
        self.with_world(|w| admin::create_reservation(w, name, chips))
    }

    /// The declared reservations: name -> chips.
    pub fn reservations(&self) -> BTreeMap<String, u64> {
        self.with_world(|w| w.tpu.reservations.clone())
    }

    pub fn clear_faults(&self) {
        self.with_world(|w| w.cloud.faults = Default::default())
    }

    /// Every call answered so far (oldest first; at most the last 100,000).
    pub fn calls(&self) -> Vec<CallRecord> {
        self.with_world(|w| w.cloud.calls.records())
    }

    /// Call counts keyed `service.method`, e.g. `tpu.nodes.create`.
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        self.with_world(|w| w.cloud.calls.counts())
    }

    pub fn call_count(&self, service: &str, method: &str) -> u64 {
        self.call_counts()
            .get(&format!("{service}.{method}"))
            .copied()
            .unwrap_or(0)
    }

    pub fn clear_calls(&self) {
        self.with_world(|w| w.cloud.calls.clear())
    }

    /// TPU nodes as `nodes.get` returns them (enum names).
    pub fn nodes(&self) -> Vec<Value> {
        self.with_world(|w| w.tpu.nodes.values().map(|r| r.body.clone()).collect())
    }
    /// The environment the workload container of TPU node `name` (full name) started with on
    /// its hosts, as the node's startup script set it (see `tpu::nodes::container_env`);
    /// `None` while it has not started.
    pub fn workload_env(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.with_world(|w| w.tpu.nodes.get(name).and_then(|r| r.workload_env.clone()))
    }
    /// Where the running workload of TPU node `name` (full name) started (or restarted) from:
    /// the emulated time and the committed step it resumed at; `None` while none runs.
    pub fn workload_started(&self, name: &str) -> Option<(DateTime<Utc>, u64)> {
        self.with_world(|w| {
            let p = w.tpu.nodes.get(name)?.run.progress?;
            Some((p.t0, p.s0))
        })
    }
    /// Every interruption of a running simulated workload so far (maintenance, preemption,
    /// deletion, stop), oldest first, with the steps it lost (see [`crate::training`]).
    pub fn workload_interruptions(&self) -> Vec<WorkloadInterruption> {
        self.with_world(|w| w.cloud.training.interruptions.clone())
    }
    /// Every checkpoint request (metadata `tpu-operator-checkpoint-request`) a workload
    /// honoured, oldest first.
    pub fn checkpoint_requests(&self) -> Vec<CheckpointRequest> {
        self.with_world(|w| w.cloud.training.checkpoint_requests.clone())
    }
    pub fn queued_resources(&self) -> Vec<Value> {
        self.with_world(|w| w.tpu.qrs.values().map(|r| r.body.clone()).collect())
    }
    pub fn batches(&self) -> Vec<Value> {
        self.with_world(|w| w.dataproc.batches.values().map(|r| r.body.clone()).collect())
    }
    pub fn custom_jobs(&self) -> Vec<Value> {
        self.with_world(|w| w.vertex.jobs.values().map(|r| r.body.clone()).collect())
    }
    /// How many TPU nodes, Dataproc batches, Vertex custom jobs and Compute Engine resources
    /// exist, without copying them (benchmarks poll this while thousands exist).
    pub fn resource_counts(&self) -> ResourceCounts {
        self.with_world(|w| ResourceCounts {
            nodes: w.tpu.nodes.len(),
            batches: w.dataproc.batches.len(),
            custom_jobs: w.vertex.jobs.len(),
            instances: w.compute.instances.len(),
            instance_templates: w.compute.templates.len(),
            resource_policies: w.compute.policies.len(),
            instance_group_managers: w.compute.igms.len(),
            resize_requests: w.compute.resize.len(),
        })
    }

    /// Compute Engine instances as `instances.get` returns them.
    pub fn instances(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "instance"))
    }
    /// Regional instance templates as `regionInstanceTemplates.get` returns them.
    pub fn instance_templates(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "template"))
    }
    /// Resource policies as `resourcePolicies.get` returns them.
    pub fn resource_policies(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "policy"))
    }
    /// MIGs as `instanceGroupManagers.get` returns them (`targetSize`, `status`, `currentActions`).
    pub fn instance_group_managers(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "igm"))
    }
    /// MIG resize requests as `instanceGroupManagerResizeRequests.get` returns them.
    pub fn resize_requests(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "resize"))
    }
    /// Compute Engine operations (zonal and regional) as `zoneOperations.get` returns them.
    pub fn compute_operations(&self) -> Vec<Value> {
        self.with_world(|w| crate::compute::bodies(&w.compute, "op"))
    }
    /// Preempts a Spot instance (`projects/p/zones/z/instances/i` or a unique bare name); same
    /// as `inject(Fault::PreemptInstance { name })`.
    pub fn preempt_instance(&self, name: &str) -> Result<(), ApiError> {
        self.inject(Fault::PreemptInstance {
            name: name.to_string(),
        })
    }
    /// At most `hosts` VMs of `machine_type` in `zone` (`None`: unlimited); same as
    /// `inject(Fault::ComputeCapacity { .. })`. Waiting MIGs and resize requests re-check at once.
    pub fn set_compute_capacity(&self, zone: &str, machine_type: &str, hosts: Option<u64>) {
        let f = Fault::ComputeCapacity {
            zone: zone.to_string(),
            machine_type: machine_type.to_string(),
            hosts,
        };
        self.inject(f).expect("capacity faults always apply");
    }
    pub fn operations(&self) -> Vec<Value> {
        self.with_world(|w| w.cloud.ops.values().map(|o| o.body.clone()).collect())
    }

    /// Objects of `bucket` (empty when the bucket does not exist).
    pub fn objects(&self, bucket: &str) -> Vec<StoredObject> {
        self.with_world(|w| {
            w.cloud
                .buckets
                .get(bucket)
                .map(|b| {
                    b.objects
                        .iter()
                        .map(|(n, o)| StoredObject {
                            name: n.clone(),
                            content_type: o.meta["contentType"].as_str().unwrap_or_default().to_string(),
                            data: o.data.clone(),
                            metadata: o.meta.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// The content of `gs://bucket/name`, if present.
    pub fn object(&self, bucket: &str, name: &str) -> Option<Bytes> {
        self.with_world(|w| {
            w.cloud
                .buckets
                .get(bucket)
                .and_then(|b| b.objects.get(name))
                .map(|o| o.data.clone())
        })
    }

    pub fn create_bucket(&self, name: &str) -> Result<(), ApiError> {
        self.with_world(|w| {
            crate::storage::buckets::create(&mut w.cloud, name, "emulator", &serde_json::json!({}))
                .map(|_| ())
        })
    }

    /// Writes an object (creating the bucket when needed).
    pub fn put_object(&self, bucket: &str, name: &str, data: impl Into<Bytes>, content_type: &str) {
        let data = data.into();
        self.with_world(|w| {
            crate::blobs::put_object(&mut w.cloud, bucket, name, data, content_type, None);
        })
    }

    /// Everything that exists, with its state.
    pub fn list_resources(&self) -> Vec<ResourceSummary> {
        self.with_world(|w| admin::list_resources(w))
    }

    /// What still bills ([`admin::BILLABLE_KINDS`]): what a clean-up must leave none of.
    pub fn billable_resources(&self) -> Vec<ResourceSummary> {
        let mut all = self.list_resources();
        all.retain(|r| admin::BILLABLE_KINDS.contains(&r.kind.as_str()));
        all
    }

    pub fn config(&self) -> Config {
        self.with_world(|w| w.cloud.cfg.clone())
    }

    /// Replaces the configuration (durations apply to transitions scheduled from now on).
    pub fn set_config(&self, config: Config) {
        self.with_world(|w| w.cloud.cfg = config)
    }

    /// Forgets all resources, operations, objects, faults and calls (keeps config and clock).
    pub fn reset(&self) {
        self.with_world(|w| w.reset())
    }

    /// Stops the server and waits for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// See [`Emulator::resource_counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceCounts {
    pub nodes: usize,
    pub batches: usize,
    pub custom_jobs: usize,
    /// Compute Engine instances (any status, including TERMINATED).
    pub instances: usize,
    pub instance_templates: usize,
    pub resource_policies: usize,
    pub instance_group_managers: usize,
    pub resize_requests: usize,
}
