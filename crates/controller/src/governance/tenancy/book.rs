//! What admissions read of a namespace's usage, without listing the namespace per admission.
//!
//! An admission needs what the rest of its namespace holds. Listing the namespace's three kinds
//! on every admission made each quota refusal cost three lists under the namespace's lock, per
//! refused object and per retry: 300 refused slices in one namespace kept every worker waiting on
//! that lock, and another namespace's slice waited 25 s for a worker.
//!
//! The book keeps, per namespace, the holdings of the last listing (at most [`LISTING_TTL`] old)
//! and a ledger of what this process admitted since. An admitted create enters the ledger before
//! its create call, so the next admission counts it although no listing shows it yet. Listings
//! are taken under the namespace's admission lock, which every earlier admission held until its
//! create was in status: a listing shows everything admitted before it began, so ledger entries
//! older than the listing are dropped. A listing up to [`LISTING_TTL`] old misses only releases
//! (objects that stopped holding since): admissions err towards refusing, never towards
//! admitting past the quota. Only the leader admits, so the book is in-process; a new leader
//! starts with an empty one and lists first.

use std::{collections::HashMap, sync::Mutex, time::Duration};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

use super::{
    Tenancy,
    usage::{Holding, Listed, Usage, sum},
};
use crate::runtime::error::Result;

/// How long a namespace's listing is reused by admissions: a quota that frees up is seen at most
/// this late (refused objects look again every `poll_capacity`, 30 s by default, anyway).
pub const LISTING_TTL: Duration = Duration::from_secs(5);

/// One namespace's listing and ledger.
#[derive(Debug, Default)]
struct Book {
    listing: Option<(Instant, Vec<Holding>)>,
    /// Admitted by this process since the listing, by UID.
    admitted: HashMap<String, (Instant, Holding)>,
}

impl Book {
    fn fresh(&self, now: Instant) -> bool {
        self.listing
            .as_ref()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) < LISTING_TTL)
    }

    /// Takes a listing begun at `at`: admissions from before it are in it.
    fn listed(&mut self, at: Instant, holdings: Vec<Holding>) {
        self.admitted.retain(|_, (admitted, _)| *admitted >= at);
        self.listing = Some((at, holdings));
    }

    /// The listing's holdings, an object admitted since counted as admitted, and `orphans`
    /// (what the namespace's orphaned cloud resources hold), all but `exclude`'s.
    fn usage(&self, exclude: &str, orphans: &[Holding]) -> Usage {
        let listed = self
            .listing
            .iter()
            .flat_map(|(_, h)| h)
            .filter(|h| !self.admitted.contains_key(&h.uid));
        let admitted = self.admitted.values().map(|(_, h)| h);
        sum(listed.chain(admitted).chain(orphans), exclude)
    }
}

/// The namespaces' books (see the module docs).
#[derive(Debug, Default)]
pub struct UsageBook(Mutex<HashMap<String, Book>>);

impl UsageBook {
    /// What `namespace` holds but the object `exclude` (its UID). Lists the namespace when its
    /// listing is older than [`LISTING_TTL`]. Call it holding the namespace's admission lock.
    pub async fn usage(&self, tenancy: &Tenancy, namespace: &str, exclude: &str) -> Result<Usage> {
        let book = &tenancy.admissions.orphans;
        book.load(&tenancy.client).await?;
        let orphans = book.holdings(namespace);
        {
            let books = self.0.lock().expect("usage book poisoned");
            if let Some(book) = books.get(namespace).filter(|b| b.fresh(Instant::now())) {
                return Ok(book.usage(exclude, &orphans));
            }
        }
        let at = Instant::now();
        let holdings = Listed::read(&tenancy.client, namespace, &tenancy.prices, &tenancy.listers)
            .await?
            .holdings;
        let mut books = self.0.lock().expect("usage book poisoned");
        let book = books.entry(namespace.to_owned()).or_default();
        book.listed(at, holdings);
        Ok(book.usage(exclude, &orphans))
    }

    /// Records an admission, before its create call.
    pub fn admitted(&self, namespace: &str, holding: Holding) {
        let mut books = self.0.lock().expect("usage book poisoned");
        let book = books.entry(namespace.to_owned()).or_default();
        book.admitted
            .insert(holding.uid.clone(), (Instant::now(), holding));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(uid: &str, chips: u32) -> Holding {
        Holding {
            uid: uid.into(),
            what: format!("TpuSlice {uid}"),
            chips,
            per_hour_usd: f64::from(chips),
        }
    }

    #[test]
    fn an_admission_counts_until_a_listing_begun_after_it_shows_it() {
        let t0 = Instant::now();
        let mut book = Book::default();
        book.listed(t0, vec![holding("a", 8)]);
        book.admitted
            .insert("b".into(), (t0 + Duration::from_millis(1), holding("b", 4)));
        assert_eq!(
            book.usage("new", &[]).chips,
            12,
            "the admitted create counts at once"
        );
        assert_eq!(book.usage("b", &[]).chips, 8, "but not against itself");
        // A listing begun after the admission shows what b holds now (it failed: nothing).
        book.listed(t0 + Duration::from_millis(2), vec![holding("a", 8)]);
        assert!(book.admitted.is_empty());
        assert_eq!(book.usage("new", &[]).chips, 8);
    }

    #[test]
    fn an_admission_during_a_listing_is_kept_and_counted_once() {
        let t0 = Instant::now();
        let mut book = Book::default();
        book.admitted
            .insert("b".into(), (t0 + Duration::from_millis(5), holding("b", 4)));
        // The listing began before b's admission and already shows b (its status was quick).
        book.listed(t0, vec![holding("a", 8), holding("b", 4)]);
        assert_eq!(book.usage("new", &[]).chips, 12, "b is counted once");
    }

    #[test]
    fn a_listing_is_reused_for_its_ttl_only() {
        let t0 = Instant::now();
        let mut book = Book::default();
        assert!(!book.fresh(t0));
        book.listed(t0, Vec::new());
        assert!(book.fresh(t0 + LISTING_TTL / 2));
        assert!(!book.fresh(t0 + LISTING_TTL));
    }
}
