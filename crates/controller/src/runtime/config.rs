//! Operator-wide settings the controllers and the runtime pieces read: plain values, copied
//! into whatever needs them (no handle back to the context).

use std::time::Duration;

/// Operator-wide settings the controllers read.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Written to the `tpu-operator-cluster` label of every cloud object, so that several clusters
    /// sharing a project never sweep or adopt each other's resources.
    pub cluster_id: String,
    /// Watch only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Reconciles run at once per controller.
    pub concurrency: u16,
    /// Project used when an object does not name one.
    pub default_project: Option<String>,
    /// Requeue interval while a cloud object is changing state (creating, running, cancelling).
    pub poll_active: Duration,
    /// Requeue interval while nothing is expected to change (a READY slice, a finished batch).
    pub poll_stable: Duration,
    /// Requeue interval while waiting for capacity (stockout, queued resource waiting).
    pub poll_capacity: Duration,
    /// Watch cloud state changes with one paged list per collection and location instead of a
    /// read per object every `poll_active` (see [`crate::runtime::cloud_watch`]).
    pub watch_lists: bool,
    /// Backstop read interval of an object whose cloud resource is watched by listing. Only a
    /// listing that misses a change needs it (a change, or an absence, in a listing wakes the
    /// owner at once), so it is as long as `poll_stable`: while thousands of objects wait for
    /// capacity or for a batch to run, each backstop read is a call beyond the minimum.
    pub poll_watched: Duration,
    /// Least time between two listings of a training pipeline's checkpoint directory (progress
    /// in `status.checkpoint`, `progressDeadline`), in cloud-clock time.
    pub poll_checkpoints: Duration,
    /// Kueue admits the work of objects labelled `kueue.x-k8s.io/queue-name` (see
    /// [`crate::kueue`]); off: the label means nothing and Kueue's API is never called.
    pub kueue: bool,
    /// With `kueue`: the LocalQueue (in the object's namespace) of objects without the label, so
    /// leaving it off does not skip Kueue; `None`: such objects are not gated.
    pub kueue_default_queue: Option<String>,
    /// Google's per-minute rate quota of each method group the operator paces its creates to
    /// (see [`crate::runtime::capacity::limiter`]).
    pub create_limits: crate::runtime::capacity::Limits,
    /// Seconds of the operator's clock (`Context::clock`, the cloud's time) per second of the
    /// controllers' timers: 1 in a cluster; `local`'s `--time-scale`, where the emulated cloud
    /// runs faster. A wait for a deadline in the cloud's time (a capacity plan's `waitFor`)
    /// divides by it, so the deadline is met in either.
    pub cloud_time_scale: f64,
}

impl ControllerConfig {
    /// The timer wait until a deadline `cloud` away in the cloud's time.
    pub fn timer_wait(&self, cloud: Duration) -> Duration {
        if self.cloud_time_scale.is_finite() && self.cloud_time_scale > 0.0 {
            cloud.div_f64(self.cloud_time_scale)
        } else {
            cloud
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            cluster_id: "default".into(),
            namespace: None,
            concurrency: 16,
            default_project: None,
            poll_active: Duration::from_secs(2),
            poll_stable: Duration::from_secs(300),
            poll_capacity: Duration::from_secs(30),
            watch_lists: true,
            poll_watched: Duration::from_secs(300),
            poll_checkpoints: Duration::from_secs(180),
            kueue: false,
            kueue_default_queue: None,
            create_limits: crate::runtime::capacity::Limits::default(),
            cloud_time_scale: 1.0,
        }
    }
}
