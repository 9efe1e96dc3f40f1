//! The controllers' notion of "now".
//!
//! Timeouts that the controllers own (TTL after finished, idle reaping, max run duration, capacity
//! wait deadlines) must follow the same clock as the cloud under test: in tests and in
//! `tpu-operator local` that is the emulator's accelerated or manual clock, in production the wall
//! clock. Planning code receives `now` as a value and never reads a clock itself.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

/// Kubernetes time at second precision (what the API server stores for a `metav1.Time`), so a
/// rebuilt status compares equal to the stored one.
pub fn k8s_time(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to; shared by reference between a test and the controllers.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(start)))
    }

    pub fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().expect("clock poisoned") = t;
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut t = self.0.lock().expect("clock poisoned");
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock poisoned")
    }
}

/// A clock defined by a function, e.g. one that reads an emulator's clock.
pub struct FnClock<F>(pub F);

impl<F> std::fmt::Debug for FnClock<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnClock")
    }
}

impl<F: Fn() -> DateTime<Utc> + Send + Sync> Clock for FnClock<F> {
    fn now(&self) -> DateTime<Utc> {
        (self.0)()
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
        let c = ManualClock::new(start);
        let shared = c.clone();
        assert_eq!(c.now(), start);
        shared.advance(chrono::Duration::seconds(90));
        assert_eq!(c.now(), start + chrono::Duration::seconds(90));
    }
}
