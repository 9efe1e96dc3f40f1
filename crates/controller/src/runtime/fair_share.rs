//! Workers shared fairly between namespaces.
//!
//! kube-runtime's controller runs up to `concurrency` reconciles at once, taken from one queue in
//! due order, whatever their namespace. One namespace with a thousand objects due (a burst of
//! creates, a thousand refused objects looking again) could occupy every worker while another
//! namespace's object waited its turn behind them (issue 32). A reconcile first takes a slot of its
//! namespace: a namespace holds at most [`FairShare::limit`] of a controller's workers, so some are
//! always free for the others; a reconcile finding its namespace at the limit does nothing and is
//! requeued a moment later ([`FairShare::wait`]), leaving its worker to the next object in the
//! queue.
//!
//! Objects too large for the watch cache to keep whole ([`crate::runtime::watched::Cached::is_large`])
//! take a second, process-wide slot ([`FairShare::enter_large`]): such a pass reads the object from
//! the API server and holds it, decoded, for the whole pass, several MiB for the largest objects the
//! CRDs admit. Only [`LARGE_AT_ONCE`] run at once, whatever the kind and namespace, so a namespace
//! filling its share of workers with them costs the operator a few of them at a time, not a worker's
//! worth each (issue 47: 224 such slices took the operator past its memory limit).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Passes over large objects that run at once, process-wide: each holds one object of up to
/// etcd's 1.5 MiB (its response body and its decoded copy, several MiB in all).
pub const LARGE_AT_ONCE: usize = 2;

/// Reconciles in flight per (kind, namespace).
#[derive(Debug)]
pub struct FairShare {
    limit: usize,
    in_flight: Arc<Mutex<HashMap<(&'static str, String), usize>>>,
    large: Arc<Semaphore>,
}

/// One reconcile's slot; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    key: (&'static str, String),
    in_flight: Arc<Mutex<HashMap<(&'static str, String), usize>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().expect("fair share poisoned");
        if let Some(n) = in_flight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

impl FairShare {
    /// For controllers of `concurrency` workers each: a namespace may hold three quarters of them
    /// (at least one), so a quarter stays free for every other namespace.
    pub fn new(concurrency: u16) -> Self {
        Self {
            limit: (usize::from(concurrency) * 3 / 4).max(1),
            in_flight: Arc::default(),
            large: Arc::new(Semaphore::new(LARGE_AT_ONCE)),
        }
    }

    /// A slot for a pass over a large object, `None` while [`LARGE_AT_ONCE`] of them run (the
    /// object is requeued after [`FairShare::wait`], as at a namespace's limit).
    pub fn enter_large(&self) -> Option<OwnedSemaphorePermit> {
        self.large.clone().try_acquire_owned().ok()
    }

    /// Reconciles of one kind that one namespace may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot for a reconcile of `kind` in `namespace`, `None` while the namespace holds its
    /// limit.
    pub fn enter(&self, kind: &'static str, namespace: &str) -> Option<Slot> {
        let key = (kind, namespace.to_owned());
        let mut in_flight = self.in_flight.lock().expect("fair share poisoned");
        let n = in_flight.entry(key.clone()).or_default();
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Slot {
            key,
            in_flight: self.in_flight.clone(),
        })
    }

    /// When to look again at an object (`uid`) whose namespace was at its limit at `now`
    /// (milliseconds of the controllers' clock): soon, spread out.
    pub fn wait(uid: &str, now: i64) -> Duration {
        crate::runtime::spread::between(uid, now, Duration::from_millis(200), Duration::from_millis(800))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_objects_pass_a_few_at_a_time_whatever_their_namespace() {
        let share = FairShare::new(16);
        let held: Vec<_> = (0..LARGE_AT_ONCE).map(|_| share.enter_large().unwrap()).collect();
        assert!(share.enter_large().is_none(), "at the limit");
        drop(held);
        assert!(share.enter_large().is_some(), "given back when dropped");
    }

    #[test]
    fn a_namespace_holds_at_most_its_share_and_others_still_enter() {
        let share = FairShare::new(16);
        assert_eq!(share.limit(), 12);
        let held: Vec<Slot> = (0..12)
            .map(|_| share.enter("TpuSlice", "team-a").unwrap())
            .collect();
        assert!(
            share.enter("TpuSlice", "team-a").is_none(),
            "team-a is at its share"
        );
        let b = share.enter("TpuSlice", "team-b");
        assert!(b.is_some(), "another namespace still gets a worker");
        assert!(
            share.enter("TrainingPipeline", "team-a").is_some(),
            "each controller has its own workers"
        );
        drop(held);
        assert!(share.enter("TpuSlice", "team-a").is_some(), "slots come back");
        assert_eq!(
            FairShare::new(1).limit(),
            1,
            "one worker: the namespace may use it"
        );
    }
}
