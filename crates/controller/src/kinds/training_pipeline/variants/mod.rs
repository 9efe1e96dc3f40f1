//! Variants collide silently no more (issue 35 item 5): a pipeline that has not started waits,
//! `Stalled` with reason `ArtifactsInUse`, while another live pipeline the operator watches writes
//! its model or checkpoint directory ([`claim`] says which and why). The others are read from the
//! controller's own watch cache, never listed: [`Index`] keeps each one's claim and decodes a
//! cached object again only when its `resourceVersion` moved.

pub mod claim;

use std::{collections::HashMap, sync::Mutex};

use kube::{Resource, ResourceExt, runtime::reflector::Store};
use tpu_operator_api::{conditions::reasons, training_pipeline::TrainingPipeline};

use crate::{
    reconcile::{context::Context, kind::Stop},
    runtime::{cloud_watch::Owner, watched::Cached},
};
use claim::Claim;

/// Why `tp` (expanded or not) must wait for another pipeline, if it must. A pipeline that is no
/// longer live wakes the ones that waited for it, so they start now rather than at their next
/// stable poll.
pub fn contention(ctx: &Context, tp: &TrainingPipeline) -> Option<Stop> {
    let me = Claim::of(tp)?;
    if !me.live {
        release(ctx, &me.uid);
    }
    // Only a pipeline that has not started waits: skip the cache for every other pass.
    if !claim::may_wait(&me) {
        return None;
    }
    let store = ctx.shared.get::<Store<Cached<TrainingPipeline>>>()?;
    let index = ctx.shared.get_or_default::<Index>();
    let other = index.blocker(&store, &me)?;
    if let Some(owner) = Owner::of(tp) {
        index.wait_for(&other.uid, owner);
    }
    Some(Stop {
        reason: reasons::ARTIFACTS_IN_USE,
        message: claim::message(&me, &other),
    })
}

/// Wakes the pipelines that waited for the one with `uid` (finished or being deleted).
pub fn release(ctx: &Context, uid: &str) {
    let Some(index) = ctx.shared.get::<Index>() else {
        return;
    };
    for owner in index.waiters(uid) {
        ctx.cloud_watch.wake_owner(&owner);
    }
}

/// One pipeline's claim as read at its `resourceVersion` (`None`: it did not decode).
type Read = (Option<String>, Option<Claim>);

/// The claims of the watched pipelines, by UID, and who waits for whom.
#[derive(Default)]
pub struct Index {
    claims: Mutex<HashMap<String, Read>>,
    /// By the UID of the pipeline waited for: the pipelines waiting (each once).
    waiting: Mutex<HashMap<String, Vec<Owner>>>,
}

impl Index {
    /// Records that `owner` waits for the pipeline with UID `uid`.
    fn wait_for(&self, uid: &str, owner: Owner) {
        let mut waiting = self.waiting.lock().expect("pipeline waiters poisoned");
        let list = waiting.entry(uid.to_string()).or_default();
        if !list.iter().any(|o| o.same(&owner)) {
            list.push(owner);
        }
    }

    /// Takes the pipelines waiting for the one with UID `uid`.
    fn waiters(&self, uid: &str) -> Vec<Owner> {
        let mut waiting = self.waiting.lock().expect("pipeline waiters poisoned");
        waiting.remove(uid).unwrap_or_default()
    }

    /// The pipeline `me` waits for ([`claim::blocker`]) among those in `store` now. Brings the
    /// claims up to date first, and forgets the pipelines no longer there.
    fn blocker(&self, store: &Store<Cached<TrainingPipeline>>, me: &Claim) -> Option<Claim> {
        let objects = store.state();
        let mut index = self.claims.lock().expect("pipeline claims poisoned");
        let mut seen = std::collections::HashSet::with_capacity(objects.len());
        for cached in &objects {
            let Some(uid) = cached.uid() else { continue };
            let version = cached.meta().resource_version.clone();
            let entry = index.entry(uid.clone()).or_insert((None, None));
            if entry.0.is_none() || entry.0 != version {
                // A cached object that does not decode holds nothing we can compare; a finished
                // one holds nothing any more (most of them, once converged: keep no claim).
                let decoded = cached.decode().ok();
                let claim = decoded.as_ref().and_then(Claim::of).filter(|c| c.live);
                *entry = (version, claim);
            }
            seen.insert(uid);
        }
        index.retain(|uid, _| seen.contains(uid));
        let blocker = claim::blocker(me, index.values().filter_map(|(_, c)| c.as_ref())).cloned();
        drop(index);
        // A pipeline gone from the cache without a last pass (deleted at once) wakes no one:
        // its waiters find it gone at their stable poll.
        let mut waiting = self.waiting.lock().expect("pipeline waiters poisoned");
        waiting.retain(|uid, _| seen.contains(uid));
        blocker
    }
}
