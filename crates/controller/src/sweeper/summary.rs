//! What a sweep reports: the orphan metrics, Events for new orphans and for deletions, and the
//! summary ConfigMap (written each sweep, read back by the first one for what earlier sweeps
//! learned).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use super::{
    FIELD_MANAGER, Learned, Mode, Orphan, Release, SUMMARY_CONFIGMAP, SweepReport, Sweeper, configured,
    places,
};
use crate::{reconcile::context::Context, reconcile::report, runtime::metrics::OrphanLabels};

impl Sweeper {
    /// The places and pending releases an earlier sweep (maybe another process) kept in the
    /// summary ConfigMap.
    pub(super) async fn read_back(&self, ctx: &Context) -> Learned {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.config.report_namespace);
        match api.get_opt(SUMMARY_CONFIGMAP).await {
            Ok(cm) => {
                let mut data = cm.and_then(|cm| cm.data).unwrap_or_default();
                let releases = data.remove("releases").unwrap_or_default();
                self.releases
                    .lock()
                    .expect("sweeper state poisoned")
                    .extend(releases.lines().filter_map(Release::from_line));
                data.remove("places")
                    .map(|text| places::from_lines(&text))
                    .unwrap_or_default()
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the places earlier sweeps learned");
                Learned::default()
            }
        }
    }

    /// Metrics, events for new orphans and for deletions, and the summary ConfigMap.
    pub(super) async fn report(&self, ctx: &Context, r: &SweepReport) {
        count_orphans(ctx, r);
        let cm = match self.write_summary(ctx, r).await {
            Ok(cm) => cm,
            Err(e) => {
                tracing::warn!(error = %e, "could not write the orphan summary ConfigMap");
                return;
            }
        };
        for o in self.newly_found(r) {
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

    /// The orphans not announced by an earlier sweep; those no longer orphans are forgotten, so
    /// one that comes back is announced again.
    fn newly_found<'r>(&self, r: &'r SweepReport) -> Vec<&'r Orphan> {
        let mut announced = self.announced.lock().expect("sweeper state poisoned");
        let new = r
            .orphans
            .iter()
            .filter(|o| announced.insert(o.name.clone()))
            .collect();
        let current: HashSet<_> = r.orphans.iter().map(|o| o.name.clone()).collect();
        announced.retain(|n| current.contains(n));
        new
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
        let places = places::to_lines(&configured(&self.config), &learned.unwrap_or_default());
        data.insert("places".to_string(), places);
        if !r.over_bound.is_empty() {
            data.insert("placesOverBound".to_string(), r.over_bound.join("\n"));
        }
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

/// The orphans by kind, and those deleted this sweep.
fn count_orphans(ctx: &Context, r: &SweepReport) {
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
}
