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
//!
//! Compute Engine slices are swept through their instances ([`plan::compute_resources`]): an
//! orphaned instance is deleted; an orphaned group member stands for its managed instance group,
//! which is deleted (members and resize requests go with it). The group's instance template and
//! workload policy carry no labels, so before deleting the group the sweep reads its template
//! from it ([`plan::release_of`]) and keeps it as a pending release, in memory and in the summary
//! ConfigMap (`releases`), until `ComputeSlices::release` — the TpuSlice finalizer's own call —
//! reports the template and policy gone (it waits while the group still uses them).

pub mod list;
pub mod plan;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

pub use plan::{CloudResource, Mode, Orphan, Release, ResourceKind, Step};

use crate::{
    Shutdown,
    runtime::{context::Context, metrics::OrphanLabels, report},
};

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
    /// TPU zones (nodes, queued resources, Compute Engine instances and groups).
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

/// Where a sweep lists: TPU zones (nodes, queued resources) and Dataproc / Vertex regions, each
/// with its project.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Places {
    /// `(project, zone)`.
    pub zones: BTreeSet<(String, String)>,
    /// `(project, region)`.
    pub regions: BTreeSet<(String, String)>,
}

impl Places {
    /// Every configured project with every configured zone and region.
    pub fn configured(config: &SweeperConfig) -> Self {
        let pairs = |locations: &[String]| {
            config
                .projects
                .iter()
                .flat_map(|p| locations.iter().map(move |l| (p.clone(), l.clone())))
                .collect()
        };
        Self {
            zones: pairs(&config.zones),
            regions: pairs(&config.regions),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.zones.is_empty() && self.regions.is_empty()
    }

    pub fn extend(&mut self, other: &Places) {
        self.zones.extend(other.zones.iter().cloned());
        self.regions.extend(other.regions.iter().cloned());
    }

    /// Adds the project and zone of a resource name `projects/<p>/locations/<zone>/...`.
    pub fn add_zone_of(&mut self, name: Option<&str>) {
        self.zones.extend(name.and_then(project_and_location));
    }

    /// Adds the project and region of a resource name `projects/<p>/locations/<region>/...`.
    pub fn add_region_of(&mut self, name: Option<&str>) {
        self.regions.extend(name.and_then(project_and_location));
    }

    /// One line per place (`zone projects/<p>/locations/<z>`), as the summary ConfigMap keeps them.
    fn to_lines(&self) -> String {
        let zones = self
            .zones
            .iter()
            .map(|(p, l)| format!("zone projects/{p}/locations/{l}"));
        let regions = self
            .regions
            .iter()
            .map(|(p, l)| format!("region projects/{p}/locations/{l}"));
        zones.chain(regions).collect::<Vec<_>>().join("\n")
    }

    /// Reads [`Places::to_lines`]' format back; lines it does not understand are skipped.
    fn from_lines(text: &str) -> Self {
        let mut places = Self::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("zone", name)) => places.add_zone_of(Some(name)),
                Some(("region", name)) => places.add_region_of(Some(name)),
                _ => {}
            }
        }
        places
    }
}

/// `projects/<p>/locations/<l>/...` → `(p, l)`.
fn project_and_location(name: &str) -> Option<(String, String)> {
    let mut parts = name.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("projects"), Some(p), Some("locations"), Some(l)) if !p.is_empty() && !l.is_empty() => {
            Some((p.to_owned(), l.to_owned()))
        }
        _ => None,
    }
}

/// What one sweep found and did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepReport {
    pub orphans: Vec<Orphan>,
    /// Resources a delete (or cancel) was issued for this sweep.
    pub deleted: Vec<String>,
    pub cancelled: Vec<String>,
    /// Orphaned groups' instance templates and workload policies found gone this sweep
    /// (`projects/<p>/zones/<z>/<shared id>`, see [`Release::to_line`]).
    pub released: Vec<String>,
    /// Releases still pending: the group is still being deleted, or their deletes are under way.
    pub releasing: Vec<String>,
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
    /// Places the custom resources have used, kept in the summary ConfigMap so they outlive
    /// the objects (an orphan is exactly a resource whose object is gone) and this process.
    /// `None` until the first sweep has read them back from the ConfigMap.
    learned: Mutex<Option<Places>>,
    /// Templates and policies of orphaned groups this sweeper deleted, until they are gone; kept
    /// in the summary ConfigMap too (read back with the places).
    releases: Mutex<BTreeSet<Release>>,
}

