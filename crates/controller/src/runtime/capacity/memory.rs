//! Stockout memory, shared by every object of the process: what the last create per (project,
//! zone, accelerator, capacity kind) learned, and until when that place is not asked again.
//!
//! A hundred slices waiting for one stocked-out zone must not each ask it every poll: the zone
//! said "no capacity" to one of them, and it says the same to all. So the first stockout blocks
//! the place for a backoff, everyone waits out that window without a call, and when it ends one
//! object (the first to ask) probes with its create while the others wait for the probe's
//! answer. A node created after the stockout and seen READY clears the block; another stockout
//! lengthens it. Creates already on their way when the first stockout is learnt are not held
//! back (at most one per worker for a stockout refused in the call; for one that comes back in
//! the operation, every create made before it failed): a place nobody asked yet, or that last
//! granted, is asked freely, because holding every first create back for one probe would cost
//! every other object one more pass, and so one more read of its node, on the common path
//! where capacity is there.
//!
//! Why the project is in the key: stock is the zone's, but what a create is told also depends on
//! the project (its quota, its reservations, its permissions), and one team must not be able to
//! hold another team's creates back. Only a create classified as a stockout blocks a place; an
//! invalid request, a quota or a rate limit gives the probe up and blocks nothing.
//!
//! The backoff is Cluster Autoscaler's node-group backoff: 5 minutes after the first failed
//! scale-up, doubling to at most 30 minutes, forgotten after 3 hours without a failure
//! (`cluster-autoscaler` `--initial-node-group-backoff-duration` 5m,
//! `--max-node-group-backoff-duration` 30m, `--node-group-backoff-reset-timeout` 3h; see
//! ../shared/notes/anchors.md §4). Kueue's ProvisioningRequest retry (60 s, then 1,800 s) ends at
//! the same 30 minutes but jumps there after one retry; TPU stockouts last from minutes to days
//! (users wait them out with SkyPilot's `--retry-until-up`), so the gentler doubling probes a
//! zone that comes back within the first half hour three times (at 5, 15 and 35 minutes)
//! instead of once, and never costs more than one create per 30 minutes per place.
//!
//! Pure: every method takes `now`; [`super::Capacity`] holds it behind a mutex.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

/// The first block after a stockout.
pub const INITIAL_BACKOFF: Duration = Duration::minutes(5);
/// The longest block.
pub const MAX_BACKOFF: Duration = Duration::minutes(30);
/// Strikes older than this are forgotten: the next stockout starts at [`INITIAL_BACKOFF`].
pub const RESET_AFTER: Duration = Duration::hours(3);
/// How long an object may hold the probe before its create call answers (it crashed, or was
/// deleted, between asking and creating): then the next asker probes.
pub const PROBE_TIMEOUT: Duration = Duration::seconds(60);
/// How long a probe whose create the call accepted waits for the node to come up or its
/// operation to fail: a TPU create takes minutes (the emulator's default is 3), and a stockout
/// may still come back in the operation. Past it the next asker probes, so a node that never
/// answers cannot hold the place.
pub const CREATE_TIMEOUT: Duration = Duration::minutes(10);

/// Where capacity is asked for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub project: String,
    pub zone: String,
    /// The accelerator type, e.g. `v6e-8`.
    pub accelerator: String,
    /// The capacity kind as the spec names it: `onDemand`, `spot`, `flexStart`.
    pub kind: &'static str,
}

/// What the memory says to an object that wants to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Create (as the probe, when the place stocked out before).
    Go,
    /// Do not: the place stocked out and is blocked until `until` (`strikes` stockouts in a
    /// row, the last at `since`).
    Blocked {
        until: DateTime<Utc>,
        since: DateTime<Utc>,
        strikes: u32,
    },
    /// Do not yet: another object's create is asking the place; it answers, or its probe
    /// expires, by `until`.
    Probing { until: DateTime<Utc> },
}

/// The object asking a stocked-out place now.
#[derive(Clone, Debug, PartialEq)]
struct Probe {
    who: String,
    /// When the probe lapses (see [`PROBE_TIMEOUT`], [`CREATE_TIMEOUT`]).
    until: DateTime<Utc>,
}

/// One place's memory. Only a place that stocked out has one: a place that never did, or whose
/// stockout a grant cleared, is asked freely and needs none.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    /// When the last stockout was recorded.
    at: DateTime<Utc>,
    /// Stockouts in a row.
    strikes: u32,
    blocked_until: DateTime<Utc>,
    probe: Option<Probe>,
}

/// The block after `strikes` stockouts in a row: 5, 10, 20, 30, 30, ... minutes.
pub fn backoff(strikes: u32) -> Duration {
    let doublings = strikes.saturating_sub(1).min(16);
    (INITIAL_BACKOFF * 2i32.pow(doublings)).min(MAX_BACKOFF)
}

/// Every stocked-out place's memory.
#[derive(Debug, Default)]
pub struct Memory {
    places: BTreeMap<Place, Entry>,
}

