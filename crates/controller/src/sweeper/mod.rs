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
//! orphaned instance is deleted. An instance whose metadata `created-by` names a managed instance
//! group only claims to be its member (tenants write instance metadata): the group is read
//! ([`list::groups`], only for claims by an instance whose owner is gone) and stands for its
//! members only when its instance template carries our labels ([`plan::resolve_claims`]); it is
//! then deleted (members and resize requests go with it). The group's instance template and
//! workload policy carry no labels of their own, so before deleting the group the sweep reads its
//! template from it ([`plan::release_of`]) and keeps it as a pending release, in memory and in the
//! summary ConfigMap (`releases`), until `ComputeSlices::release` — the TpuSlice finalizer's own
//! call — reports the template and policy gone (it waits while the group still uses them).
//!
//! Where it lists: the configured places and the places learned from the objects, which refused
//! objects do not teach, are forgotten once unused and empty, and are bounded per namespace
//! ([`places`]).

pub mod list;
pub mod listing;
pub mod places;
pub mod plan;

mod act;
mod counted;
mod summary;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};

pub use places::{Learned, MAX_PLACES_PER_NAMESPACE, Place, Scope};
pub use plan::{CloudResource, Mode, Orphan, Release, ResourceKind, Step};

use tpu_operator_api::accelerator::parse_accelerator_type;

use crate::{
    governance::{
        pricing::{CapacityKind, PriceTable},
        tenancy::usage::Holding,
    },
    reconcile::context::Context,
    runtime::shutdown::Shutdown,
};

pub use crate::governance::tenancy::orphans::SUMMARY_CONFIGMAP;
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

/// Every configured project with every configured zone and region: listed on every sweep.
pub fn configured(config: &SweeperConfig) -> BTreeSet<Place> {
    let pairs = |scope: Scope, locations: &[String]| -> Vec<Place> {
        config
            .projects
            .iter()
            .flat_map(|p| locations.iter().map(move |l| Place::new(scope, p, l)))
            .collect()
    };
    let mut out: BTreeSet<Place> = pairs(Scope::Zone, &config.zones).into_iter().collect();
    out.extend(pairs(Scope::Region, &config.regions));
    out
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
    /// Learned places forgotten this sweep: no object uses them and nothing of ours is there.
    pub pruned: Vec<String>,
    /// Places objects named beyond their namespace's bound ([`MAX_PLACES_PER_NAMESPACE`]), not
    /// learned: `<namespace>: <place>`.
    pub over_bound: Vec<String>,
    /// What each namespace's orphaned TPU nodes and queued resources hold: counted against its
    /// quota and budget until they are gone ([`crate::governance::tenancy::orphans`]).
    pub holdings: HashMap<String, Vec<Holding>>,
}

/// What each namespace's orphaned TPU nodes and queued resources hold, from their listed shapes
/// (a node inside a queued resource is its queued resource's, never an orphan of its own).
pub fn orphan_holdings(
    orphans: &[Orphan],
    tpu: &HashMap<String, listing::TpuShape>,
    prices: &PriceTable,
) -> HashMap<String, Vec<Holding>> {
    let mut out: HashMap<String, Vec<Holding>> = HashMap::new();
    for o in orphans {
        if !matches!(o.kind, ResourceKind::TpuNode | ResourceKind::QueuedResource) {
            continue;
        }
        let Some((listed, shape)) = tpu
            .get(&o.name)
            .and_then(|t| Some((t, parse_accelerator_type(&t.accelerator_type).ok()?)))
        else {
            continue;
        };
        let capacity = if listed.spot {
            CapacityKind::Spot
        } else {
            CapacityKind::OnDemand
        };
        let (per_node, _) = prices.slice_per_hour(&shape, capacity);
        out.entry(o.namespace.clone()).or_default().push(Holding {
            uid: o.name.clone(),
            what: format!("orphaned {} of deleted {}", o.kind.as_str(), o.owner_name),
            chips: shape.chips * listed.nodes,
            per_hour_usd: per_node * f64::from(listed.nodes),
        });
    }
    out
}

