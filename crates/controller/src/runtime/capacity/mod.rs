//! Getting TPUs when they are scarce, the parts every kind shares and none owns: why creates
//! fail, counted by reason ([`metrics`]), which places stocked out lately ([`memory`]), and the
//! pace of each project's creates ([`limiter`]), one copy per process behind [`Capacity`].

pub mod limiter;
pub mod memory;
pub mod metrics;
pub mod publish;
pub mod snapshot;
pub mod turns;

use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

pub use limiter::{Asker, Due, Group, Limits, Line, Turn, Waiting};
pub use memory::{Place, Verdict};
pub use metrics::CapacityMetrics;

/// The process's stockout memory, with its metrics kept in step. Every object's create asks it
/// first; the process is the leader (only the leader creates), so one copy per process is one
/// copy per operator. A new leader starts with an empty memory and relearns a stocked-out place
/// from one create per place.
///
/// The create limiter is kept the same way: only the leader spends, and a new leader starts each
/// line with one burst of tokens.
#[derive(Debug, Default)]
pub struct Capacity {
    memory: Mutex<memory::Memory>,
    limiter: Mutex<limiter::Limiter>,
    metrics: CapacityMetrics,
}

impl Capacity {
    /// Reports into `metrics` (the context's, so `/metrics` shows them); paces creates to
    /// `limits`.
    pub fn new(metrics: CapacityMetrics, limits: Limits) -> Self {
        Self {
            memory: Mutex::default(),
            limiter: Mutex::new(limiter::Limiter::new(limits)),
            metrics,
        }
    }

    fn limiter(&self) -> MutexGuard<'_, limiter::Limiter> {
        // As the memory: a pace and a line, nothing half-written that matters.
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// May `asker` make its call on `line` now (see [`limiter::Limiter::turn`])? A wait is
    /// counted, and the line's gauge says how many wait in it.
    pub fn turn(&self, line: &Line, asker: Asker<'_>, now: DateTime<Utc>) -> Turn {
        let (turn, waiting) = {
            let mut limiter = self.limiter();
            let turn = limiter.turn(line, asker, now);
            (turn, limiter.waiting(line))
        };
        let labels = metrics::LineLabels::of(line);
        if matches!(turn, Turn::Wait(_)) {
            self.metrics.limiter_waits.get_or_create(&labels).inc();
        }
        self.metrics
            .limiter_waiting
            .get_or_create(&labels)
            .set(waiting as i64);
        turn
    }

    /// The waiters of `kind` whose turn has come (see [`limiter::Limiter::due`]).
    pub fn due(&self, kind: &str, now: DateTime<Utc>) -> Vec<Due> {
        self.limiter().due(kind, now)
    }

    /// A call on `line` failed with `err`: a rate-quota refusal pauses and slows the line (see
    /// [`limiter::Limiter::refused`]); any other failure says nothing of the pace.
    pub fn answered(&self, line: &Line, err: &tpu_operator_gcp::GcpError, now: DateTime<Utc>) {
        if err.create_failure() != tpu_operator_gcp::CreateFailure::RateLimited {
            return;
        }
        self.limiter().refused(line, now);
        self.metrics
            .limiter_slowdowns
            .get_or_create(&metrics::LineLabels::of(line))
            .inc();
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

    /// `who`'s create at `place` stocked out (see [`memory::Memory::stockout`]): the place is
    /// blocked (its gauge says until when), and places not heard of for hours are forgotten
    /// (their gauges dropped).
    pub fn stockout(&self, place: &Place, who: &str, now: DateTime<Utc>) {
        let (until, forgotten) = {
            let mut m = self.memory();
            m.stockout(place, who, now);
            // The last block even if it is over: a stockout that added none (a late answer)
            // leaves the gauge saying when the place was last closed, not 0.
            (m.last_block(place), m.forget_stale(now))
        };
        for p in &forgotten {
            self.metrics.blocked_until.remove(&metrics::PlaceLabels::of(p));
        }
        if let Some(until) = until {
            self.metrics
                .blocked_until
                .get_or_create(&metrics::PlaceLabels::of(place))
                .set(until.timestamp());
        }
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

    /// What the memory holds at `now`, for showing (see [`snapshot`]).
    pub fn snapshot(&self, now: DateTime<Utc>) -> snapshot::Snapshot {
        let lines = self.limiter().lines(now);
        snapshot::Snapshot::of(self.memory().remembered(), now).with_lines(lines)
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn place() -> Place {
        Place {
            project: "p".into(),
            zone: "us-east5-b".into(),
            accelerator: "v6e-8".into(),
            kind: "spot",
        }
    }

    #[test]
    fn the_gauge_shows_the_block_until_a_node_comes_up_and_refusals_are_counted() {
        let capacity = Capacity::new(CapacityMetrics::default(), Limits::default());
        let (p, t0) = (place(), DateTime::from_timestamp(1_800_000_000, 0).unwrap());
        let labels = metrics::PlaceLabels::of(&p);
        let gauge = |c: &Capacity| c.metrics.blocked_until.get(&labels).map(|g| g.get());
        let withheld = |c: &Capacity| {
            let kind = metrics::WithheldLabels { kind: "spot" };
            c.metrics.withheld.get(&kind).map_or(0, |n| n.get())
        };
        assert_eq!(capacity.ask(&p, "a", t0), Verdict::Go);
        assert_eq!((gauge(&capacity), withheld(&capacity)), (None, 0));
        capacity.stockout(&p, "a", t0);
        assert_eq!(gauge(&capacity), Some((t0 + memory::INITIAL_BACKOFF).timestamp()));
        assert!(matches!(capacity.ask(&p, "b", t0), Verdict::Blocked { .. }));
        assert_eq!(withheld(&capacity), 1);
        capacity.stockout(&p, "late", t0 + Duration::minutes(6));
        assert_eq!(
            gauge(&capacity),
            Some((t0 + memory::INITIAL_BACKOFF).timestamp()),
            "a late answer leaves the gauge on the last block"
        );
        capacity.granted(&p, t0 - Duration::minutes(1));
        assert!(gauge(&capacity).is_some(), "an older node proves nothing");
        capacity.granted(&p, t0 + Duration::minutes(6));
        assert_eq!(gauge(&capacity), None, "the place is open again");
        assert_eq!(capacity.ask(&p, "b", t0 + Duration::minutes(6)), Verdict::Go);
    }
}
