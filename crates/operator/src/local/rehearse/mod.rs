//! `local --inject`: rehearse what goes wrong in Google Cloud without touching the emulator's API.
//!
//! Each injection is one short word with arguments, parsed at the flag (a bad one is a usage
//! error naming the accepted forms). Stockouts are in place before the controllers start; the
//! others watch the emulated cloud on every progress poll and act when their moment comes, so
//! under the default event clock a rehearsal gives the same result on every run.
//!
//! - `preempt:AFTER` reclaims the first training resource (TPU node or queued resource, Compute
//!   Engine instance, Vertex AI job) that has been running for `AFTER` of emulated time, as Spot
//!   capacity is reclaimed. Only Spot (or preemptible) capacity can be preempted; anything else is
//!   reported and left alone.
//! - `maintenance:AFTER`: Google announces a scheduled maintenance of the first TPU VM node that
//!   has run `AFTER`, its window [`MAINTENANCE_NOTICE`] ahead and [`MAINTENANCE_LASTS`] long, as
//!   the TPU API's `upcomingMaintenance` says it.
//! - `stockout:ZONE:ACCELERATOR[:FOR]`: no TPU capacity for `ACCELERATOR` (a type such as
//!   `v5p-8`, or a family such as `v5p`) in `ZONE`, for `FOR` of emulated time or for the whole
//!   run.
//! - `fail:STAGE[:N]`: the first `N` (default 1) attempts of `STAGE` (`preprocess` or `train`)
//!   fail, as a failing Spark job or training script would.
//! - `full-reservation:projects/P/locations/ZONE/reservations/NAME`: the reservation exists and
//!   all of it is in use, so a queued resource naming it waits (a capacity plan's reserved rung
//!   then waits out its `waitFor`).

mod parse;
mod trainers;

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use gcp_emulator::{Emulator, Fault};

pub use self::parse::{Injection, Stage, parse};
use self::trainers::{Trainer, str_of, trainers};

/// How far ahead `maintenance:AFTER` announces the window: past the default `checkpointLead`
/// (5 minutes), so the checkpoint request is seen before the window.
pub const MAINTENANCE_NOTICE: Duration = Duration::from_secs(6 * 60);
/// How long an injected maintenance lasts.
pub const MAINTENANCE_LASTS: Duration = Duration::from_secs(5 * 60);

/// The injections of one run and what they have done so far.
#[derive(Debug, Default)]
pub struct Rehearsal {
    pending: Vec<Injection>,
    /// When each training resource was first seen running (emulated time).
    running_since: Vec<(String, DateTime<Utc>)>,
    /// Stockouts to lift: (zone, accelerator, when).
    lifts: Vec<(String, String, DateTime<Utc>)>,
    /// Resources already failed or preempted (never twice).
    touched: BTreeSet<String>,
}

impl Rehearsal {
    /// Puts the stockouts and reservations in place now; the rest wait for [`Rehearsal::tick`].
    pub fn start(injections: &[Injection], gcp: &Emulator, now: DateTime<Utc>) -> (Self, Vec<String>) {
        let mut rehearsal = Self::default();
        let mut said = Vec::new();
        for injection in injections {
            if let Injection::FullReservation { name } = injection {
                said.push(match gcp.create_reservation(name, 0) {
                    Ok(()) => format!("inject: reservation {name} exists and is fully in use"),
                    Err(e) => format!("inject: reservation {name} refused: {}", e.message),
                });
                continue;
            }
            let Injection::Stockout {
                zone,
                accelerator,
                lasts,
            } = injection
            else {
                rehearsal.pending.push(injection.clone());
                continue;
            };
            let fault = Fault::Stockout {
                zone: zone.clone(),
                accelerator: accelerator.clone(),
            };
            match gcp.inject(fault) {
                Ok(()) => said.push(format!(
                    "inject: no {accelerator} capacity in {zone}{}",
                    match lasts {
                        Some(d) => format!(" for {}", humantime::format_duration(*d)),
                        None => String::new(),
                    }
                )),
                Err(e) => said.push(format!(
                    "inject: stockout {zone} {accelerator} refused: {}",
                    e.message
                )),
            }
            if let Some(lasts) = lasts {
                let until = now + chrono::Duration::from_std(*lasts).unwrap_or(chrono::Duration::MAX);
                rehearsal.lifts.push((zone.clone(), accelerator.clone(), until));
            }
        }
        (rehearsal, said)
    }

    /// Acts on what is due at `now`; returns one line per thing done.
    pub fn tick(&mut self, gcp: &Emulator, now: DateTime<Utc>) -> Vec<String> {
        let mut said = self.lift_stockouts(gcp, now);
        if self.pending.is_empty() {
            return said;
        }
        let trainers = trainers(gcp);
        for t in trainers.iter().filter(|t| t.running) {
            if !self.running_since.iter().any(|(name, _)| *name == t.name) {
                self.running_since.push((t.name.clone(), now));
            }
        }
        let pending = std::mem::take(&mut self.pending);
        for injection in pending {
            match self.apply(&injection, gcp, &trainers, now) {
                Applied::Later => self.pending.push(injection),
                Applied::Done(line) => said.push(line),
            }
        }
        said
    }

