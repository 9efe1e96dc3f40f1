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
    runtime::watched::Cached,
};
use claim::Claim;

/// Why `tp` (expanded or not) must wait for another pipeline, if it must.
pub fn contention(ctx: &Context, tp: &TrainingPipeline) -> Option<Stop> {
    let me = Claim::of(tp)?;
    // Only a pipeline that has not started waits: skip the cache for every other pass.
    if !claim::may_wait(&me) {
        return None;
    }
    let store = ctx.shared.get::<Store<Cached<TrainingPipeline>>>()?;
    let others = ctx.shared.get_or_default::<Index>().claims(&store);
    let other = claim::blocker(&me, &others)?;
    Some(Stop {
        reason: reasons::ARTIFACTS_IN_USE,
        message: claim::message(&me, other),
    })
}

/// One pipeline's claim as read at its `resourceVersion` (`None`: it did not decode).
type Read = (Option<String>, Option<Claim>);

/// The claims of the watched pipelines, by UID.
#[derive(Default)]
pub struct Index(Mutex<HashMap<String, Read>>);

impl Index {
    /// The claims of every pipeline in `store` now; forgets the ones no longer there.
    pub fn claims(&self, store: &Store<Cached<TrainingPipeline>>) -> Vec<Claim> {
        let objects = store.state();
        let mut index = self.0.lock().expect("pipeline claims poisoned");
        let mut out = Vec::with_capacity(objects.len());
        let mut seen = std::collections::HashSet::with_capacity(objects.len());
        for cached in &objects {
            let Some(uid) = cached.uid() else { continue };
            let version = cached.meta().resource_version.clone();
            let entry = index.entry(uid.clone()).or_insert((None, None));
            if entry.0.is_none() || entry.0 != version {
                // A cached object that does not decode holds nothing we can compare.
                *entry = (version, cached.decode().ok().as_ref().and_then(Claim::of));
            }
            out.extend(entry.1.clone());
            seen.insert(uid);
        }
        index.retain(|uid, _| seen.contains(uid));
        out
    }
}
