//! Objects stalled on a refused cloud call, re-queued within seconds of the fix instead of at
//! their next retry (5 minutes after a permanent error).
//!
//! A missing role or a missing Workload Identity binding is fixed out of band, and nothing in
//! Kubernetes changes when it is: before this, every stalled object waited out its backoff, and
//! "touch the object" was the documented way out. Now each failed pass says what it stalled on
//! ([`Blocker`]: the credentials, or a permission of one service for one identity on one
//! project, bucket or service account), one object per blocker probes it every
//! [`CANARY_INTERVAL`] ([`registry`]), and what shows the fix wakes the others through their
//! controllers' streams, as a cloud-watch wake-up does (their settled entries forgotten, so the
//! woken pass is a full one):
//! * the canary's successful pass, for a permission;
//! * the token source reporting that tokens arrive again ([`StalledOn::listen`]), or the
//!   canary's pass, for credentials.

mod blocker;
mod registry;

use std::{
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
// tokio's clock: the OS's monotonic clock in a cluster, the paused one under `local`.
use tokio::time::Instant;

pub use self::blocker::Blocker;
use self::registry::Registry;
pub use self::registry::{CANARY_INTERVAL, Role};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};

use super::{
    cloud_watch::CloudWatch,
    cloud_watch::Owner,
    error::ReconcileError,
    metrics::{Metrics, WakeLabels},
};

/// Why stalled objects were woken, as the metric's `why` label says it.
const CANARY_PASSED: &str = "canary passed";
const CREDENTIALS_RECOVERED: &str = "credentials recovered";
const HANDED_ON: &str = "probe handed on";

/// The registry of stalled objects and the way to wake them.
pub struct StalledOn {
    registry: Mutex<Registry<Owner>>,
    cloud_watch: Arc<CloudWatch>,
    listening: AtomicBool,
    /// How many objects are stalled now (`tpu_operator_stalled_on_refusal`).
    stalled: Gauge,
    /// Early re-queues by why (`tpu_operator_stall_wakes`).
    wakes: Family<WakeLabels, Counter>,
}

impl StalledOn {
    /// Wakes through `cloud_watch`'s controller streams; counts in `metrics`.
    pub fn new(cloud_watch: Arc<CloudWatch>, metrics: &Metrics) -> Self {
        Self {
            registry: Mutex::default(),
            cloud_watch,
            listening: AtomicBool::new(false),
            stalled: metrics.stalled_on_refusal.clone(),
            wakes: metrics.stall_wakes.clone(),
        }
    }

    /// After a failed pass of `owner`: `Some(CANARY_INTERVAL)` when it is the canary of what
    /// refused it (it retries that soon), `None` when it keeps its backoff. A pass that failed
    /// on anything else leaves the blocker it stalled on before.
    pub fn failed(&self, owner: Option<Owner>, err: &ReconcileError) -> Option<Duration> {
        let owner = owner?;
        let blocker = match err {
            ReconcileError::Gcp { source, .. } => Blocker::of(source),
            _ => None,
        };
        let now = Instant::now();
        let uid = owner.uid().to_string();
        let Some(blocker) = blocker else {
            let woken = self.registry().left(&uid, now);
            self.wake(woken, HANDED_ON);
            return None;
        };
        let (role, woken) = self.registry().stalled(&uid, blocker, owner, now);
        self.wake(woken, HANDED_ON);
        (role == Role::Canary).then_some(CANARY_INTERVAL)
    }

    /// After a successful pass of the object `uid`.
    pub fn passed(&self, uid: &str) {
        let woken = self.registry().passed(uid, Instant::now());
        self.wake(woken, CANARY_PASSED);
    }

    /// The object `uid` is gone.
    pub fn gone(&self, uid: &str) {
        let woken = self.registry().left(uid, Instant::now());
        self.wake(woken, HANDED_ON);
    }

    /// Objects stalled on anything now.
    pub fn len(&self) -> usize {
        self.registry().len()
    }

    /// Whether no object is stalled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every object stalled on credentials each time `recoveries` changes (the token
    /// source reports tokens again), from the first call on (every controller calls it) until
    /// `stalled` or the sender is gone. A wake while no controller runs (between two leader
    /// terms) reaches nobody, which is harmless: a new term's first passes run in full anyway.
    pub fn listen(stalled: &Arc<Self>, mut recoveries: tokio::sync::watch::Receiver<u64>) {
        if stalled.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let stalled: Weak<Self> = Arc::downgrade(stalled);
        tokio::spawn(async move {
            while recoveries.changed().await.is_ok() {
                let Some(stalled) = stalled.upgrade() else {
                    return;
                };
                let woken = stalled.registry().credentials_recovered();
                stalled.wake(woken, CREDENTIALS_RECOVERED);
            }
        });
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry<Owner>> {
        self.registry.lock().expect("stalled-on registry poisoned")
    }

    /// Re-queues `woken`, counting why, and sets the stalled gauge after the registry changed.
    fn wake(&self, woken: Vec<Owner>, why: &'static str) {
        self.stalled.set(i64::try_from(self.len()).unwrap_or(i64::MAX));
        if woken.is_empty() {
            return;
        }
        self.wakes
            .get_or_create(&WakeLabels { why })
            .inc_by(woken.len() as u64);
        tracing::info!(
            objects = woken.len(),
            why,
            "re-queueing objects stalled on a refused cloud call"
        );
        for owner in &woken {
            self.cloud_watch.wake_owner(owner);
        }
    }
}
