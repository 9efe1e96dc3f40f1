//! The orphan sweeper: periodically lists the cloud resources labelled `managed-by=tpu-operator`
//! with this cluster's id in the configured projects and locations, finds those whose owning
//! object (by UID label) no longer exists, reports them and, in [`Mode::Delete`], deletes them after
//! a grace period.
//!
//! [`list`] reads (cloud first, then the custom resources, so an object created in between can
//! never make its resource look orphaned), [`plan`] decides (pure), [`Sweeper::sweep`] acts and
//! reports: the `tpu_operator_orphans` metric, a log line per orphan, Warning events and a summary
//! ConfigMap (`tpu-operator-orphans` in the operator's namespace). A ConfigMap rather than events
//! alone because orphans have no object of their own to attach events to, events expire after an
//! hour, and `kubectl get configmap tpu-operator-orphans -o yaml` shows the current list at any
//! time without a new CRD. The sweep never touches resources without our labels, with another
//! cluster id, or without an owner UID, and aborts (deleting nothing) when the custom resources
//! cannot be listed.

pub mod list;
pub mod plan;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

pub use plan::{CloudResource, Mode, Orphan, ResourceKind, Step};

use crate::{Shutdown, context::Context, metrics::OrphanLabels, report};

/// Name of the summary ConfigMap.
pub const SUMMARY_CONFIGMAP: &str = "tpu-operator-orphans";
const FIELD_MANAGER: &str = "orphan-sweeper.tpu-operator.dev";

/// Where and how to sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweeperConfig {
    pub mode: Mode,
    /// How long a resource must have been an orphan before delete mode deletes it.
    pub grace: Duration,
    /// Time between sweeps.
    pub interval: Duration,
    pub projects: Vec<String>,
    /// TPU zones (nodes, queued resources).
    pub zones: Vec<String>,
    /// Dataproc and Vertex regions.
    pub regions: Vec<String>,
    /// Namespace of the summary ConfigMap and its events.
    pub report_namespace: String,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Report,
            grace: Duration::from_secs(15 * 60),
            interval: Duration::from_secs(10 * 60),
            projects: Vec::new(),
            zones: Vec::new(),
            regions: Vec::new(),
            report_namespace: "default".into(),
        }
    }
}

/// What one sweep found and did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepReport {
    pub orphans: Vec<Orphan>,
    /// Resources a delete (or cancel) was issued for this sweep.
    pub deleted: Vec<String>,
    pub cancelled: Vec<String>,
    /// Locations that could not be listed and actions that failed.
    pub errors: Vec<String>,
}

/// Keeps, between sweeps, when each orphan was first seen (the grace period) and which were
/// already announced by an event.
#[derive(Debug)]
pub struct Sweeper {
    pub config: SweeperConfig,
    first_seen: Mutex<HashMap<String, DateTime<Utc>>>,
    announced: Mutex<HashSet<String>>,
}

impl Sweeper {
    pub fn new(config: SweeperConfig) -> Self {
        Self {
            config,
            first_seen: Mutex::default(),
            announced: Mutex::default(),
        }
    }

    /// One sweep. `Err` (nothing deleted) when the custom resources cannot be listed.
    pub async fn sweep(&self, ctx: &Context) -> Result<SweepReport, String> {
        if self.config.mode == Mode::Off {
            return Ok(SweepReport::default());
        }
        let (resources, mut errors) = list::cloud(ctx, &self.config).await;
        let live = list::live_uids(ctx)
            .await
            .map_err(|e| format!("listing the custom resources that own cloud resources: {e}"))?;
        let now = ctx.clock.now();
        let (orphans, seen) = {
            let first_seen = self.first_seen.lock().expect("sweeper state poisoned");
            plan::plan(&plan::Input {
                resources: &resources,
                live_uids: &live,
                cluster_id: &ctx.config.cluster_id,
                namespace: ctx.config.namespace.as_deref(),
                first_seen: &first_seen,
                now,
                grace: chrono::Duration::from_std(self.config.grace).unwrap_or(chrono::Duration::MAX),
                mode: self.config.mode,
            })
        };
        *self.first_seen.lock().expect("sweeper state poisoned") = seen;
        let mut out = SweepReport::default();
        for o in &orphans {
            tracing::warn!(
                kind = o.kind.as_str(), name = %o.name, namespace = %o.namespace, owner = %o.owner_name,
                owner_uid = %o.owner_uid, since = %o.since, step = ?o.step,
                "orphaned cloud resource: its owning object no longer exists"
            );
            match act(ctx, o).await {
                Ok(Some(Step::Delete)) => out.deleted.push(o.name.clone()),
                Ok(Some(_)) => out.cancelled.push(o.name.clone()),
                Ok(None) => {}
                Err(e) => errors.push(format!("{} {}: {e}", o.kind.as_str(), o.name)),
            }
        }
        out.orphans = orphans;
        out.errors = errors;
        self.report(ctx, &out).await;
        Ok(out)
    }

