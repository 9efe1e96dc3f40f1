//! Waiting on objects in a [`TestEnv`]: poll the API server, and between polls advance the cloud
//! clock so the emulated resources' state machines move on. A limit in real time turns a hang
//! into a failure that shows the last object seen; it is never the figure under test.
//!
//! Every wait here is [`until`] underneath: a test that waits for something of its own (a call
//! made, a node patched, a count reached) uses [`TestEnv::until`] rather than a deadline of its
//! own, so a busy machine only makes it slower, never makes it fail.

use std::{fmt::Debug, time::Duration};

use crate::{NamespacedObject, TestEnv};

/// How long a wait may take in real time. Only a failing test ever waits this long, so the limit
/// is generous where the machine is slow for reasons outside the test: the real control plane
/// shares two cores with etcd, kube-controller-manager and parallel tests (60 s timed out there
/// under load), and a four-slice multislice beside two other builds timed out at 60 s against
/// kube-emulator too. `TPU_OPERATOR_E2E_WAIT_SECS` overrides both. Harnesses without a
/// [`TestEnv`] (the reliability suites' `World`, on kube-emulator) bound their waits by
/// `wait_limit(false)`.
pub fn wait_limit(real_server: bool) -> Duration {
    let default = if real_server { 240 } else { 120 };
    let secs = std::env::var("TPU_OPERATOR_E2E_WAIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

/// What one poll of [`until`] found: done (with a value), or not yet (with what to show if the
/// wait times out).
pub trait Done {
    type Value;
    type Seen: Debug;
    fn done(self) -> Result<Self::Value, Self::Seen>;
}

/// A condition: done when it holds.
impl Done for bool {
    type Value = ();
    type Seen = &'static str;
    fn done(self) -> Result<(), &'static str> {
        if self { Ok(()) } else { Err("not yet") }
    }
}

/// Something found: done when it is there.
impl<T> Done for Option<T> {
    type Value = T;
    type Seen = &'static str;
    fn done(self) -> Result<T, &'static str> {
        self.ok_or("not found yet")
    }
}

/// Done with `Ok`; `Err` says what was seen instead (shown if the wait times out).
impl<T, E: Debug> Done for Result<T, E> {
    type Value = T;
    type Seen = E;
    fn done(self) -> Result<T, E> {
        self
    }
}

