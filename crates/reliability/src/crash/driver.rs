//! The driver of a run's phases: the clock advances until a phase is done, and the operator is
//! killed (and a fresh one started) at random kill points along the way.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use rand::{Rng, rngs::StdRng};

use super::{CrashConfig, STEP, TICK, describe, dump};
use crate::{
    invariants::{self, Expected, Violations},
    world::{Snapshot, World},
};

pub(super) struct Run<'a> {
    pub(super) world: &'a mut World,
    pub(super) rng: StdRng,
    pub(super) cfg: CrashConfig,
    pub(super) expected: Expected,
    pub(super) kills: u32,
    pub(super) violations: Violations,
    pub(super) duplicates: usize,
    /// Every distinct "two rungs alive" finding so far (one finding lasting many ticks is one).
    pub(super) two_rungs: BTreeSet<String>,
    /// Every request seen alive so far, by slice uid.
    pub(super) seen: BTreeMap<String, BTreeSet<String>>,
    /// Cloud time per driver tick: [`super::STEP`], or zero while a step holds the clock still.
    pub(super) step: Duration,
    /// What the maintenance step saw, if the run had one.
    pub(super) maintenance: Option<super::MaintenanceSeen>,
    /// What the multislice step saw, if the run had one.
    pub(super) multislice: Option<super::MultisliceSeen>,
    /// Every distinct duplicate-slice finding so far (a multislice slice with two queued
    /// resources not being deleted), counted once however many ticks it lasts.
    pub(super) duplicate_slices: BTreeSet<String>,
}

impl<'a> Run<'a> {
    /// A run before its first phase: no kills, nothing found, the cloud clock stepping [`STEP`].
    pub(super) fn new(world: &'a mut World, rng: StdRng, cfg: CrashConfig, expected: Expected) -> Self {
        Run {
            world,
            rng,
            cfg,
            expected,
            kills: 0,
            violations: Violations::default(),
            duplicates: 0,
            two_rungs: Default::default(),
            seen: Default::default(),
            step: STEP,
            maintenance: None,
            multislice: None,
            duplicate_slices: Default::default(),
        }
    }

    fn kill_point(&mut self) -> KillPoint {
        if self.rng.random_bool(0.7) {
            KillPoint::Calls(self.world.gcp_calls() + self.rng.random_range(1..=self.cfg.max_gap))
        } else {
            KillPoint::At(Instant::now() + Duration::from_millis(self.rng.random_range(0..300)))
        }
    }

    /// Records any slice with requests alive on two rungs now (`when`: where in the run), and any
    /// multislice slice with two queued resources not being deleted (a duplicate).
    pub(super) fn look_for_two_rungs(&mut self, when: &str) {
        for v in invariants::duplicate_slices(&self.world.gcp).0 {
            if self.duplicate_slices.insert(v.clone()) {
                self.duplicates += 1;
                self.violations.push(format!("{when}: {v}"));
            }
        }
        let alive = invariants::requests_alive(&self.world.gcp);
        for (uid, requests) in &alive {
            self.seen
                .entry(uid.clone())
                .or_default()
                .extend(requests.iter().cloned());
        }
        for v in invariants::two_or_more(alive).0 {
            if self.two_rungs.insert(v.clone()) {
                self.violations.push(format!("{when}: {v}"));
            }
        }
    }

    /// A kill point reached: the operator killed a few milliseconds on, the cloud checked for
    /// two rungs alive and for duplicates while no operator runs, and a fresh operator started.
    async fn kill_and_restart(&mut self, name: &str) {
        let jitter = self.rng.random_range(0..3);
        tokio::time::sleep(Duration::from_millis(jitter)).await;
        self.world.kill_operator().await;
        self.kills += 1;
        self.look_for_two_rungs(&format!("{name}, after kill {}", self.kills));
        let jobs = !self.cfg.vertex_faults;
        let dup = invariants::live_duplicates_of(&self.world.gcp, jobs);
        let dup2 = invariants::duplicate_creates(&self.world.gcp, self.expected);
        self.duplicates += dup.0.len() + dup2.0.len();
        for v in dup.0.into_iter().chain(dup2.0) {
            self.violations
                .push(format!("{name}, after kill {}: {v}", self.kills));
        }
        self.world.start_operator().await;
    }

    /// Drives the clock until `done` holds, killing and restarting the operator `kills` times.
    /// Returns the last snapshot, or `None` when the phase did not finish in time (recorded).
    pub(super) async fn phase(
        &mut self,
        name: &str,
        kills: u32,
        mut done: impl FnMut(&Snapshot) -> bool,
    ) -> Option<Snapshot> {
        let mut left = kills;
        let mut point = (left > 0).then(|| self.kill_point());
        let deadline = Instant::now() + self.cfg.phase_limit;
        loop {
            let due = match point {
                Some(KillPoint::Calls(k)) => self.world.gcp_calls() >= k,
                Some(KillPoint::At(t)) => Instant::now() >= t,
                None => false,
            };
            if due {
                self.kill_and_restart(name).await;
                left -= 1;
                point = (left > 0).then(|| self.kill_point());
            }
            // Every tick (15 s of cloud time), not only at kills: the promise is "at no moment".
            self.look_for_two_rungs(name);
            let snap = self.world.snapshot().await;
            if done(&snap) {
                return Some(snap);
            }
            if Instant::now() > deadline {
                let ended = self.world.ended_controllers();
                if !ended.is_empty() {
                    self.violations
                        .push(format!("{name}: controller tasks {ended:?} ended on their own"));
                }
                self.violations.push(format!(
                    "{name}: not done within {:?}; {}",
                    self.cfg.phase_limit,
                    describe(&snap)
                ));
                if std::env::var_os("RELIABILITY_DUMP").is_some() {
                    eprintln!("{}", dump(self.world));
                    for p in &snap.pipelines {
                        eprintln!("pipeline status: {:#?}", p.status);
                    }
                }
                return None;
            }
            self.world.advance(self.step);
            tokio::time::sleep(TICK).await;
        }
    }
}

enum KillPoint {
    Calls(u64),
    At(Instant),
}
