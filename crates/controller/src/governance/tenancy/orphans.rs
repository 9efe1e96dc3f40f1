//! What a namespace's orphans hold: cloud resources left running by an object deleted with an
//! allowed `deletionPolicy: Orphan` (`allowOrphan`). They keep billing, so they keep counting
//! against the namespace's chip quota and budget until they are gone from the cloud (issue 32:
//! deleting an orphaned slice freed its quota while its node ran on).
//!
//! Two sources, so nothing is uncounted in between: the deletion pass that orphans a TPU node
//! records it at once ([`OrphanBook::record`]); every sweep then says what is still there
//! ([`OrphanBook::swept`]), by the operator's labels (namespace, owner), which replaces what an
//! earlier sweep or deletion recorded, except deletions recorded after the sweep began (the sweep
//! may have listed before their object was gone). A node the sweeper no longer finds stops
//! counting. In memory: a new leader counts orphans again from its first sweep on.

use std::{collections::HashMap, sync::Mutex};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use super::usage::Holding;

/// One namespace's orphans: cloud resource name → (when recorded or last swept, what it holds).
type Orphans = HashMap<String, (Instant, Holding)>;

/// Orphan holdings by namespace.
#[derive(Debug, Default)]
pub struct OrphanBook(Mutex<HashMap<String, Orphans>>);

impl OrphanBook {
    /// A deletion pass left `holding` (its `uid` the cloud resource's name) running in `namespace`.
    pub fn record(&self, namespace: &str, holding: Holding) {
        let mut books = self.0.lock().expect("orphan book poisoned");
        books
            .entry(namespace.to_owned())
            .or_default()
            .insert(holding.uid.clone(), (Instant::now(), holding));
    }

    /// A sweep begun at `began` found `found` (namespace → holdings) orphaned: it replaces what
    /// was known, but for deletions recorded since it began. `complete`: every place listed; a
    /// sweep that could not list one only adds what it found.
    pub fn swept(&self, began: Instant, found: HashMap<String, Vec<Holding>>, complete: bool) {
        let mut books = self.0.lock().expect("orphan book poisoned");
        if complete {
            for book in books.values_mut() {
                book.retain(|_, (at, _)| *at >= began);
            }
        }
        for (namespace, holdings) in found {
            let book = books.entry(namespace).or_default();
            for h in holdings {
                book.insert(h.uid.clone(), (began, h));
            }
        }
        books.retain(|_, book| !book.is_empty());
    }

    /// What `namespace`'s orphans hold.
    pub fn holdings(&self, namespace: &str) -> Vec<Holding> {
        let books = self.0.lock().expect("orphan book poisoned");
        books
            .get(namespace)
            .map(|b| b.values().map(|(_, h)| h.clone()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(name: &str) -> Holding {
        Holding {
            uid: name.into(),
            what: format!("orphaned TPU node {name}"),
            chips: 8,
            per_hour_usd: 10.8,
        }
    }

    #[test]
    fn an_orphan_counts_from_its_deletion_until_a_sweep_no_longer_finds_it() {
        let book = OrphanBook::default();
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        book.record("team-a", node("n1"));
        // A sweep that began before the deletion and did not see n1 yet keeps it.
        book.swept(began, HashMap::new(), true);
        assert_eq!(book.holdings("team-a").len(), 1);
        // The next sweep finds it: still counted.
        let next = Instant::now();
        book.swept(next, HashMap::from([("team-a".into(), vec![node("n1")])]), true);
        assert_eq!(book.holdings("team-a").len(), 1);
        // A sweep that could not list every place says nothing of what is gone.
        book.swept(Instant::now(), HashMap::new(), false);
        assert_eq!(book.holdings("team-a").len(), 1);
        // Gone from the cloud: no longer counted.
        book.swept(Instant::now(), HashMap::new(), true);
        assert!(book.holdings("team-a").is_empty());
        assert!(book.holdings("team-b").is_empty());
    }
}
