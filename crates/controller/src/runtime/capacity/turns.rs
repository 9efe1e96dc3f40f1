//! Waking the objects whose turn in the create limiter has come.
//!
//! A waiting object is requeued for its turn, but a requeue counts real time and the turn is
//! in the cloud's time: under `tpu-operator local` or a test's emulator, whose clock runs ahead
//! of the host's, a requeue would bring it back long after its turn. So every controller also
//! looks, every `poll_active` of real time, for its waiters whose turn has come by the cloud's
//! clock, and runs each once, as a watch event would. A waiter woken this way runs a full pass
//! (its settled entry is forgotten, as a cloud watch wake-up does).

use std::{sync::Arc, time::Duration};

use futures::{StreamExt, stream::BoxStream};
use kube::{Resource, runtime::reflector::ObjectRef};

use super::Capacity;
use crate::runtime::{clock::Clock, settled::Settled};

/// The objects of `kind` (`K`'s) to run because their turn has come, looked for every `every`.
pub fn turns<K>(
    capacity: Arc<Capacity>,
    kind: &'static str,
    clock: Arc<dyn Clock>,
    settled: Arc<Settled>,
    every: Duration,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + 'static,
{
    futures::stream::unfold((), move |()| {
        let (capacity, clock, settled) = (capacity.clone(), clock.clone(), settled.clone());
        async move {
            tokio::time::sleep(every).await;
            let due = capacity.due(kind, clock.now());
            let objects: Vec<ObjectRef<K>> = due
                .into_iter()
                .map(|d| {
                    settled.forget_uid(&d.uid);
                    ObjectRef::new(&d.name).within(&d.namespace)
                })
                .collect();
            Some((futures::stream::iter(objects), ()))
        }
    })
    .flatten()
    .boxed()
}