    fn lift_stockouts(&mut self, gcp: &Emulator, now: DateTime<Utc>) -> Vec<String> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.lifts)
            .into_iter()
            .partition(|(_, _, until)| *until <= now);
        self.lifts = later;
        due.into_iter()
            .map(|(zone, accelerator, _)| {
                let lift = Fault::LiftStockout {
                    zone: zone.clone(),
                    accelerator: accelerator.clone(),
                };
                match gcp.inject(lift) {
                    Ok(()) => format!("inject: {accelerator} capacity is back in {zone}"),
                    Err(e) => format!("inject: lifting the stockout in {zone} failed: {}", e.message),
                }
            })
            .collect()
    }

    fn apply(
        &mut self,
        injection: &Injection,
        gcp: &Emulator,
        trainers: &[Trainer],
        now: DateTime<Utc>,
    ) -> Applied {
        match injection {
            Injection::Preempt { after } => self.preempt(*after, gcp, trainers, now),
            Injection::Maintenance { after, reschedulable } => {
                self.maintenance((*after, *reschedulable), gcp, trainers, now)
            }
            Injection::Fail { stage, attempts } => self.fail(*stage, *attempts, gcp, trainers),
            Injection::Stockout { .. } | Injection::FullReservation { .. } => Applied::Later,
        }
    }

    /// The first running training resource, not yet touched, that has run `after` and that
    /// `pick` takes (with what it needs to act on it).
    fn first_due<'a, T>(
        &self,
        after: Duration,
        trainers: &'a [Trainer],
        now: DateTime<Utc>,
        pick: impl Fn(&'a Trainer) -> Option<T>,
    ) -> Option<T> {
        let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
        self.running_since.iter().find_map(|(name, since)| {
            if self.touched.contains(name) || now - *since < after {
                return None;
            }
            pick(trainers.iter().find(|t| t.name == *name && t.running)?)
        })
    }

    fn preempt(
        &mut self,
        after: Duration,
        gcp: &Emulator,
        trainers: &[Trainer],
        now: DateTime<Utc>,
    ) -> Applied {
        let Some((trainer, fault)) = self.first_due(after, trainers, now, |t| Some((t, t.preemption()?)))
        else {
            return Applied::Later;
        };
        let name = trainer.name.clone();
        self.touched.insert(name.clone());
        if !trainer.spot {
            return Applied::Done(format!(
                "inject: {name} is not Spot capacity, so it cannot be preempted (use spot: true / capacity: Spot)"
            ));
        }
        match gcp.inject(fault) {
            Ok(()) => Applied::Done(format!("inject: preempted {name}")),
            Err(e) => Applied::Done(format!("inject: preempting {name} was refused: {}", e.message)),
        }
    }

    /// Announces a maintenance of the first TPU VM node that has run `after` (one Google lets
    /// the customer start earlier when `reschedulable`).
    fn maintenance(
        &mut self,
        (after, reschedulable): (Duration, bool),
        gcp: &Emulator,
        trainers: &[Trainer],
        now: DateTime<Utc>,
    ) -> Applied {
        let Some(trainer) = self.first_due(after, trainers, now, |t| t.is_node().then_some(t)) else {
            return Applied::Later;
        };
        let name = trainer.name.clone();
        self.touched.insert(name.clone());
        let notice = Fault::ScheduleMaintenance {
            name: name.clone(),
            start_in_secs: MAINTENANCE_NOTICE.as_secs(),
            duration_secs: MAINTENANCE_LASTS.as_secs(),
            can_reschedule: reschedulable,
            unscheduled: false,
        };
        let movable = if reschedulable {
            "; Google lets it start earlier"
        } else {
            ""
        };
        let (ahead, lasts) = (
            humantime::format_duration(MAINTENANCE_NOTICE),
            humantime::format_duration(MAINTENANCE_LASTS),
        );
        match gcp.inject(notice) {
            Ok(()) => Applied::Done(format!(
                "inject: Google announced maintenance of {name}: the window starts in {ahead} and lasts {lasts}{movable}"
            )),
            Err(e) => Applied::Done(format!(
                "inject: announcing maintenance of {name} was refused: {}",
                e.message
            )),
        }
    }

    fn fail(&mut self, stage: Stage, attempts: u32, gcp: &Emulator, trainers: &[Trainer]) -> Applied {
        let candidates: Vec<(String, Fault)> = match stage {
            Stage::Preprocess => gcp
                .batches()
                .iter()
                .filter(|b| b["state"] == "RUNNING")
                .map(|b| {
                    let name = str_of(b, "name").to_owned();
                    let fault = Fault::FailBatch {
                        name: name.clone(),
                        message: Some("rehearsal: the Spark job failed (--inject fail:preprocess)".into()),
                    };
                    (name, fault)
                })
                .collect(),
            Stage::Train => trainers
                .iter()
                .filter(|t| t.running)
                .filter_map(|t| Some((t.name.clone(), t.failure()?)))
                .collect(),
        };
        let Some((name, fault)) = candidates.into_iter().find(|(n, _)| !self.touched.contains(n)) else {
            return Applied::Later;
        };
        self.touched.insert(name.clone());
        let line = match gcp.inject(fault) {
            Ok(()) => format!("inject: failed {name}"),
            Err(e) => format!("inject: failing {name} was refused: {}", e.message),
        };
        if attempts > 1 {
            self.pending.push(Injection::Fail {
                stage,
                attempts: attempts - 1,
            });
        }
        Applied::Done(line)
    }
}

enum Applied {
    Later,
    Done(String),
}
