//! What a namespace's orphans hold: cloud resources left running by an object deleted with an
//! allowed `deletionPolicy: Orphan` (`allowOrphan`), or found by the sweeper without a live
//! owner. They keep billing, so they keep counting against the namespace's chip quota and budget
//! until they are seen gone (without it, deleting an orphaned slice freed its quota while its node
//! ran on).
//!
//! Each orphan is kept by its exact cloud name (`projects/<p>/locations/<zone>/nodes/<id>`, or
//! the queued resource's), so its place is known whatever the sweeper learned: the deletion pass
//! that orphans a TPU node records it and writes the book to the summary ConfigMap
//! (`tpu-operator-orphans`, key `counted`) before the object's finalizer goes ([`OrphanBook::record`]),
//! so neither a sweep in between nor a restart loses it; a new leader reads it back before its
//! first admission or sweep ([`OrphanBook::load`]). The sweeper lists every recorded place on
//! every sweep (beyond its per-namespace bound on learned places), adds the orphans it finds,
//! and an orphan stops counting only when a sweep that began after it was recorded listed its
//! place without an error and did not find it ([`OrphanBook::swept`]). Issue 47: an orphan made
//! between two sweeps, or in a zone the sweeper did not list, stopped counting at the next sweep.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use super::usage::Holding;
use crate::runtime::error::{ReconcileError, Result};

/// The summary ConfigMap in the operator's namespace: the sweeper's report and this book (each
/// key with its own field manager).
pub const SUMMARY_CONFIGMAP: &str = "tpu-operator-orphans";
/// The summary ConfigMap's key the book is kept in: a line per orphan.
pub const KEY: &str = "counted";
/// Field manager of the book's key (the sweeper's summary keys have their own).
const MANAGER: &str = "orphan-book.tpu-operator.dev";

/// One orphan: its namespace and what it holds (`uid`: its exact cloud name).
#[derive(Clone, Debug, PartialEq)]
struct Orphan {
    namespace: String,
    holding: Holding,
    /// When recorded, or last found by a sweep.
    at: Instant,
}

#[derive(Debug, Default)]
struct State {
    /// Cloud name → orphan.
    orphans: HashMap<String, Orphan>,
    /// Read back from the ConfigMap (once per process).
    loaded: bool,
}

/// Orphan holdings by namespace, kept in the summary ConfigMap (see the module docs).
#[derive(Debug)]
pub struct OrphanBook {
    state: Mutex<State>,
    /// The namespace of the summary ConfigMap (the operator's).
    store: Mutex<String>,
    /// One write at a time, each with the book as it is then: the last write is the latest book.
    writes: tokio::sync::Mutex<()>,
}

impl Default for OrphanBook {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            store: Mutex::new("default".into()),
            writes: tokio::sync::Mutex::default(),
        }
    }
}

impl OrphanBook {
    /// Keep the book in the summary ConfigMap of `namespace` (the sweeper's report namespace).
    pub fn store_in(&self, namespace: &str) {
        *self.store.lock().expect("orphan book poisoned") = namespace.to_owned();
    }

    fn api(&self, client: &kube::Client) -> Api<ConfigMap> {
        let ns = self.store.lock().expect("orphan book poisoned").clone();
        Api::namespaced(client.clone(), &ns)
    }

    /// Reads the book back from the ConfigMap, once per process (what this process recorded
    /// since is kept). `Err` when it cannot be read: nothing may be admitted or forgotten then.
    pub async fn load(&self, client: &kube::Client) -> Result<()> {
        if self.state.lock().expect("orphan book poisoned").loaded {
            return Ok(());
        }
        let cm = self
            .api(client)
            .get_opt(SUMMARY_CONFIGMAP)
            .await
            .map_err(ReconcileError::kube("read the orphans counted against quotas"))?;
        let text = cm.and_then(|c| c.data).and_then(|mut d| d.remove(KEY));
        let now = Instant::now();
        let mut state = self.state.lock().expect("orphan book poisoned");
        if !state.loaded {
            for (namespace, holding) in text.iter().flat_map(|t| t.lines()).filter_map(from_line) {
                let orphan = Orphan {
                    namespace,
                    holding,
                    at: now,
                };
                state.orphans.entry(orphan.holding.uid.clone()).or_insert(orphan);
            }
            state.loaded = true;
        }
        Ok(())
    }

    /// A deletion pass leaves `holding` (its `uid` the cloud resource's name) running in
    /// `namespace`: counted from now on, and written before the pass lets the finalizer go.
    pub async fn record(&self, client: &kube::Client, namespace: &str, holding: Holding) -> Result<()> {
        self.load(client).await?;
        let orphan = Orphan {
            namespace: namespace.to_owned(),
            holding,
            at: Instant::now(),
        };
        self.state
            .lock()
            .expect("orphan book poisoned")
            .orphans
            .insert(orphan.holding.uid.clone(), orphan);
        self.write(client).await
    }

