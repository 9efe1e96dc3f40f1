//! What every service of the emulated cloud shares, below the services: emulated time, the timer
//! queue that drives every state machine, sequence numbers, the operations of the three
//! `google.longrunning` services, request ids, faults, the call log and the Cloud Storage object
//! store (simulated workloads write into it). Each service keeps its own resources in its own
//! module and takes a `&mut Cloud` next to them; `world.rs` puts the two together and fires the
//! timers.

use crate::blobs::{self, Bucket};
use crate::calls::CallLog;
use crate::config::Config;
use crate::faults::Faults;
use crate::lro::OpRec;
use crate::store::{RequestIds, Store};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

/// What a timer drives (which service's `fire`); the key names the resource (or operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    Node,
    NodeWorkload,
    NodeUpdateOp,
    /// A TPU node's maintenance event: its window starts, then it ends.
    NodeMaintenance,
    QueuedResource,
    Batch,
    Job,
    /// Compute Engine; the key says which resource and step (`compute::fire`).
    Compute,
}

pub struct Cloud {
    pub cfg: Config,
    /// Emulated time of the transition or request being processed.
    pub now: DateTime<Utc>,
    seq: u64,
    timers: BTreeSet<(DateTime<Utc>, u64, TimerKind, String)>,
    /// TPU, Dataproc and Vertex operations (Compute Engine keeps its own, `compute/operations.rs`).
    pub ops: Store<OpRec>,
    /// `service|parent|requestId` -> operation name, for idempotent replays.
    pub request_ids: RequestIds,
    pub buckets: BTreeMap<String, Bucket>,
    pub faults: Faults,
    /// Per-zone stock and per-project rate quotas (off until configured).
    pub capacity: crate::capacity::Capacity,
    pub calls: CallLog,
    /// Project ids seen in requests (to map project numbers back to ids).
    pub projects: BTreeSet<String>,
    /// Cloud Logging's entries (simulated workloads write into it).
    pub logs: crate::logging::LogStore,
    /// Interruptions of simulated workloads and the checkpoint requests they honoured.
    pub training: crate::training::TrainingLog,
}

impl Cloud {
    pub fn new(cfg: Config, now: DateTime<Utc>) -> Self {
        Cloud {
            cfg,
            now,
            seq: 0,
            timers: BTreeSet::new(),
            ops: Store::default(),
            request_ids: RequestIds::default(),
            buckets: BTreeMap::new(),
            faults: Faults::default(),
            capacity: crate::capacity::Capacity::default(),
            calls: CallLog::default(),
            projects: BTreeSet::new(),
            logs: crate::logging::LogStore::default(),
            training: crate::training::TrainingLog::default(),
        }
    }

    /// A fresh sequence number (ids, timers).
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Schedules a timer and returns its sequence number; the resource stores it, so superseded
    /// timers are recognised and ignored when they fire.
    pub fn schedule(&mut self, at: DateTime<Utc>, kind: TimerKind, key: &str) -> u64 {
        let seq = self.next_seq();
        self.timers.insert((at, seq, kind, key.to_string()));
        seq
    }

    /// Takes the earliest timer due at or before `now` (of `kind` only, if given) and moves the
    /// emulated time up to its due time, so a transition happens at its own instant.
    pub fn next_due(
        &mut self,
        now: DateTime<Utc>,
        kind: Option<TimerKind>,
    ) -> Option<(u64, TimerKind, String)> {
        let due = self
            .timers
            .iter()
            .take_while(|(at, ..)| *at <= now)
            .find(|(_, _, k, _)| kind.is_none_or(|want| *k == want))?
            .clone();
        self.timers.remove(&due);
        let (at, seq, kind, key) = due;
        if at > self.now {
            self.now = at;
        }
        Some((seq, kind, key))
    }

    /// Moves the emulated time up to `now` once no timer is due before it.
    pub fn catch_up(&mut self, now: DateTime<Utc>) {
        if now > self.now {
            self.now = now;
        }
    }

    /// A deterministic UUID-shaped id (stable for a given sequence of requests).
    pub fn uuid(&mut self) -> String {
        let s = self.next_seq();
        let a = s.wrapping_mul(0x9E3779B97F4A7C15) ^ 0x5851F42D4C957F2D;
        let b = s.wrapping_mul(0xD1B54A32D192ED03).rotate_left(17);
        uuid::Uuid::from_u64_pair(a, b).hyphenated().to_string()
    }

    /// The project number for a project id (remembering the id for reverse lookups).
    pub fn project_number(&mut self, project: &str) -> u64 {
        if project.parse::<u64>().is_err() {
            self.projects.insert(project.to_string());
        }
        self.cfg.project_number(project)
    }

    pub fn add(at: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
        at + crate::wire::time::chrono_std(d)
    }
}

impl blobs::Host for Cloud {
    fn now(&self) -> DateTime<Utc> {
        self.now
    }
    fn next_seq(&mut self) -> u64 {
        Cloud::next_seq(self)
    }
    fn project_number(&mut self, project: &str) -> u64 {
        Cloud::project_number(self, project)
    }
    fn buckets(&mut self) -> &mut BTreeMap<String, Bucket> {
        &mut self.buckets
    }
}
