//! The emulator's notion of "now": either a manual clock (tests advance it explicitly) or the
//! runtime's clock scaled by a factor (`--time-scale 60` makes one second count as one emulated
//! minute). State machines are evaluated lazily against this clock on every request, so a manual
//! clock makes every transition deterministic.
//!
//! The scaled clock reads tokio's monotonic clock, not the OS's: in a runtime whose time is paused
//! (`tokio::time::pause`, as `tpu-operator local` runs) it advances only when every task waits on a
//! timer, so emulated time follows the events, not how busy the machine is. Anywhere else tokio's
//! clock is the OS's monotonic clock.

use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
enum Mode {
    Manual {
        now: DateTime<Utc>,
    },
    Scaled {
        base_wall: DateTime<Utc>,
        base_instant: Instant,
        scale: f64,
    },
}

/// A cloneable handle on the emulator clock.
#[derive(Clone, Debug)]
pub struct Clock {
    mode: Arc<Mutex<Mode>>,
}

impl Clock {
    /// A clock that only moves when [`Clock::advance`] or [`Clock::set`] is called.
    pub fn manual(start: DateTime<Utc>) -> Self {
        Clock {
            mode: Arc::new(Mutex::new(Mode::Manual { now: start })),
        }
    }

    /// A clock following the wall clock, `scale` times faster (1.0 = real time).
    pub fn scaled(scale: f64) -> Self {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        Clock {
            mode: Arc::new(Mutex::new(Mode::Scaled {
                base_wall: Utc::now(),
                base_instant: Instant::now(),
                scale,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mode> {
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now(&self) -> DateTime<Utc> {
        match &*self.lock() {
            Mode::Manual { now } => *now,
            Mode::Scaled {
                base_wall,
                base_instant,
                scale,
            } => {
                let elapsed = base_instant.elapsed().as_secs_f64() * scale;
                *base_wall + chrono::Duration::microseconds((elapsed * 1e6) as i64)
            }
        }
    }

    /// Moves the clock forward (works for both modes; a scaled clock keeps running from there).
    pub fn advance(&self, by: Duration) {
        let by = chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
        match &mut *self.lock() {
            Mode::Manual { now } => *now += by,
            Mode::Scaled { base_wall, .. } => *base_wall += by,
        }
    }

    /// Jumps to `to` (may go backwards; state machines only react to time moving forward).
    pub fn set(&self, to: DateTime<Utc>) {
        match &mut *self.lock() {
            Mode::Manual { now } => *now = to,
            Mode::Scaled {
                base_wall,
                base_instant,
                ..
            } => {
                *base_wall = to;
                *base_instant = Instant::now();
            }
        }
    }

    pub fn is_manual(&self) -> bool {
        matches!(&*self.lock(), Mode::Manual { .. })
    }

    /// Emulated seconds per real second (1.0 for a manual clock).
    pub fn scale(&self) -> f64 {
        match &*self.lock() {
            Mode::Manual { .. } => 1.0,
            Mode::Scaled { scale, .. } => *scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = Clock::manual(start);
        assert_eq!(c.now(), start);
        c.advance(Duration::from_secs(90));
        assert_eq!(c.now(), start + chrono::Duration::seconds(90));
        c.set(start);
        assert_eq!(c.now(), start);
    }

    #[test]
    fn scaled_clock_runs_faster_than_real_time() {
        let c = Clock::scaled(1000.0);
        let a = c.now();
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.now() - a >= chrono::Duration::seconds(10));
    }

    /// In a paused runtime the scaled clock moves with tokio's clock only: 100 ms of timers are
    /// one emulated minute at 600x, however long the machine took to get there.
    #[tokio::test(start_paused = true)]
    async fn scaled_clock_follows_a_paused_runtime_not_the_wall() {
        let c = Clock::scaled(600.0);
        let a = c.now();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.now(), a, "wall time moved a paused clock");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(c.now() - a, chrono::Duration::seconds(60));
    }
}