impl Memory {
    /// May `who` create at `place` now? At a place that stocked out and whose block has passed,
    /// claims the probe when nobody holds it.
    pub fn ask(&mut self, place: &Place, who: &str, now: DateTime<Utc>) -> Verdict {
        let Some(entry) = self.places.get_mut(place) else {
            return Verdict::Go;
        };
        if entry.blocked_until > now {
            return Verdict::Blocked {
                until: entry.blocked_until,
                since: entry.at,
                strikes: entry.strikes,
            };
        }
        match &entry.probe {
            Some(p) if p.who != who && p.until > now => Verdict::Probing { until: p.until },
            _ => {
                entry.probe = Some(Probe {
                    who: who.to_owned(),
                    until: now + PROBE_TIMEOUT,
                });
                Verdict::Go
            }
        }
    }

    /// `who`'s create at `place` answered "no capacity" (its call, or its operation).
    ///
    /// Once a place is known to be out of stock, only its probe's answer counts: every create
    /// made since the block ended went through [`Self::ask`] and so is the probe. Any other
    /// answer comes from a create made before (most often an operation that failed long ago and
    /// is read late), so it says nothing new. Counted, it would add a strike and restart the
    /// window for a stockout that is already known.
    pub fn stockout(&mut self, place: &Place, who: &str, now: DateTime<Utc>) {
        match self.places.get_mut(place) {
            // Inside the window: creates that were on their way before the block.
            Some(entry) if entry.blocked_until > now => {}
            Some(entry) if entry.probe.as_ref().is_none_or(|p| p.who != who) => {}
            Some(entry) => {
                let stale = now - entry.at > RESET_AFTER;
                entry.strikes = if stale { 1 } else { entry.strikes + 1 };
                entry.at = now;
                entry.blocked_until = now + backoff(entry.strikes);
                entry.probe = None;
            }
            None => {
                let entry = Entry {
                    at: now,
                    strikes: 1,
                    blocked_until: now + backoff(1),
                    probe: None,
                };
                self.places.insert(place.clone(), entry);
            }
        }
    }

    /// `who`'s create call at `place` was accepted: if it is the probe, it stays the probe
    /// until its node comes up ([`Self::granted`]) or its operation stocks out, for at most
    /// [`CREATE_TIMEOUT`].
    pub fn accepted(&mut self, place: &Place, who: &str, now: DateTime<Utc>) {
        if let Some(p) = self.probe_of(place, who) {
            p.until = now + CREATE_TIMEOUT;
        }
    }

    /// A node at `place` created at `created` is up. Created after the last stockout, it proves
    /// the place grants again: the place is forgotten and asked freely. An older node proves
    /// nothing about the stock now. Returns whether the place was forgotten.
    pub fn granted(&mut self, place: &Place, created: DateTime<Utc>) -> bool {
        let proves = self.places.get(place).is_some_and(|e| created > e.at);
        if proves {
            self.places.remove(place);
        }
        proves
    }

    /// Gives up the probe `who` holds at `place` without an answer about capacity (its create
    /// was not made, or failed for another reason).
    pub fn release(&mut self, place: &Place, who: &str) {
        if let Some(entry) = self.places.get_mut(place)
            && entry.probe.as_ref().is_some_and(|p| p.who == who)
        {
            entry.probe = None;
        }
    }

    fn probe_of(&mut self, place: &Place, who: &str) -> Option<&mut Probe> {
        self.places
            .get_mut(place)?
            .probe
            .as_mut()
            .filter(|p| p.who == who)
    }

    /// Until when `place` is blocked, if it is at `now`.
    pub fn blocked_until(&self, place: &Place, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.last_block(place).filter(|u| *u > now)
    }

    /// The end of `place`'s last block, past or not (`None`: no stockout remembered).
    pub fn last_block(&self, place: &Place) -> Option<DateTime<Utc>> {
        self.places.get(place).map(|e| e.blocked_until)
    }

    /// Forgets places whose last stockout is older than [`RESET_AFTER`] and that nobody
    /// probes: the memory stays as small as the set of places out of stock lately. Returns
    /// the places forgotten.
    pub fn forget_stale(&mut self, now: DateTime<Utc>) -> Vec<Place> {
        let stale: Vec<Place> = self
            .places
            .iter()
            .filter(|(_, e)| now - e.at > RESET_AFTER && e.probe.as_ref().is_none_or(|p| p.until <= now))
            .map(|(p, _)| p.clone())
            .collect();
        for p in &stale {
            self.places.remove(p);
        }
        stale
    }

    /// What is remembered of every place, for showing (see [`super::snapshot`]).
    pub fn remembered(&self) -> impl Iterator<Item = (&Place, Remembered)> {
        self.places.iter().map(|(place, e)| {
            let remembered = Remembered {
                last_stockout: e.at,
                strikes: e.strikes,
                blocked_until: e.blocked_until,
                probe_until: e.probe.as_ref().map(|p| p.until),
            };
            (place, remembered)
        })
    }
}

/// One place's memory as it may be shown: times and counts, never who probes (an object's uid
/// says nothing to a reader and would tie the view to one tenant's object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    /// When the last stockout that counted was recorded.
    pub last_stockout: DateTime<Utc>,
    /// Stockouts in a row.
    pub strikes: u32,
    /// Not asked before this (past: the next create probes).
    pub blocked_until: DateTime<Utc>,
    /// When the current probe lapses, if an object holds one (it may already have lapsed).
    pub probe_until: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests;
