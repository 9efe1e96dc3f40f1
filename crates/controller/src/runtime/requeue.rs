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
    /// A deadline of our own (a retry's backoff, a TTL, a stockout's block) is this far off in
    /// the operator's clock (the cloud's time): waited for in the timers' time
    /// ([`ControllerConfig::timer_wait`]: the same in a cluster, shorter under `local`, whose
    /// cloud runs faster), but never longer than `poll_stable` nor shorter than `poll_active`.
    After(Duration),
}

impl Requeue {
    /// The wait before the next look.
    pub fn after(self, config: &ControllerConfig) -> Duration {
        match self {
            Self::Active => config.poll_active,
            Self::Capacity => config.poll_capacity,
            Self::Stable => config.poll_stable,
            // Converted before the bounds: a deadline minutes away in `local`'s cloud is under a
            // second of its timers, and capped unconverted it was met up to `poll_stable` (ten
            // emulated minutes) late.
            Self::After(wait) => config
                .timer_wait(wait)
                .min(config.poll_stable)
                .max(config.poll_active),
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

    /// Under `local` the cloud's clock runs `cloud_time_scale` times faster than the timers: a
    /// stockout's block ending 8 emulated minutes from now is looked at 0.8 s of timer time from
    /// now (10 emulated minutes late before, when it was capped at `poll_stable` unconverted).
    #[test]
    fn a_deadline_in_a_faster_cloud_is_waited_for_in_the_timers_time() {
        let c = ControllerConfig {
            poll_active: Duration::from_millis(100),
            poll_capacity: Duration::from_millis(200),
            poll_stable: Duration::from_secs(1),
            cloud_time_scale: 600.0,
            ..ControllerConfig::default()
        };
        let after = |s| Requeue::After(Duration::from_secs(s)).after(&c);
        assert_eq!(after(8 * 60), Duration::from_millis(800));
        assert_eq!(
            after(30 * 60),
            Duration::from_secs(1),
            "still at most poll_stable"
        );
        assert_eq!(after(6), Duration::from_millis(100), "still at least poll_active");
    }
}
