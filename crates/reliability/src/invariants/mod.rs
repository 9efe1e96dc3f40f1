//! The promises, as checks over the emulators' state and the gcp-emulator's call log.
//!
//! * At-most-once creates: the call log's successful creates, by the id the operator chose
//!   (`nodeId`, `queuedResourceId`, `batchId`; for Compute Engine inserts, whose names travel in
//!   the body, the `requestId`, one per slice incarnation) or, for Vertex (server-chosen ids), by
//!   count, never exceed what the objects of a run may own; and at no moment do two live
//!   resources carry one object's `tpu-operator-uid` label (per attempt for batches and jobs; on
//!   Compute Engine, instances made directly plus MIGs, a MIG counted by its template's label,
//!   and more than one resize request per MIG).
//! * One request alive per slice: never two incarnations (with `spec.capacityPlan`, two rungs)
//!   asking at once, a queued resource and the nodes it made counting as one request.
//! * No leaks: once every object is deleted, nothing of ours is left in the emulator (TPU API,
//!   Dataproc, Vertex, and Compute Engine instances, instance templates, resource policies, MIGs
//!   and resize requests).
//! * No stuck finalizers: every deleted object goes away.
//! * Status consistent with the cloud: a Ready/Succeeded status names a resource that exists in
//!   that state, and every live resource is the one its object's status names.

mod creates;
mod deletion;
mod live;
mod rungs;
mod status;

use kube::ResourceExt;
use serde_json::Value;
use tpu_operator_api::{
    preprocess_batch::PreprocessBatchPhase, tpu_slice::TpuSlicePhase,
    training_pipeline::TrainingPipelinePhase,
};

use crate::world::Snapshot;

pub use creates::{Created, SliceWrites, created, duplicate_creates, slice_writes};
pub use deletion::{billable, leftovers, stuck};
pub use live::{duplicate_slices, live_duplicates, live_duplicates_of};
pub use rungs::{requests_alive, two_or_more, two_rungs};
pub use status::status_consistent;

pub use tpu_operator_api::{naming::labels::UID as UID_LABEL, training_pipeline::ATTEMPT_LABEL};

/// A list of broken promises (empty = all kept).
#[derive(Clone, Debug, Default)]
pub struct Violations(pub Vec<String>);

impl Violations {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn extend(&mut self, other: Violations) {
        self.0.extend(other.0);
    }
    pub fn push(&mut self, v: String) {
        self.0.push(v);
    }
}

impl std::fmt::Display for Violations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for v in &self.0 {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

/// The most cloud resources the objects of a run may create (no preemptions, no failed attempts).
#[derive(Clone, Copy, Debug, Default)]
pub struct Expected {
    pub nodes: usize,
    pub queued: usize,
    pub batches: usize,
    pub jobs: usize,
    /// Compute Engine instances inserted directly (single-host slices).
    pub instances: usize,
    /// Compute Engine managed instance groups (multi-host and flex-start slices).
    pub groups: usize,
    /// Compute Engine MIG resize requests (flex-start slices).
    pub resize_requests: usize,
}

/// The MIG an instance was made by (its `created-by` metadata), `None` for one inserted
/// directly.
fn created_by(instance: &Value) -> Option<&str> {
    instance["metadata"]["items"]
        .as_array()?
        .iter()
        .find(|i| i["key"] == "created-by")
        .and_then(|i| i["value"].as_str())
}

/// Multislice: the slice a queued resource or node id names (`<id>-s<k>`, `<id>-s<k>r<n>` once
/// replaced `n` times), `None` for a plain slice's (whose id ends in its hex hash or `r<n>`).
pub fn slice_index(name: &str) -> Option<u32> {
    let last = short(name).rsplit('-').next()?;
    let rest = last.strip_prefix('s')?;
    let (k, restart) = match rest.split_once('r') {
        Some((k, n)) => (k, Some(n)),
        None => (rest, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(k) || restart.is_some_and(|n| !digits(n)) {
        return None;
    }
    k.parse().ok()
}

/// What one request is counted under: its object's UID, and for a multislice the slice too (each
/// slice is one request of its own).
fn slice_key(uid: &str, name: &str) -> String {
    match slice_index(name) {
        Some(k) => format!("{uid} slice {k}"),
        None => uid.to_owned(),
    }
}

/// A multislice's queued resource or node being deleted: a lost slice's is deleted while its
/// replacement is asked for (they never both hold capacity), so it does not count as alive.
/// A plain slice's always counts: its old incarnation must be gone before the next is asked.
fn slice_going(r: &Value) -> bool {
    let name = r["name"].as_str().unwrap_or("");
    let state = r["state"]["state"].as_str().or(r["state"].as_str());
    slice_index(name).is_some() && state == Some("DELETING")
}

fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

fn label<'a>(r: &'a Value, key: &str) -> Option<&'a str> {
    r["labels"][key].as_str()
}

fn state(r: &Value) -> &str {
    r["state"].as_str().unwrap_or("")
}

const TERMINAL_BATCH: [&str; 3] = ["SUCCEEDED", "FAILED", "CANCELLED"];
const TERMINAL_JOB: [&str; 4] = [
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
];

/// Converged: every slice of its own Ready, every batch and pipeline Succeeded (a pipeline's
/// training slice is the pipeline's business: it may be released once training is done).
pub fn converged(snapshot: &Snapshot, want: usize) -> bool {
    snapshot.len() >= want
        && snapshot
            .slices
            .iter()
            .filter(|s| s.owner_references().is_empty())
            .all(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|st| st.phase == TpuSlicePhase::Ready)
            })
        && snapshot.batches.iter().all(|b| {
            b.status
                .as_ref()
                .is_some_and(|st| st.phase == PreprocessBatchPhase::Succeeded)
        })
        && snapshot.pipelines.iter().all(|p| {
            p.status
                .as_ref()
                .is_some_and(|st| st.phase == TrainingPipelinePhase::Succeeded)
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_multislice_id_names_its_slice_and_a_plain_one_none() {
        let at = "projects/p/locations/z/queuedResources/";
        assert_eq!(slice_index(&format!("{at}default-s-0a1b2c3d-s0")), Some(0));
        assert_eq!(slice_index("default-s-0a1b2c3d-s3r1"), Some(3));
        assert_eq!(slice_index("default-s-0a1b2c3d-r2-s12r10"), Some(12));
        // A plain slice's id ends in its hash or its recreation; the object's own name may
        // end in `-s` too.
        for plain in [
            "default-s-0a1b2c3d",
            "default-s-0a1b2c3d-r1",
            "default-s",
            "x-s1q",
            "x-sr1",
            "x-s1r",
        ] {
            assert_eq!(slice_index(plain), None, "{plain}");
        }
    }

    #[test]
    fn only_a_multislice_resource_being_deleted_is_going() {
        let deleting = |name: &str| json!({"name": name, "state": {"state": "DELETING"}});
        assert!(slice_going(&deleting("q-0a1b2c3d-s1")));
        assert!(slice_going(
            &json!({"name": "n-0a1b2c3d-s1r1", "state": "DELETING"})
        ));
        assert!(
            !slice_going(&deleting("q-0a1b2c3d")),
            "a plain slice's still counts"
        );
        assert!(!slice_going(
            &json!({"name": "q-0a1b2c3d-s1", "state": {"state": "SUSPENDED"}})
        ));
        assert_eq!(slice_key("u", "q-0a1b2c3d-s2r1"), "u slice 2");
        assert_eq!(slice_key("u", "q-0a1b2c3d-r1"), "u");
    }
}