impl Sweeper {
    pub fn new(config: SweeperConfig) -> Self {
        Self {
            config,
            first_seen: Mutex::default(),
            announced: Mutex::default(),
            learned: Mutex::default(),
            releases: Mutex::default(),
        }
    }

    /// One sweep. `Err` (nothing deleted) when the custom resources cannot be listed.
    pub async fn sweep(&self, ctx: &Context) -> Result<SweepReport, String> {
        if self.config.mode == Mode::Off {
            return Ok(SweepReport::default());
        }
        // Cloud first, then the custom resources: an object created in between can never make
        // its resource look orphaned. Places learned from this sweep's objects are listed from
        // the next sweep on.
        let places = self.places(ctx).await;
        let (resources, mut errors) = list::cloud(ctx, &places).await;
        let live = list::live(ctx)
            .await
            .map_err(|e| format!("listing the custom resources that own cloud resources: {e}"))?;
        self.learn(&live.places);
        let live = live.uids;
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
        let mut releases = Vec::new();
        for o in &orphans {
            tracing::warn!(
                kind = o.kind.as_str(), name = %o.name, namespace = %o.namespace, owner = %o.owner_name,
                owner_uid = %o.owner_uid, since = %o.since, step = ?o.step,
                "orphaned cloud resource: its owning object no longer exists"
            );
            match act(ctx, o, &mut releases).await {
                Ok(Some(Step::Delete)) => out.deleted.push(o.name.clone()),
                Ok(Some(_)) => out.cancelled.push(o.name.clone()),
                Ok(None) => {}
                Err(e) => errors.push(format!("{} {}: {e}", o.kind.as_str(), o.name)),
            }
        }
        if self.config.mode == Mode::Delete {
            self.release(ctx, releases, &mut out, &mut errors).await;
        }
        out.releasing = self
            .releases
            .lock()
            .expect("sweeper state poisoned")
            .iter()
            .map(Release::to_line)
            .collect();
        out.orphans = orphans;
        out.errors = errors;
        self.report(ctx, &out).await;
        Ok(out)
    }

    /// Adds `new` to the pending releases and tries each: gone ones are dropped.
    async fn release(
        &self,
        ctx: &Context,
        new: Vec<Release>,
        out: &mut SweepReport,
        errors: &mut Vec<String>,
    ) {
        let pending: Vec<Release> = {
            let mut releases = self.releases.lock().expect("sweeper state poisoned");
            releases.extend(new);
            releases.iter().cloned().collect()
        };
        for r in pending {
            match ctx
                .gcp
                .compute_slices
                .release(&r.project, &r.zone, &r.shared_id)
                .await
            {
                Ok(true) => {
                    tracing::info!(release = %r.to_line(), "orphaned group's instance template and workload policy are gone");
                    self.releases.lock().expect("sweeper state poisoned").remove(&r);
                    out.released.push(r.to_line());
                }
                Ok(false) => {}
                Err(e) => errors.push(format!(
                    "instance template and workload policy {}: {e}",
                    r.to_line()
                )),
            }
        }
    }