/// Polls `check` every 10 ms of real time until it is done, calling `between` before each next
/// poll (e.g. to move the cloud clock on), and returns its value. After `limit` of real time
/// without it, panics with `what` and what the last poll saw: a hang, not a slow machine, since
/// `limit` is the suite's [`wait_limit`]. A `check` may assert what must hold all along (it
/// panics at once when that breaks).
pub async fn until<D: Done>(
    what: &str,
    limit: Duration,
    mut between: impl FnMut(),
    mut check: impl AsyncFnMut() -> D,
) -> D::Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = match check().await.done() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {seen:#?}"
        );
        between();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reconciles of `kind` that the controllers on `ctx` have started so far ([`TestEnv::passes`]
/// for a context a test built itself).
pub fn passes(ctx: &tpu_operator_controller::Context, kind: &'static str) -> u64 {
    let labels = tpu_operator_controller::runtime::metrics::KindLabels { kind };
    ctx.metrics.reconciles.get_or_create(&labels).get()
}

impl TestEnv {
    /// The real time a wait of this env allows before failing ([`wait_limit`]).
    pub fn wait_limit(&self) -> Duration {
        self.wait_limit
    }

    /// [`until`] with this env's limit, advancing the emulator clock by `step` between polls
    /// (`Duration::ZERO`: the clock stands still). What a test waits for of its own (a call
    /// made, a node patched) is bounded by the suite's hang limit, not by a figure of real time.
    pub async fn until<D: Done>(
        &self,
        what: &str,
        step: Duration,
        check: impl AsyncFnMut() -> D,
    ) -> D::Value {
        let clock = self.gcp.clock();
        until(what, self.wait_limit, || clock.advance(step), check).await
    }

    /// Polls `name` until `pred` holds, advancing the emulator clock by `step` between polls, so
    /// cloud state machines progress. Panics with the last seen object after [`wait_limit`].
    pub async fn wait_for<K: NamespacedObject, F>(&self, name: &str, what: &str, step: Duration, pred: F) -> K
    where
        F: Fn(&K) -> bool,
    {
        self.wait_for_in(&self.ns, name, what, step, pred).await
    }

    /// [`Self::wait_for`] for an object of namespace `ns` (another team's, in the tenancy suites).
    pub async fn wait_for_in<K: NamespacedObject, F>(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        step: Duration,
        pred: F,
    ) -> K
    where
        F: Fn(&K) -> bool,
    {
        let api = kube::Api::<K>::namespaced(self.client.clone(), ns);
        self.until(what, step, async || {
            match api.get_opt(name).await.expect("get object") {
                Some(obj) if pred(&obj) => Ok(obj),
                last => Err(last),
            }
        })
        .await
    }

    /// Polls the Events about `regarding` until one has `reason`, and returns all of them then.
    /// Controllers publish a transition's Events after its status write, so a test that saw the
    /// status must wait for the Event rather than list once. Advances the clock like `wait_for`.
    pub async fn wait_for_event(
        &self,
        regarding: &str,
        reason: &str,
        step: Duration,
    ) -> Vec<k8s_openapi::api::events::v1::Event> {
        let api = self.api::<k8s_openapi::api::events::v1::Event>();
        let what = format!("a {reason} event about {regarding}");
        self.until(&what, step, async || {
            let events: Vec<_> = api
                .list(&Default::default())
                .await
                .expect("list events")
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
                .collect();
            if events.iter().any(|e| e.reason.as_deref() == Some(reason)) {
                return Ok(events);
            }
            let seen: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
            Err(seen)
        })
        .await
    }

    /// Polls until the object is gone (finalizers done), advancing the clock like `wait_for`.
    pub async fn wait_gone<K: NamespacedObject>(&self, name: &str, step: Duration) {
        let api = self.api::<K>();
        let what = format!("deletion of {name}");
        self.until(&what, step, async || {
            match api.get_opt(name).await.expect("get object") {
                None => Ok(()),
                Some(obj) => Err(obj),
            }
        })
        .await
    }

    /// Reconciles of `kind` (as the metrics name it: "TpuSlice", "TrainingPipeline", ...) that
    /// the controllers on [`Self::ctx`] have started so far.
    pub fn passes(&self, kind: &'static str) -> u64 {
        passes(&self.ctx, kind)
    }

    /// A "nothing else happens" window measured in emulated time and passes, not real time:
    /// moves the cloud clock on by `cloud` in steps of `step` (one per 10 ms poll), then, with
    /// the clock still, waits until the controllers on [`Self::ctx`] have started `passes` more
    /// reconciles of `kind`. A busy machine makes it take longer, never hold less (a stretch of
    /// real time, as [`Self::idle`], holds fewer steps and passes there). For one object of
    /// `kind`, whose passes run one at a time, all but the last of them saw the clock where it
    /// stopped. The wait limit bounds it: the object must be one that polls.
    pub async fn idle_passes(&self, kind: &'static str, cloud: Duration, step: Duration, passes: u64) {
        assert!(!step.is_zero() || cloud.is_zero(), "steps of zero move no clock");
        let clock = self.gcp.clock();
        let mut left = cloud;
        while !left.is_zero() {
            let step = step.min(left);
            clock.advance(step);
            left -= step;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let from = self.passes(kind);
        let what = format!("{passes} more passes of {kind}");
        self.until(&what, Duration::ZERO, async || {
            let ran = self.passes(kind) - from;
            if ran >= passes { Ok(()) } else { Err(ran) }
        })
        .await
    }

    /// Lets the controllers run for `real` time while the cloud clock advances, e.g. to check
    /// that nothing else happens after convergence (see [`Self::idle_passes`] for a window a
    /// busy machine does not shorten).
    pub async fn idle(&self, real: Duration, step: Duration) {
        let end = tokio::time::Instant::now() + real;
        while tokio::time::Instant::now() < end {
            self.gcp.clock().advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
