//! How long an object waits before it looks again, spread so that objects that met the same
//! obstacle together (a busy namespace, a refusal, an outage) do not come back together.
//!
//! The spread is drawn from a hash of the object's uid and a salt (the instant it is asked at,
//! or its failure count), not from a random number generator: the same object asking at the
//! same moment gets the same wait. In a cluster uids and instants all differ, so the waits spread
//! as random ones would; under `tpu-operator local` (stable uids, a clock advanced by events) a
//! run repeats exactly, on any machine.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    time::Duration,
};

/// A fraction in `[0, 1]`, the same for the same `uid` and `salt`.
pub fn fraction(uid: &str, salt: i64) -> f64 {
    // DefaultHasher::new() has fixed keys: the same inputs hash alike in every process.
    let mut hasher = DefaultHasher::new();
    uid.hash(&mut hasher);
    salt.hash(&mut hasher);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A wait in `[low, high]` for `uid` at `salt`.
pub fn between(uid: &str, salt: i64, low: Duration, high: Duration) -> Duration {
    let span = high.saturating_sub(low);
    low + span.mul_f64(fraction(uid, salt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_object_and_salt_wait_alike_and_others_spread_over_the_range() {
        let (low, high) = (Duration::from_millis(200), Duration::from_millis(800));
        assert_eq!(between("uid-1", 42, low, high), between("uid-1", 42, low, high));
        let waits: Vec<Duration> = (0..1000)
            .map(|i| between(&format!("uid-{i}"), 42, low, high))
            .collect();
        assert!(waits.iter().all(|w| *w >= low && *w <= high));
        // Spread over the whole range: each fifth of it gets some of the thousand objects.
        for fifth in 0..5u32 {
            let from = low + (high - low) * fifth / 5;
            let to = low + (high - low) * (fifth + 1) / 5;
            let n = waits.iter().filter(|w| **w >= from && **w < to).count();
            assert!((120..=280).contains(&n), "fifth {fifth}: {n} of 1000");
        }
        let over_time: std::collections::BTreeSet<Duration> =
            (0..20).map(|t| between("uid-1", t, low, high)).collect();
        assert!(over_time.len() > 15, "one object's waits change over time");
    }
}
