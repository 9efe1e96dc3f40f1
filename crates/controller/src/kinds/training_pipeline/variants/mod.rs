//! Variants collide silently no more: a pipeline that has not started waits,
//! `Stalled` with reason `ArtifactsInUse`, while another live pipeline the operator watches writes
//! its model or checkpoint directory ([`claim`] says which and why). The others are read from the
//! controller's own watch cache, never listed: [`Index`] keeps each one's claim and decodes a
//! cached object again only when its `resourceVersion` moved.

pub mod claim;

use std::{collections::HashMap, sync::Mutex};

use kube::{Resource, runtime::reflector::Store};
use tpu_operator_api::{conditions::reasons, training_pipeline::TrainingPipeline};

use crate::{
    governance::tenancy::{self, Policies},
    reconcile::{handles::Kept, kind::Stop},
    runtime::{cloud_watch::Owner, watched::Cached},
};
use claim::Claim;

/// Why `tp` (expanded or not) must wait for another pipeline, if it must. A pipeline that is no
/// longer live wakes the ones that waited for it, so they start now rather than at their next
/// stable poll.
pub fn contention(policies: &Policies, kept: Kept<'_>, tp: &TrainingPipeline) -> Option<Stop> {
    let me = Claim::of(tp)?;
    if !me.live {
        release(kept, &me.uid);
    }
    // Only a pipeline that has not started waits: skip the cache for every other pass.
    if !claim::may_wait(&me) {
        return None;
    }
    let store = kept.shared.get::<Store<Cached<TrainingPipeline>>>()?;
    let index = kept.shared.get_or_default::<Index>();
    let may_write = |other: &Claim| claim_allowed(policies, other);
    let other = index.blocker(&store, &me, may_write)?;
    if let Some(owner) = Owner::of(tp) {
        index.wait_for(&other.uid, owner);
    }
    Some(Stop {
        reason: reasons::ARTIFACTS_IN_USE,
        message: claim::message(&me, &other),
    })
}

/// Whether the policy of `other`'s namespace lets it write the directories it claims. A claim
/// its own policy refuses holds nothing: otherwise one team could point a pipeline its policy
/// refuses at another team's bucket and make every pipeline there wait.
fn claim_allowed(policies: &Policies, other: &Claim) -> bool {
    let req = tenancy::request::Request {
        what: format!("TrainingPipeline {}", other.name),
        storage: other
            .dirs
            .iter()
            .map(|(field, dir)| tenancy::request::Named {
                field: format!("spec.artifacts.{field}"),
                value: format!("{dir}/"),
            })
            .collect(),
        ..Default::default()
    };
    tenancy::check_storage(policies, &other.namespace, &req).is_ok()
}

/// Wakes the pipelines that waited for the one with `uid` (finished or being deleted).
pub fn release(kept: Kept<'_>, uid: &str) {
    let Some(index) = kept.shared.get::<Index>() else {
        return;
    };
    for owner in index.waiters(uid) {
        kept.wake(&owner);
    }
}

/// One pipeline's claim as read at its `resourceVersion`, and the last scan that saw it.
struct Read {
    version: Option<String>,
    /// `None`: the pipeline is finished or did not decode; either way it claims nothing.
    claim: Option<Claim>,
    scan: u64,
}

/// The claims of the watched pipelines, by UID, and who waits for whom.
#[derive(Default)]
pub struct Index {
    claims: Mutex<Claims>,
    /// By the UID of the pipeline waited for: the pipelines waiting (each once).
    waiting: Mutex<HashMap<String, Vec<Owner>>>,
}

#[derive(Default)]
struct Claims {
    /// By UID. foldhash rather than SipHash: every pass of a pipeline that has not started looks
    /// up every watched pipeline here (2,000 lookups a pass at N = 10,000), and these keys come
    /// from the API server, not from a tenant who could choose them to collide.
    by_uid: HashMap<String, Read, foldhash::fast::RandomState>,
    /// Counts scans, so that one scan can tell what it did not see without a set of its own.
    scans: u64,
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
    /// claims up to date first, and forgets the pipelines no longer there. A pipeline whose
    /// `resourceVersion` did not move costs one lookup: no decoding, no allocation.
    fn blocker(
        &self,
        store: &Store<Cached<TrainingPipeline>>,
        me: &Claim,
        may_write: impl Fn(&Claim) -> bool,
    ) -> Option<Claim> {
        let objects = store.state();
        let mut index = self.claims.lock().expect("pipeline claims poisoned");
        index.scans += 1;
        let scan = index.scans;
        let mut seen = 0;
        for cached in &objects {
            let Some(uid) = cached.meta().uid.as_deref() else {
                continue;
            };
            let version = cached.meta().resource_version.as_deref();
            let read = |cached: &Cached<TrainingPipeline>| Read {
                version: version.map(str::to_owned),
                // A cached object that does not decode holds nothing we can compare; a finished
                // one holds nothing any more (most of them, once converged: keep no claim).
                claim: cached
                    .decode()
                    .ok()
                    .as_ref()
                    .and_then(Claim::of)
                    .filter(|c| c.live),
                scan,
            };
            match index.by_uid.get_mut(uid) {
                Some(entry) if version.is_some() && entry.version.as_deref() == version => entry.scan = scan,
                Some(entry) => *entry = read(cached),
                None => {
                    index.by_uid.insert(uid.to_owned(), read(cached));
                }
            }
            seen += 1;
        }
        let gone = seen < index.by_uid.len();
        if gone {
            index.by_uid.retain(|_, read| read.scan == scan);
        }
        // The policy is asked only about claims that collide with `me`: building its request
        // allocates, and every other pipeline in the cache is looked at here on each pass.
        let claims = index
            .by_uid
            .values()
            .filter_map(|read| read.claim.as_ref())
            .filter(|c| claim::overlap(me, c).is_some() && may_write(c));
        let blocker = claim::blocker(me, claims).cloned();
        if gone {
            // A pipeline gone from the cache without a last pass (deleted at once) wakes no one:
            // its waiters find it gone at their stable poll.
            let mut waiting = self.waiting.lock().expect("pipeline waiters poisoned");
            waiting.retain(|uid, _| index.by_uid.contains_key(uid));
        }
        blocker
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod index_tests;
