//! Per-object exponential backoff with jitter.
//!
//! kube-runtime's `Controller` has no per-object error backoff (kube-rs/kube#1916), and a fixed retry
//! interval either hammers GCP during an outage or reacts slowly to a one-off blip. Each object gets
//! its own failure count, keyed by UID, that a successful reconcile resets.

use std::{collections::HashMap, sync::Mutex, time::Duration};

/// Exponential backoff bounds: the n-th consecutive failure waits about `base * 2^(n-1)`, capped at
/// `max`, with "equal jitter" (half fixed, half spread by the object's uid and failure count,
/// [`crate::runtime::spread`]) so that many objects failing together (a GCP outage) do not retry in
/// lockstep.
#[derive(Debug, Clone, Copy)]
pub struct BackoffPolicy {
    pub base: Duration,
    pub max: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            max: Duration::from_secs(300),
        }
    }
}

impl BackoffPolicy {
    /// The un-jittered delay after `failures` consecutive failures (`failures >= 1`).
    pub fn ceiling(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        self.base.saturating_mul(1u32 << exp).min(self.max)
    }

    /// The delay for `uid` to wait after `failures` failures, spread over `[ceiling/2, ceiling]`.
    pub fn delay(&self, uid: &str, failures: u32) -> Duration {
        let ceiling = self.ceiling(failures);
        crate::runtime::spread::between(uid, i64::from(failures), ceiling / 2, ceiling)
    }
}

/// Consecutive-failure counts per object UID.
#[derive(Debug, Default)]
pub struct ObjectBackoff {
    policy: BackoffPolicy,
    failures: Mutex<HashMap<String, u32>>,
}

impl ObjectBackoff {
    pub fn new(policy: BackoffPolicy) -> Self {
        Self {
            policy,
            failures: Mutex::default(),
        }
    }

    /// Records a failure for `uid` and returns how long to wait before the next attempt.
    pub fn on_failure(&self, uid: &str) -> Duration {
        let failures = {
            let mut map = self.failures.lock().expect("backoff map poisoned");
            let n = map.entry(uid.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        self.policy.delay(uid, failures)
    }

    /// Forgets the failures of `uid` after a successful reconcile (or once the object is gone).
    pub fn reset(&self, uid: &str) {
        self.failures.lock().expect("backoff map poisoned").remove(uid);
    }

    /// Number of consecutive failures recorded for `uid`.
    pub fn failures(&self, uid: &str) -> u32 {
        self.failures
            .lock()
            .expect("backoff map poisoned")
            .get(uid)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let p = BackoffPolicy::default();
        let secs: Vec<u64> = (1..=8).map(|n| p.ceiling(n).as_secs()).collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn delay_stays_within_half_and_full_ceiling() {
        let p = BackoffPolicy::default();
        for n in 1..10 {
            for i in 0..50 {
                let d = p.delay(&format!("uid-{i}"), n);
                assert!(d >= p.ceiling(n) / 2 && d <= p.ceiling(n), "failure {n}: {d:?}");
            }
        }
    }

    #[test]
    fn failures_are_counted_per_object_and_reset() {
        let b = ObjectBackoff::new(BackoffPolicy {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        });
        b.on_failure("a");
        b.on_failure("a");
        let third = b.on_failure("a");
        b.on_failure("b");
        assert_eq!((b.failures("a"), b.failures("b")), (3, 1));
        assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
        b.reset("a");
        assert_eq!(b.failures("a"), 0);
        assert_eq!(b.failures("b"), 1);
    }
}
