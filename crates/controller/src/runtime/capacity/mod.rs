//! Getting TPUs when they are scarce, the parts every kind shares and none owns: why creates
//! fail, counted by reason ([`metrics`]), and which places stocked out lately ([`memory`]), one
//! copy per process behind [`Capacity`].

pub mod memory;
pub mod metrics;

use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

pub use memory::{Place, Verdict};
pub use metrics::CapacityMetrics;

/// The process's stockout memory, with its metrics kept in step. Every object's create asks it
/// first; the process is the leader (only the leader creates), so one copy per process is one
/// copy per operator. A new leader starts with an empty memory and relearns a stocked-out place
/// from one create per place.
#[derive(Debug, Default)]
pub struct Capacity {
    memory: Mutex<memory::Memory>,
    metrics: CapacityMetrics,
}

impl Capacity {
    /// Reports into `metrics` (the context's, so `/metrics` shows them).
    pub fn new(metrics: CapacityMetrics) -> Self {
        Self {
            memory: Mutex::default(),
            metrics,
        }
    }

    fn memory(&self) -> MutexGuard<'_, memory::Memory> {
        // The memory is a cache of what the cloud said: a panic elsewhere while holding it
        // leaves nothing half-written that matters, so a poisoned lock is used as is.
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// May `who` create at `place` now (see [`memory::Memory::ask`])? A refusal is counted.
    pub fn ask(&self, place: &Place, who: &str, now: DateTime<Utc>) -> Verdict {
        let verdict = self.memory().ask(place, who, now);
        if verdict != Verdict::Go {
            let labels = metrics::WithheldLabels { kind: place.kind };
            self.metrics.withheld.get_or_create(&labels).inc();
        }
        verdict
    }

    /// A create at `place` stocked out: the place is blocked (its gauge says until when), and
    /// places not heard of for hours are forgotten (their gauges dropped).
    pub fn stockout(&self, place: &Place, now: DateTime<Utc>) {
        let (until, forgotten) = {
            let mut m = self.memory();
            m.stockout(place, now);
            (m.blocked_until(place, now), m.forget_stale(now))
        };
        for p in &forgotten {
            self.metrics.blocked_until.remove(&metrics::PlaceLabels::of(p));
        }
        self.metrics
            .blocked_until
            .get_or_create(&metrics::PlaceLabels::of(place))
            .set(until.map_or(0, |u| u.timestamp()));
    }

    /// `who`'s create at `place` was accepted by the call (see [`memory::Memory::accepted`]).
    pub fn accepted(&self, place: &Place, who: &str, now: DateTime<Utc>) {
        self.memory().accepted(place, who, now);
    }

    /// A node at `place` created at `created` is up (see [`memory::Memory::granted`]).
    pub fn granted(&self, place: &Place, created: DateTime<Utc>) {
        if self.memory().granted(place, created) {
            self.metrics
                .blocked_until
                .remove(&metrics::PlaceLabels::of(place));
        }
    }

    /// Gives up `who`'s probe at `place` (its create was not made, or failed otherwise).
    pub fn release(&self, place: &Place, who: &str) {
        self.memory().release(place, who);
    }
}