    /// The configured places and every place the custom resources have used.
    async fn places(&self, ctx: &Context) -> Places {
        let mut places = Places::configured(&self.config);
        let known = self.learned.lock().expect("sweeper state poisoned").clone();
        let learned = match known {
            Some(learned) => learned,
            None => {
                let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.config.report_namespace);
                let kept = match api.get_opt(SUMMARY_CONFIGMAP).await {
                    Ok(cm) => {
                        let mut data = cm.and_then(|cm| cm.data).unwrap_or_default();
                        let releases = data.remove("releases").unwrap_or_default();
                        self.releases
                            .lock()
                            .expect("sweeper state poisoned")
                            .extend(releases.lines().filter_map(Release::from_line));
                        data.remove("places")
                            .map(|text| Places::from_lines(&text))
                            .unwrap_or_default()
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the places earlier sweeps learned");
                        Places::default()
                    }
                };
                self.learn(&kept);
                kept
            }
        };
        places.extend(&learned);
        places
    }

    fn learn(&self, places: &Places) {
        self.learned
            .lock()
            .expect("sweeper state poisoned")
            .get_or_insert_with(Places::default)
            .extend(places);
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
        for line in &r.released {
            let note = format!("instance template and workload policy of an orphaned group are gone: {line}");
            report::publish_event(ctx, &cm, true, "OrphanDeleted", note).await;
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
        let learned = self.learned.lock().expect("sweeper state poisoned").clone();
        let mut places = Places::configured(&self.config);
        places.extend(&learned.unwrap_or_default());
        data.insert("places".to_string(), places.to_lines());
        if !r.releasing.is_empty() {
            data.insert("releases".to_string(), r.releasing.join("\n"));
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

/// Carries out an orphan's step. `Ok(Some(step))` when a call was made. Deleting a group adds
/// its template and policy to `releases`.
async fn act(
    ctx: &Context,
    o: &Orphan,
    releases: &mut Vec<Release>,
) -> Result<Option<Step>, tpu_operator_gcp::GcpError> {
    use tpu_operator_gcp::{Place, ignore_not_found};
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
        (Step::Delete, ResourceKind::ComputeInstance) => {
            let Some((project, zone, name)) = plan::parse_zonal(&o.name, "instances") else {
                return Ok(None);
            };
            let place = Place::new(project, zone);
            ignore_not_found(gcp.compute.delete_instance(&place, name).await)?;
        }
        (Step::Delete, ResourceKind::ComputeInstanceGroup) => {
            let Some((project, zone, name)) = plan::parse_zonal(&o.name, "instanceGroupManagers") else {
                return Ok(None);
            };
            let place = Place::new(project, zone);
            // The template (and policy) are named only by the group: read it before the group
            // goes. Already gone: an earlier sweep (or the finalizer) read it.
            match gcp.compute.get_instance_group_manager(&place, name).await {
                Ok(group) => match plan::release_of(
                    &o.name,
                    group.description.as_deref(),
                    group.instance_template.as_deref(),
                    &o.owner_uid,
                ) {
                    Some(release) => releases.push(release),
                    None => tracing::warn!(
                        group = %o.name, template = ?group.instance_template, description = ?group.description,
                        "orphaned group's template is not provably its owner's: deleting the group, leaving the template and policy"
                    ),
                },
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            ignore_not_found(gcp.compute.delete_instance_group_manager(&place, name).await)?;
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
    // With nothing configured the sweeper still runs: it sweeps every place the custom resources
    // use or have used (kept in the summary ConfigMap), so a default install has its backstop.
    let configured = Places::configured(&sweeper.config);
    tracing::info!(
        configured = configured.zones.len() + configured.regions.len(),
        "orphan sweeper: sweeping the configured places and every place the custom resources use"
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_round_trip_through_the_summary_lines_and_ignore_what_they_cannot_read() {
        let mut places = Places::configured(&SweeperConfig {
            projects: vec!["p1".into(), "p2".into()],
            zones: vec!["us-east5-b".into()],
            regions: vec!["us-east5".into()],
            ..SweeperConfig::default()
        });
        assert_eq!(places.zones.len(), 2, "every project with every zone");
        places.add_zone_of(Some("projects/p3/locations/europe-west4-a/nodes/n"));
        places.add_region_of(Some("projects/p3/locations/europe-west4/batches/b"));
        places.add_zone_of(Some("not/a/resource/name"));
        places.add_region_of(None);
        let text = places.to_lines();
        assert_eq!(Places::from_lines(&text), places);
        assert!(
            text.contains("zone projects/p3/locations/europe-west4-a"),
            "{text}"
        );
        let partial = Places::from_lines("zone projects/p/locations/z\ngarbage\nregion x\n");
        assert_eq!(partial.zones.len(), 1);
        assert!(partial.regions.is_empty());
    }
}
