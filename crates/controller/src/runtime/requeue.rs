//! When a reconcile looks again: one vocabulary and one poll policy for every kind.

use std::time::Duration;

use kube::runtime::controller::Action;

use crate::runtime::config::ControllerConfig;

/// How soon to look at an object again, as a plan says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// The cloud object is changing state: `poll_active`.
    Active,
    /// Waiting for capacity or for a slow external change: `poll_capacity`.
    Capacity,
    /// Nothing is expected to change by itself (or only by a human): `poll_stable`.
    Stable,
    /// A deadline of our own (a retry's backoff, a TTL) is this far off: waited for, but never
    /// longer than `poll_stable` nor shorter than `poll_active` (the clock may be emulated, so a
    /// deadline in its time is checked again at least every `poll_stable` of real time).
    After(Duration),
}

impl Requeue {
    /// The wait before the next look.
    pub fn after(self, config: &ControllerConfig) -> Duration {
        match self {
            Self::Active => config.poll_active,
            Self::Capacity => config.poll_capacity,
            Self::Stable => config.poll_stable,
            Self::After(wait) => wait.min(config.poll_stable).max(config.poll_active),
        }
    }

    /// The controller action that waits [`Requeue::after`].
    pub fn action(self, config: &ControllerConfig) -> Action {
        Action::requeue(self.after(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_wait_maps_to_its_interval_and_a_deadline_is_bounded_both_ways() {
        let c = ControllerConfig {
            poll_active: Duration::from_secs(2),
            poll_capacity: Duration::from_secs(30),
            poll_stable: Duration::from_secs(300),
            ..ControllerConfig::default()
        };
        assert_eq!(Requeue::Active.after(&c), Duration::from_secs(2));
        assert_eq!(Requeue::Capacity.after(&c), Duration::from_secs(30));
        assert_eq!(Requeue::Stable.after(&c), Duration::from_secs(300));
        let after = |s| Requeue::After(Duration::from_secs(s)).after(&c);
        assert_eq!(after(25), Duration::from_secs(25));
        assert_eq!(after(0), Duration::from_secs(2), "never sooner than poll_active");
        assert_eq!(
            after(86_400),
            Duration::from_secs(300),
            "never later than poll_stable"
        );
    }
}