    /// Writes the book as it is now to the summary ConfigMap (its own key, its own manager).
    pub async fn write(&self, client: &kube::Client) -> Result<()> {
        let _one = self.writes.lock().await;
        let text = {
            let state = self.state.lock().expect("orphan book poisoned");
            let mut lines: Vec<String> = state.orphans.values().map(to_line).collect();
            lines.sort();
            lines.join("\n")
        };
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SUMMARY_CONFIGMAP},
            "data": {KEY: text},
        });
        self.api(client)
            .patch(
                SUMMARY_CONFIGMAP,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&cm),
            )
            .await
            .map_err(ReconcileError::kube("write the orphans counted against quotas"))?;
        Ok(())
    }

    /// A sweep begun at `began` found `found` (namespace → holdings) orphaned, and listed each
    /// of `answered` (`(project, zone)`) without an error. Found orphans are counted (again);
    /// one recorded before the sweep began, in a zone it listed, and not found, is gone. Returns
    /// whether the book changed.
    pub fn swept(
        &self,
        began: Instant,
        found: HashMap<String, Vec<Holding>>,
        answered: &BTreeSet<(String, String)>,
    ) -> bool {
        let mut state = self.state.lock().expect("orphan book poisoned");
        let before: BTreeSet<String> = state.orphans.values().map(to_line).collect();
        let seen: BTreeSet<String> = found.values().flatten().map(|h| h.uid.clone()).collect();
        state.orphans.retain(|name, o| {
            let listed = place(name).is_some_and(|p| answered.contains(&p));
            o.at >= began || !listed || seen.contains(name)
        });
        for (namespace, mut holding) in found
            .into_iter()
            .flat_map(|(ns, hs)| hs.into_iter().map(move |h| (ns.clone(), h)))
        {
            // As the deletion named it (`TpuSlice a`), with what the listing says it holds.
            if let Some(known) = state.orphans.get(&holding.uid) {
                holding.what.clone_from(&known.holding.what);
            }
            let orphan = Orphan {
                namespace,
                holding,
                at: began,
            };
            state.orphans.insert(orphan.holding.uid.clone(), orphan);
        }
        let after: BTreeSet<String> = state.orphans.values().map(to_line).collect();
        before != after
    }

    /// Where the orphans are, as `(project, zone)`: the sweeper lists each on every sweep.
    pub fn places(&self) -> BTreeSet<(String, String)> {
        let state = self.state.lock().expect("orphan book poisoned");
        state.orphans.keys().filter_map(|n| place(n)).collect()
    }

    /// What `namespace`'s orphans hold.
    pub fn holdings(&self, namespace: &str) -> Vec<Holding> {
        let state = self.state.lock().expect("orphan book poisoned");
        let mut out: Vec<Holding> = state
            .orphans
            .values()
            .filter(|o| o.namespace == namespace)
            .map(|o| o.holding.clone())
            .collect();
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }
}

/// `(project, zone)` of `projects/<p>/locations/<zone>/...`.
fn place(name: &str) -> Option<(String, String)> {
    let mut parts = name.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("projects"), Some(p), Some("locations"), Some(z)) if !p.is_empty() && !z.is_empty() => {
            Some((p.to_owned(), z.to_owned()))
        }
        _ => None,
    }
}

/// `<namespace> <name> <chips> <$/h> <what>`: names and namespaces hold no spaces.
fn to_line(o: &Orphan) -> String {
    let h = &o.holding;
    format!(
        "{} {} {} {} {}",
        o.namespace, h.uid, h.chips, h.per_hour_usd, h.what
    )
}

fn from_line(line: &str) -> Option<(String, Holding)> {
    let mut parts = line.splitn(5, ' ');
    let (ns, uid, chips, usd, what) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    place(uid)?;
    let holding = Holding {
        uid: uid.to_owned(),
        what: what.to_owned(),
        chips: chips.parse().ok()?,
        per_hour_usd: usd.parse().ok()?,
    };
    Some((ns.to_owned(), holding))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(zone: &str, name: &str) -> Holding {
        Holding {
            uid: format!("projects/p/locations/{zone}/nodes/{name}"),
            what: format!("orphaned node of deleted TpuSlice {name}"),
            chips: 8,
            per_hour_usd: 10.8,
        }
    }

    fn listed(zones: &[&str]) -> BTreeSet<(String, String)> {
        zones.iter().map(|z| ("p".to_owned(), (*z).to_owned())).collect()
    }

    fn recorded(book: &OrphanBook, ns: &str, h: Holding) {
        let orphan = Orphan {
            namespace: ns.into(),
            holding: h,
            at: Instant::now(),
        };
        let mut state = book.state.lock().unwrap();
        state.orphans.insert(orphan.holding.uid.clone(), orphan);
    }

    #[test]
    fn an_orphan_counts_until_a_sweep_lists_its_zone_and_no_longer_finds_it() {
        let book = OrphanBook::default();
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        recorded(&book, "team-a", node("z1", "n1"));
        // A sweep that began before the deletion and did not see n1 yet keeps it.
        book.swept(began, HashMap::new(), &listed(&["z1"]));
        assert_eq!(book.holdings("team-a").len(), 1);
        // Sweeps that do not list its zone (over a bound, failed) say nothing of it.
        book.swept(Instant::now(), HashMap::new(), &listed(&["z2"]));
        assert_eq!(book.holdings("team-a").len(), 1);
        assert_eq!(book.places(), listed(&["z1"]), "its zone is listed next");
        // The next sweep finds it: still counted.
        let found = HashMap::from([("team-a".into(), vec![node("z1", "n1")])]);
        book.swept(Instant::now(), found, &listed(&["z1"]));
        assert_eq!(book.holdings("team-a").len(), 1);
        // Its zone listed, and it is not there: gone, no longer counted.
        assert!(book.swept(Instant::now(), HashMap::new(), &listed(&["z1"])));
        assert!(book.holdings("team-a").is_empty());
        assert!(book.holdings("team-b").is_empty());
    }

    #[test]
    fn the_book_reads_back_what_it_wrote() {
        let o = Orphan {
            namespace: "team-a".into(),
            holding: node("us-east5-b", "n1"),
            at: Instant::now(),
        };
        let (ns, h) = from_line(&to_line(&o)).expect("a line of the book");
        assert_eq!((ns, h), (o.namespace, o.holding));
        assert_eq!(from_line("team-a bogus 8 1 what"), None, "no place, no line");
    }
}