/// Keeps, between sweeps, when each orphan was first seen (the grace period) and which were
/// already announced by an event.
#[derive(Debug)]
pub struct Sweeper {
    pub config: SweeperConfig,
    first_seen: Mutex<HashMap<String, DateTime<Utc>>>,
    announced: Mutex<HashSet<String>>,
    /// Places the custom resources have used, kept in the summary ConfigMap so they outlive
    /// the objects (an orphan is exactly a resource whose object is gone) and this process,
    /// until pruned ([`places::next`]). `None` until the first sweep has read them back from
    /// the ConfigMap.
    learned: Mutex<Option<Learned>>,
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
        let began = tokio::time::Instant::now();
        let loaded = counted::load(ctx).await;
        let (orphans, mut out, answered) = self.find(ctx).await?;
        let found = std::mem::take(&mut out.holdings);
        counted::swept(ctx, loaded, began, found, &answered).await;
        let mut errors = std::mem::take(&mut out.errors);
        let mut releases = Vec::new();
        for o in &orphans {
            tracing::warn!(
                kind = o.kind.as_str(), name = %o.name, namespace = %o.namespace, owner = %o.owner_name,
                owner_uid = %o.owner_uid, since = %o.since, step = ?o.step,
                "orphaned cloud resource: its owning object no longer exists"
            );
            match act::act(ctx, o, &mut releases).await {
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

    /// Lists (cloud first, then objects), learns places, reads the groups lost instances claim,
    /// and plans: the orphans, the report so far (places pruned or over the bound, listing
    /// errors) and the places listed without an error. `Err` when the custom resources cannot be
    /// listed.
    async fn find(&self, ctx: &Context) -> Result<(Vec<Orphan>, SweepReport, BTreeSet<Place>), String> {
        // Cloud first, then the custom resources: an object created in between can never make
        // its resource look orphaned. Places learned from this sweep's objects are listed from
        // the next sweep on.
        let (known, places) = self.places(ctx).await;
        let listing = list::cloud(ctx, &places).await;
        let live = list::live(ctx)
            .await
            .map_err(|e| format!("listing the custom resources that own cloud resources: {e}"))?;
        let mut out = self.learn(&known, &live.used, &listing.quiet);
        out.errors = listing.errors;
        let none = HashMap::new();
        let base = plan::Input {
            resources: &[],
            live_uids: &live.uids,
            cluster_id: &ctx.config.cluster_id,
            namespace: ctx.config.namespace.as_deref(),
            first_seen: &none,
            now: ctx.clock.now(),
            grace: chrono::Duration::from_std(self.config.grace).unwrap_or(chrono::Duration::MAX),
            mode: self.config.mode,
        };
        // Groups are read only once the objects are known, and only those a lost member names.
        let mut resources = listing.resources;
        let verify = plan::claims_to_verify(&listing.claims, &base);
        let facts = list::groups(ctx, &verify).await;
        resources.extend(plan::resolve_claims(
            listing.claims,
            &facts,
            &ctx.config.cluster_id,
        ));
        let (orphans, seen) = {
            let first_seen = self.first_seen.lock().expect("sweeper state poisoned");
            plan::plan(&plan::Input {
                resources: &resources,
                first_seen: &first_seen,
                ..base
            })
        };
        *self.first_seen.lock().expect("sweeper state poisoned") = seen;
        out.holdings = orphan_holdings(&orphans, &listing.tpu, &ctx.tenancy.prices);
        Ok((orphans, out, listing.answered))
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

    /// The learned places (read back from the summary ConfigMap by the first sweep), and every
    /// place to list: those and the configured ones.
    async fn places(&self, ctx: &Context) -> (Learned, BTreeSet<Place>) {
        let known = self.learned.lock().expect("sweeper state poisoned").clone();
        let learned = match known {
            Some(learned) => learned,
            None => self.read_back(ctx).await,
        };
        let mut places = configured(&self.config);
        places.extend(learned.keys().cloned());
        // Recorded orphans' zones, beyond any bound: they count until seen gone.
        places.extend(counted::places(ctx));
        (learned, places)
    }

    /// Learns this sweep's places, forgets the pruned ones, and says what changed.
    fn learn(&self, known: &Learned, used: &places::Used, quiet: &BTreeSet<Place>) -> SweepReport {
        let outcome = places::next(known, used, quiet, MAX_PLACES_PER_NAMESPACE);
        for place in &outcome.pruned {
            tracing::info!(place = %place.to_line(), "orphan sweeper: no object uses this place and nothing of ours is there; no longer listing it");
        }
        for (ns, place) in &outcome.over_bound {
            tracing::warn!(
                namespace = %ns, place = %place.to_line(), bound = MAX_PLACES_PER_NAMESPACE,
                "orphan sweeper: the namespace's objects name more places than it may make the sweeper list; not listing this one"
            );
        }
        *self.learned.lock().expect("sweeper state poisoned") = Some(outcome.learned);
        SweepReport {
            pruned: outcome.pruned.iter().map(Place::to_line).collect(),
            over_bound: outcome
                .over_bound
                .iter()
                .map(|(ns, p)| format!("{ns}: {}", p.to_line()))
                .collect(),
            ..SweepReport::default()
        }
    }
}

/// Sweeps every `interval` until `shutdown` (the first sweep right away).
pub async fn run(ctx: Arc<Context>, sweeper: Arc<Sweeper>, shutdown: Shutdown) {
    if sweeper.config.mode == Mode::Off {
        return;
    }
    // With nothing configured the sweeper still runs: it sweeps every place the custom resources
    // use or have used (kept in the summary ConfigMap), so a default install has its backstop.
    tracing::info!(
        configured = configured(&sweeper.config).len(),
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
