//! What one place's listings found, as the sweeper's listing adds to it ([`super::list`]) and its
//! plan reads it. Data only: no listing here.

use std::collections::{BTreeMap, HashMap};

use tpu_operator_gcp::{ErrorKind, GcpError};

use super::plan::{self, CloudResource, GroupClaim};

/// What a listed TPU node or queued resource runs: its accelerator type (per node), how many
/// nodes, and whether it is spot capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct TpuShape {
    pub accelerator_type: String,
    pub nodes: u32,
    pub spot: bool,
}

/// One place's lists: what they found, and whether each answered.
#[derive(Default)]
pub struct PlaceListing {
    pub resources: Vec<CloudResource>,
    pub claims: Vec<GroupClaim>,
    pub errors: Vec<String>,
    /// A list failed in a way that says nothing of what is there.
    unsure: bool,
    /// The TPU shape of every listed TPU node and queued resource, by name.
    pub tpu: HashMap<String, TpuShape>,
}

impl PlaceListing {
    /// Keeps a listing's answer: `f` adds what it found; a failure is reported (NOT_FOUND: the
    /// place has nothing).
    pub fn keep<T>(&mut self, what: String, r: Result<T, GcpError>, f: impl FnOnce(&mut Self, T)) {
        match r {
            Ok(v) => f(self, v),
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                // INVALID_ARGUMENT: the place itself is not one (a bogus zone): nothing of ours
                // can be there. Reported all the same.
                self.unsure |= e.kind != ErrorKind::InvalidArgument;
                self.errors.push(format!("{what}: {e}"));
            }
        }
    }

    /// Every list answered (NOT_FOUND and INVALID_ARGUMENT say nothing is there): what is not
    /// listed is not there.
    pub(super) fn answered(&self) -> bool {
        !self.unsure
    }

    pub(super) fn quiet(&self, cluster_id: &str) -> bool {
        let ours = |l: &BTreeMap<String, String>| plan::owner_uid(l, cluster_id).is_some();
        !self.unsure
            && !self.resources.iter().any(|r| ours(&r.labels))
            && !self
                .claims
                .iter()
                .flat_map(|c| &c.members)
                .any(|m| ours(&m.labels))
    }
}
