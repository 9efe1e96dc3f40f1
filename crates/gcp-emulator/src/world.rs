//! The emulated cloud's whole state behind one lock, and the timer queue that drives every state
//! machine. Transitions are evaluated lazily: before (and after) each request the world is
//! "ticked" to the clock's now, firing due timers in time order, each at its own due time, so a
//! manual clock gives fully deterministic histories.

use crate::calls::CallLog;
use crate::config::Config;
use crate::dataproc::batches::BatchRec;
use crate::faults::Faults;
use crate::lro::OpRec;
use crate::storage::Bucket;
use crate::tpu::nodes::NodeRec;
use crate::tpu::queued::QrRec;
use crate::vertex::jobs::JobRec;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a timer drives; the key names the resource (or operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    Node,
    NodeWorkload,
    NodeUpdateOp,
    QueuedResource,
    Batch,
    Job,
    /// Compute Engine; the key says which resource and step (`compute::fire`).
    Compute,
}

pub struct World {
    pub cfg: Config,
    /// Emulated time of the transition or request being processed.
    pub now: DateTime<Utc>,
    seq: u64,
    timers: BTreeSet<(DateTime<Utc>, u64, TimerKind, String)>,
    pub nodes: BTreeMap<String, NodeRec>,
    pub qrs: BTreeMap<String, QrRec>,
    /// TPU reservations: full name -> chips (`tpu/reservations.rs`).
    pub reservations: BTreeMap<String, u64>,
    pub batches: BTreeMap<String, BatchRec>,
    pub jobs: BTreeMap<String, JobRec>,
    /// Compute Engine instances, templates, policies, MIGs, resize requests and operations.
    pub compute: crate::compute::ComputeState,
    pub ops: BTreeMap<String, OpRec>,
    /// `service|parent|requestId` -> operation name, for idempotent replays.
    pub request_ids: HashMap<String, String>,
    pub buckets: BTreeMap<String, Bucket>,
    pub faults: Faults,
    pub calls: CallLog,
    /// Project ids seen in requests (to map project numbers back to ids).
    pub projects: BTreeSet<String>,
}

impl World {
    pub fn new(cfg: Config, now: DateTime<Utc>) -> Self {
        World {
            cfg,
            now,
            seq: 0,
            timers: BTreeSet::new(),
            nodes: BTreeMap::new(),
            qrs: BTreeMap::new(),
            reservations: BTreeMap::new(),
            batches: BTreeMap::new(),
            jobs: BTreeMap::new(),
            compute: Default::default(),
            ops: BTreeMap::new(),
            request_ids: HashMap::new(),
            buckets: BTreeMap::new(),
            faults: Faults::default(),
            calls: CallLog::default(),
            projects: BTreeSet::new(),
        }
    }

    /// Forgets every resource, operation, fault and call (configuration is kept).
    pub fn reset(&mut self) {
        let cfg = self.cfg.clone();
        *self = World::new(cfg, self.now);
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

    /// Fires every timer due at or before `now`, in time order.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        while let Some((at, _, _, _)) = self.timers.first() {
            if *at > now {
                break;
            }
            let (at, seq, kind, key) = self.timers.pop_first().expect("checked non-empty");
            if at > self.now {
                self.now = at;
            }
            match kind {
                TimerKind::Node => crate::tpu::nodes::fire(self, seq, &key),
                TimerKind::NodeWorkload => crate::tpu::nodes::fire_workload(self, seq, &key),
                TimerKind::NodeUpdateOp => crate::tpu::nodes::fire_update_op(self, &key),
                TimerKind::QueuedResource => crate::tpu::queued::fire(self, seq, &key),
                TimerKind::Batch => crate::dataproc::batches::fire(self, seq, &key),
                TimerKind::Job => crate::vertex::jobs::fire(self, seq, &key),
                TimerKind::Compute => crate::compute::fire(self, seq, &key),
            }
        }
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
