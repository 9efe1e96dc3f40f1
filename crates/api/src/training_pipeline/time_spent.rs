//! Where a pipeline's wall time and estimated dollars went (`status.timeSpent`): queued,
//! provisioning, preprocessing, productive training, training lost to interruptions, suspended
//! and failed attempts. Pure: the controller calls [`TimeSpent::account`] once per status write.
//!
//! How it stays exact across restarts and leader changes: each write credits the time since
//! `accountedThrough` (whole seconds only, the remainder is carried) to the part the *previous*
//! status's phase names, and moves `accountedThrough` by what it credited, in the same write. A
//! pass whose write is lost (a crash, a 409) credited nothing, and the next one credits the same
//! interval once. Dollars follow the pipeline's own estimate: the growth of
//! `estimatedCost.soFarUsd` over the interval goes to the same part.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{StageState, TrainingPipelinePhase as Phase};

/// One part of a run's wall time, and the estimated dollars spent in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeShare {
    /// Wall time in whole seconds.
    #[serde(default)]
    pub seconds: i64,
    /// Estimated US dollars, from the same estimate as `estimatedCost`.
    #[serde(default)]
    pub usd: f64,
}

impl TimeShare {
    fn add(&mut self, other: TimeShare) {
        self.seconds += other.seconds;
        self.usd += other.usd;
    }

    fn take(&mut self, other: TimeShare) {
        self.seconds -= other.seconds;
        self.usd = (self.usd - other.usd).max(0.0);
    }
}

/// What the current attempt has added to each part so far: moved to `failedAttempts` when it
/// fails.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptShares {
    #[serde(default)]
    pub provisioning: TimeShare,
    #[serde(default)]
    pub preprocessing: TimeShare,
    #[serde(default)]
    pub productive: TimeShare,
    #[serde(default)]
    pub lost_to_interruptions: TimeShare,
}

/// Where the run's wall time went, from its first pass to its end; the parts sum to the wall
/// time accounted so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeSpent {
    /// Waiting before it could run: Kueue, the namespace's policy, capacity (a stockout), the
    /// project's create quota.
    #[serde(default)]
    pub queued: TimeShare,
    /// Training capacity being obtained: a slice or queued resource being created, a Vertex
    /// job pending, a lost slice being replaced.
    #[serde(default)]
    pub provisioning: TimeShare,
    /// The preprocessing batch running.
    #[serde(default)]
    pub preprocessing: TimeShare,
    /// Training that counted: run time minus what an interruption threw away.
    #[serde(default)]
    pub productive: TimeShare,
    /// Training redone after an interruption (a preemption, a maintenance, a lost slice): the
    /// time trained since the last checkpoint committed before it.
    #[serde(default)]
    pub lost_to_interruptions: TimeShare,
    /// `spec.suspend` set.
    #[serde(default)]
    pub suspended: TimeShare,
    /// Attempts that failed (their provisioning, preprocessing and training).
    #[serde(default)]
    pub failed_attempts: TimeShare,
    /// Productive training as a share of the wall time, in percent (rounded down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_percent: Option<i32>,
    /// The time up to which the parts are counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounted_through: Option<Time>,
    /// When training last started running (after provisioning, or a resume): an interruption
    /// loses at most what was trained since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_since: Option<Time>,
    /// The current attempt's shares, kept until it ends.
    #[serde(default)]
    pub attempt: AttemptShares,
}

/// Which part a stretch of time belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Queued,
    Provisioning,
    Preprocessing,
    Productive,
    Suspended,
}

impl Part {
    /// The part a pipeline is in, from its phase and its train stage's state; `None` once the
    /// run is over (the clock stops).
    pub fn of(phase: Phase, train: StageState) -> Option<Part> {
        match phase {
            Phase::Pending | Phase::Waiting => Some(Part::Queued),
            Phase::Preprocessing => Some(Part::Preprocessing),
            Phase::Provisioning => Some(Part::Provisioning),
            Phase::Training if train == StageState::Running => Some(Part::Productive),
            Phase::Training => Some(Part::Provisioning),
            Phase::Suspended => Some(Part::Suspended),
            Phase::Succeeded | Phase::Failed | Phase::Deleting => None,
        }
    }
}

/// What one status write tells [`TimeSpent::account`].
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// The part the previous status named (the time since it was written was spent there).
    pub was: Option<Part>,
    /// The part the new status names.
    pub is: Option<Part>,
    /// Now, in milliseconds since the epoch.
    pub now_ms: i64,
    /// `estimatedCost.soFarUsd` grew by this much since the previous status.
    pub spent_usd: f64,
    /// A training interruption was noticed in this write; the value is the time (ms) of the
    /// newest checkpoint committed before it, if any.
    pub interrupted: Option<Option<i64>>,
    /// The current attempt ended failed in this write (a retry starts, or the run failed).
    pub attempt_failed: bool,
}

fn ms(t: &Time) -> i64 {
    t.0.as_millisecond()
}

fn time(ms: i64) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(ms)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// How long `timeSpent` may lag while the run bills and nothing else in the status changes:
/// crediting later credits the same seconds to the same part, so waiting loses nothing and
/// spares a status write on every pass.
const REFRESH_MS: i64 = 60_000;