    /// Metrics, events for new orphans and for deletions, and the summary ConfigMap.
    async fn report(&self, ctx: &Context, r: &SweepReport) {
        ctx.metrics.orphans.clear();
        for o in &r.orphans {
            ctx.metrics
                .orphans
                .get_or_create(&OrphanLabels {
                    kind: o.kind.as_str(),
                })
                .inc();
        }
        for o in r.orphans.iter().filter(|o| r.deleted.contains(&o.name)) {
            ctx.metrics
                .orphans_deleted
                .get_or_create(&OrphanLabels {
                    kind: o.kind.as_str(),
                })
                .inc();
        }
        let cm = match self.write_summary(ctx, r).await {
            Ok(cm) => cm,
            Err(e) => {
                tracing::warn!(error = %e, "could not write the orphan summary ConfigMap");
                return;
            }
        };
        let new: Vec<&Orphan> = {
            let mut announced = self.announced.lock().expect("sweeper state poisoned");
            let new = r
                .orphans
                .iter()
                .filter(|o| announced.insert(o.name.clone()))
                .collect();
            let current: HashSet<_> = r.orphans.iter().map(|o| o.name.clone()).collect();
            announced.retain(|n| current.contains(n));
            new
        };
        for o in new {
            let note = format!(
                "{} {} belongs to {}/{} (uid {}), which no longer exists; {}",
                o.kind.as_str(),
                o.name,
                o.namespace,
                o.owner_name,
                o.owner_uid,
                match self.config.mode {
                    Mode::Delete => format!("deleting it after the grace period ({:?})", self.config.grace),
                    _ => "report mode: delete it by hand or run with --orphans=delete".to_string(),
                }
            );
            report::publish_event(ctx, &cm, true, "OrphanFound", note).await;
        }
        for name in r.deleted.iter().chain(&r.cancelled) {
            let verb = if r.deleted.contains(name) {
                "deleting"
            } else {
                "cancelling"
            };
            report::publish_event(ctx, &cm, true, "OrphanDeleted", format!("{verb} orphan {name}")).await;
        }
    }

    async fn write_summary(&self, ctx: &Context, r: &SweepReport) -> Result<ConfigMap, kube::Error> {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.config.report_namespace);
        let mut data = BTreeMap::new();
        data.insert(
            "mode".to_string(),
            format!("{:?}", self.config.mode).to_lowercase(),
        );
        data.insert("lastSweep".to_string(), ctx.clock.now().to_rfc3339());
        data.insert("count".to_string(), r.orphans.len().to_string());
        let lines: Vec<String> = r
            .orphans
            .iter()
            .map(|o| {
                format!(
                    "{} {} owner={}/{} uid={} since={} step={:?}",
                    o.kind.as_str(),
                    o.name,
                    o.namespace,
                    o.owner_name,
                    o.owner_uid,
                    o.since.to_rfc3339(),
                    o.step
                )
            })
            .collect();
        data.insert("orphans".to_string(), lines.join("\n"));
        if !r.errors.is_empty() {
            data.insert("errors".to_string(), r.errors.join("\n"));
        }
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SUMMARY_CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "tpu-operator"}},
            "data": data,
        });
        api.patch(
            SUMMARY_CONFIGMAP,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(cm),
        )
        .await
    }
}

/// Carries out an orphan's step. `Ok(Some(step))` when a call was made.
async fn act(ctx: &Context, o: &Orphan) -> Result<Option<Step>, tpu_operator_gcp::GcpError> {
    use tpu_operator_gcp::ignore_not_found;
    let gcp = &ctx.gcp;
    match (&o.step, o.kind) {
        (Step::Report, _) => return Ok(None),
        (Step::Delete, ResourceKind::TpuNode) => {
            ignore_not_found(gcp.tpu.delete_node(&o.name).await)?;
        }
        (Step::Delete, ResourceKind::QueuedResource) => {
            ignore_not_found(gcp.tpu.delete_queued_resource(&o.name, true).await)?;
        }
        (Step::Delete, ResourceKind::DataprocBatch) => {
            ignore_not_found(gcp.dataproc.delete_batch(&o.name).await)?;
        }
        (Step::Delete, ResourceKind::VertexCustomJob) => {
            ignore_not_found(gcp.vertex.delete_custom_job(&o.name).await)?;
        }
        (Step::Cancel(Some(op)), ResourceKind::DataprocBatch) => {
            ignore_not_found(gcp.dataproc.cancel_operation(op).await)?;
        }
        (Step::Cancel(_), ResourceKind::VertexCustomJob) => {
            ignore_not_found(gcp.vertex.cancel_custom_job(&o.name).await)?;
        }
        (Step::Cancel(_), _) => return Ok(None),
    }
    Ok(Some(o.step.clone()))
}

/// Sweeps every `interval` until `shutdown` (the first sweep right away).
pub async fn run(ctx: Arc<Context>, sweeper: Arc<Sweeper>, shutdown: Shutdown) {
    if sweeper.config.mode == Mode::Off {
        return;
    }
    if sweeper.config.projects.is_empty()
        || (sweeper.config.zones.is_empty() && sweeper.config.regions.is_empty())
    {
        tracing::warn!(
            "orphan sweeper has no projects or locations to look in (set orphanProjects / orphanZones / orphanRegions); not sweeping"
        );
        return;
    }
    let sweeps = async {
        loop {
            match sweeper.sweep(&ctx).await {
                Ok(r) => tracing::info!(
                    orphans = r.orphans.len(),
                    deleted = r.deleted.len(),
                    cancelled = r.cancelled.len(),
                    errors = r.errors.len(),
                    "orphan sweep done"
                ),
                Err(e) => tracing::warn!(error = %e, "orphan sweep skipped"),
            }
            tokio::time::sleep(sweeper.config.interval).await;
        }
    };
    tokio::select! {
        () = sweeps => {}
        () = shutdown => {}
    }
}
