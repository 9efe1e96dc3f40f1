//! The leader publishes its stockout memory ([`super::snapshot`]) into the ConfigMap
//! `tpu-operator-capacity` in the operator's namespace, so that `tpu-operator capacity`, run by
//! an admin with nothing but kubectl credentials, shows what the leader's memory holds.
//!
//! Why a ConfigMap, not an endpoint on the leader: the reader then needs only `get` on one named
//! ConfigMap (no port-forward, no Service, no network path to the pod), a standby or a fresh
//! leader has nothing to serve, and what the API server holds outlives the process that wrote it.
//!
//! How often: looked at every [`TICK`] and written only when the places changed, plus once every
//! [`REFRESH_AFTER`] even when nothing did, so the reader can tell a quiet leader from a
//! snapshot nobody updates any more (its `generatedAt` is then old). Never one write per
//! reconcile: a hundred slices stocking out at once are one write. The first look after taking
//! the lease always writes, so a new leader (which starts with an empty memory) replaces what the
//! previous one published.
//!
//! Only the leader runs this (it runs with the controllers), so two replicas never fight over
//! the key.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use super::{
    Capacity,
    snapshot::{CONFIGMAP, KEY, Snapshot},
};
use crate::runtime::{clock::Clock, shutdown::Shutdown};

/// How often the memory is looked at: the most writes there can be (one per tick).
pub const TICK: Duration = Duration::from_secs(5);
/// The longest a published snapshot goes unwritten while the leader lives.
pub const REFRESH_AFTER: chrono::Duration = chrono::Duration::minutes(5);
/// Field manager of the snapshot's key.
const MANAGER: &str = "capacity-view.tpu-operator.dev";

/// The last snapshot written and when.
#[derive(Debug, Default)]
pub struct Published {
    last: Option<Snapshot>,
}

impl Published {
    /// Whether `current` should be written at `now`: nothing written yet, the places changed, or
    /// the last write is [`REFRESH_AFTER`] old.
    pub fn due(&self, current: &Snapshot, now: DateTime<Utc>) -> bool {
        match &self.last {
            None => true,
            Some(last) => {
                !last.same_places(current) || last.generated_at.is_none_or(|at| now - at >= REFRESH_AFTER)
            }
        }
    }

    fn written(&mut self, snapshot: Snapshot) {
        self.last = Some(snapshot);
    }
}

/// Publishes `capacity` into the ConfigMap in `namespace` until `shutdown` fires.
pub async fn run(
    capacity: Arc<Capacity>,
    clock: Arc<dyn Clock>,
    client: kube::Client,
    namespace: String,
    shutdown: Shutdown,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut published = Published::default();
    // The last write error, logged once until it changes: a chart without the rule (an older
    // one beside a newer binary) would otherwise log the same refusal every tick.
    let mut failing: Option<String> = None;
    loop {
        let now = clock.now();
        let current = capacity.snapshot(now);
        if published.due(&current, now) {
            // A failed write is tried again next tick: the view is a convenience, and a refused
            // write (RBAC, the API server away) must not touch the controllers.
            match write(&api, &current).await {
                Ok(()) => {
                    published.written(current);
                    failing = None;
                }
                Err(e) => {
                    if failing.as_ref() != Some(&e) {
                        tracing::warn!(error = %e, %namespace, "publishing the capacity view in ConfigMap {CONFIGMAP} (retried every tick; logged again when the error changes)");
                    }
                    failing = Some(e);
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = shutdown.clone() => return,
        }
    }
}

/// Server-side apply of the snapshot's key (creating the ConfigMap the first time); the error as
/// text, for the log line.
async fn write(api: &Api<ConfigMap>, snapshot: &Snapshot) -> Result<(), String> {
    let json = serde_json::to_string(snapshot).map_err(|e| e.to_string())?;
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP,
            "labels": {"app.kubernetes.io/part-of": "tpu-operator"},
        },
        "data": {KEY: json},
    });
    api.patch(
        CONFIGMAP,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::capacity::memory::{Place, Remembered};

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn snapshot(strikes: u32, at: DateTime<Utc>) -> Snapshot {
        let place = Place {
            project: "p".into(),
            zone: "us-east5-b".into(),
            accelerator: "v6e-8".into(),
            kind: "onDemand",
        };
        let remembered = Remembered {
            last_stockout: t0(),
            strikes,
            blocked_until: t0() + chrono::Duration::minutes(5),
            probe_until: None,
        };
        Snapshot::of([(&place, remembered)].into_iter(), at)
    }

    #[test]
    fn writes_first_on_change_and_on_refresh_only() {
        let mut published = Published::default();
        assert!(
            published.due(&Snapshot::of(std::iter::empty(), t0()), t0()),
            "a new leader writes at once"
        );
        published.written(snapshot(1, t0()));
        let a_tick_later = t0() + chrono::Duration::seconds(5);
        assert!(!published.due(&snapshot(1, a_tick_later), a_tick_later));
        assert!(
            published.due(&snapshot(2, a_tick_later), a_tick_later),
            "another strike"
        );
        let refresh = t0() + REFRESH_AFTER;
        assert!(
            published.due(&snapshot(1, refresh), refresh),
            "a quiet leader still says it lives"
        );
    }
}