impl TimeSpent {
    /// Whether a status write brings `timeSpent` up to date: with any other change of the status
    /// (`unchanged` false), and while the object is in a part that bills (`was`: provisioning,
    /// preprocessing, training) at least once a minute. A queued or suspended object is not
    /// written for it at all: its seconds are credited when it moves on. `time_spent`: the
    /// stored one, if any.
    pub fn due(time_spent: Option<&TimeSpent>, was: Option<Part>, unchanged: bool, now_ms: i64) -> bool {
        let through = time_spent.and_then(|t| t.accounted_through.as_ref()).map(ms);
        let idle = matches!(was, None | Some(Part::Queued | Part::Suspended));
        let fresh = |t: i64| idle || now_ms - t < REFRESH_MS;
        !(unchanged && through.is_some_and(fresh))
    }

    /// The parts after one status write (see the module docs).
    pub fn account(&self, step: Step) -> TimeSpent {
        let mut next = self.clone();
        let through = self.accounted_through.as_ref().map_or(step.now_ms, ms);
        let seconds = ((step.now_ms - through) / 1000).max(0);
        let credited = TimeShare {
            seconds,
            usd: step.spent_usd.max(0.0),
        };
        if let Some(part) = step.was {
            next.credit(part, credited);
        }
        // Time after the run ended is credited to nothing, but still counted as seen.
        next.accounted_through = Some(time(through + seconds * 1000));
        if let Some(checkpoint) = step.interrupted {
            next.lose(step, checkpoint);
        }
        if step.is == Some(Part::Productive) && step.was != Some(Part::Productive) {
            next.training_since = Some(time(step.now_ms));
        }
        if step.attempt_failed {
            next.fail_attempt();
        }
        next.goodput_percent = next.goodput();
        next
    }

    fn credit(&mut self, part: Part, share: TimeShare) {
        match part {
            Part::Queued => self.queued.add(share),
            Part::Suspended => self.suspended.add(share),
            Part::Provisioning => {
                self.provisioning.add(share);
                self.attempt.provisioning.add(share);
            }
            Part::Preprocessing => {
                self.preprocessing.add(share);
                self.attempt.preprocessing.add(share);
            }
            Part::Productive => {
                self.productive.add(share);
                self.attempt.productive.add(share);
            }
        }
    }

    /// Moves what was trained since the last checkpoint before the interruption (and since
    /// training last started) from productive to lost, at most what this attempt trained.
    fn lose(&mut self, step: Step, checkpoint_ms: Option<i64>) {
        let started = self.training_since.as_ref().map_or(step.now_ms, ms);
        let since = checkpoint_ms.map_or(started, |c| c.max(started));
        let seconds = ((step.now_ms - since) / 1000).clamp(0, self.attempt.productive.seconds);
        // Priced as this attempt's training was, so the dollars still sum to the estimate.
        let trained = self.attempt.productive;
        let usd = trained.usd * seconds as f64 / trained.seconds.max(1) as f64;
        let lost = TimeShare { seconds, usd };
        self.productive.take(lost);
        self.attempt.productive.take(lost);
        self.lost_to_interruptions.add(lost);
        self.attempt.lost_to_interruptions.add(lost);
    }

    fn fail_attempt(&mut self) {
        let a = std::mem::take(&mut self.attempt);
        self.provisioning.take(a.provisioning);
        self.preprocessing.take(a.preprocessing);
        self.productive.take(a.productive);
        self.lost_to_interruptions.take(a.lost_to_interruptions);
        for share in [
            a.provisioning,
            a.preprocessing,
            a.productive,
            a.lost_to_interruptions,
        ] {
            self.failed_attempts.add(share);
        }
    }

    /// Every part, in the order `kubectl describe` and `local` show them.
    pub fn parts(&self) -> [(&'static str, TimeShare); 7] {
        [
            ("queued", self.queued),
            ("provisioning", self.provisioning),
            ("preprocessing", self.preprocessing),
            ("productive", self.productive),
            ("lost to interruptions", self.lost_to_interruptions),
            ("suspended", self.suspended),
            ("failed attempts", self.failed_attempts),
        ]
    }

    /// The wall time accounted so far: the sum of the parts.
    pub fn wall_seconds(&self) -> i64 {
        self.parts().iter().map(|(_, s)| s.seconds).sum()
    }

    /// One line for people: the goodput, the wall time and every part that is not empty, e.g.
    /// `goodput 60% of 22m30s: provisioning 8m45s ($0.06), productive 13m30s ($1.75), lost to
    /// interruptions 15s ($0.03)`.
    pub fn summary(&self) -> String {
        use crate::duration::format_seconds;
        let parts: Vec<String> = self
            .parts()
            .iter()
            .filter(|(_, s)| s.seconds > 0 || s.usd > 0.0)
            .map(|(name, s)| format!("{name} {} (${:.2})", format_seconds(s.seconds), s.usd))
            .collect();
        let goodput = self
            .goodput_percent
            .map_or_else(|| "goodput -".to_owned(), |g| format!("goodput {g}%"));
        format!(
            "{goodput} of {}: {}",
            format_seconds(self.wall_seconds()),
            parts.join(", ")
        )
    }

    fn goodput(&self) -> Option<i32> {
        let wall = self.wall_seconds();
        (wall > 0).then(|| (self.productive.seconds * 100 / wall) as i32)
    }
}

#[cfg(test)]
mod tests;
