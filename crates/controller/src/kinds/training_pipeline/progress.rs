//! Training progress read from Cloud Storage: `status.checkpoint` and the `ProgressStalled`
//! condition (see [`super::checkpoints`] for the contract).
//!
//! While the pipeline is `Training`, its checkpoint directory is listed at most every
//! `--poll-checkpoints` (the time of the last listing is `status.checkpoint.checkedTime`, so a
//! restarted operator does not list again at once). Right after each listing, a run with
//! `spec.training.progressDeadline` whose newest checkpoint (or, without one, the start of the
//! Train stage) is older than the deadline gets `ProgressStalled=True`, one Warning Event per stall,
//! and `tpu_operator_training_stalled{namespace,name} 1`. Nothing else changes: the phase, the
//! kstatus conditions, the attempts and the cloud resources are left as they are.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use tpu_operator_api::{
    conditions::{self, find_condition},
    duration::parse_duration,
    training_pipeline::{
        CheckpointStatus, StageName, TrainingPipeline, TrainingPipelinePhase as Phase, TrainingPipelineStatus,
    },
};
use tpu_operator_gcp::storage::parse_gs_uri;

use super::{
    checkpoints,
    plan::Transition,
    status::{time, to_chrono},
};
use crate::{reconcile::handles::Io, runtime::metrics::Metrics};

/// Condition type: the run wrote no checkpoint within `spec.training.progressDeadline`.
pub const PROGRESS_STALLED: &str = "ProgressStalled";
/// Reason (and Warning Event reason) of a stalled run.
pub const NO_RECENT_CHECKPOINT: &str = "NoRecentCheckpoint";
/// Reason of a run whose newest checkpoint is within the deadline.
pub const CHECKPOINT_RECENT: &str = "CheckpointRecent";
/// Reason once training is no longer running.
pub const NOT_TRAINING: &str = "NotTraining";
/// Event reason of a stalled run writing checkpoints again.
pub const PROGRESS_RESUMED: &str = "ProgressResumed";

/// What the check found, besides the status.
#[derive(Debug, Default)]
pub struct Outcome {
    pub events: Vec<Transition>,
    /// When the next listing is due (while training).
    pub next_check: Option<Duration>,
    pub found: Found,
}

/// `status.checkpoint` and the `ProgressStalled` condition as the check left them, for
/// `report` to write.
#[derive(Debug, Default)]
pub struct Found {
    pub checkpoint: Option<CheckpointStatus>,
    pub stalled: Option<Condition>,
}

impl Found {
    /// `st` with the checkpoint and the `ProgressStalled` condition the check left. `st` is the
    /// status the check read (see [`update`]): setting a condition it already shows changes
    /// nothing, so the condition's transition time is the check's.
    pub fn record(&self, st: &mut TrainingPipelineStatus) {
        st.checkpoint.clone_from(&self.checkpoint);
        match &self.stalled {
            Some(c) => {
                conditions::set_condition(&mut st.conditions, c.clone());
            }
            None => {
                conditions::remove_condition(&mut st.conditions, PROGRESS_STALLED);
            }
        }
    }
}

/// Checks `st` (the status being built: the plan's record, verdict and what the action did):
/// its checkpoint (listing when due, and at once when this pass noticed an `interrupted` run)
/// and the `ProgressStalled` condition, returned as [`Found`].
pub async fn update(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    st: &TrainingPipelineStatus,
    interrupted: bool,
) -> Outcome {
    let mut seen = st.clone();
    let mut out = check(io, tp, &mut seen, interrupted).await;
    out.found = Found {
        checkpoint: seen.checkpoint,
        stalled: find_condition(&seen.conditions, PROGRESS_STALLED).cloned(),
    };
    out
}

/// [`update`]'s check on its own copy of the status.
async fn check(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    st: &mut TrainingPipelineStatus,
    interrupted: bool,
) -> Outcome {
    let now = io.clock.now();
    let mut out = Outcome::default();
    let training = st.phase == Phase::Training;
    let has_train_attempt = st
        .stages
        .iter()
        .any(|s| s.name == StageName::Train && s.attempts > 0);
    if !has_train_attempt {
        return out;
    }
    let dir = checkpoints::current_dir(&tp.spec, &st.stages);
    let ckpt = st.checkpoint.get_or_insert_with(CheckpointStatus::default);
    if ckpt.dir.as_deref() != Some(dir.as_str()) {
        // A new attempt with a directory of its own (StartClean): nothing of it is known yet.
        *ckpt = CheckpointStatus {
            dir: Some(dir.clone()),
            ..Default::default()
        };
    }
    // An interruption was noticed: the run restarts from its newest checkpoint, and the
    // training it lost is measured from that checkpoint (`status.timeSpent`), so the directory
    // is read now rather than at the next interval.
    if interrupted {
        list(io, tp, &dir, ckpt, now).await;
    }
    if !training {
        end_stall(io, tp, st, now);
        return out;
    }
    let interval = io.settings.config.poll_checkpoints;
    let since_check = ckpt
        .checked_time
        .as_ref()
        .map(|t| (now - to_chrono(t)).to_std().unwrap_or_default());
    match since_check {
        Some(elapsed) if elapsed < interval && !interrupted => {
            out.next_check = Some(interval - elapsed);
            return out;
        }
        _ if interrupted => {}
        _ => list(io, tp, &dir, ckpt, now).await,
    }
    out.next_check = Some(interval);
    judge(io, tp, st, now, &mut out);
    out
}

async fn list(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    dir: &str,
    ckpt: &mut CheckpointStatus,
    now: DateTime<Utc>,
) {
    ckpt.checked_time = Some(time(now));
    let Some(uri) = parse_gs_uri(dir) else {
        return;
    };
    match io
        .storage_for(&tp.namespace().unwrap_or_default())
        .list_objects(uri.bucket, uri.path, checkpoints::MAX_LISTED)
        .await
    {
        Ok(objects) => {
            if let Some(latest) = checkpoints::newest(uri.bucket, uri.path, &objects) {
                ckpt.latest_uri = Some(latest.uri);
                ckpt.latest_time = Some(time(latest.time));
                ckpt.latest_step = latest.step;
            }
        }
        // Progress is a report: a listing that fails is tried again at the next interval and
        // leaves the last known checkpoint in place.
        Err(e) => tracing::warn!(
            pipeline = tp.name_any(),
            dir,
            error = %e,
            "listing the checkpoint directory failed"
        ),
    }
}

/// After a listing: the `ProgressStalled` condition, its Event and the metric.
fn judge(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    st: &mut TrainingPipelineStatus,
    now: DateTime<Utc>,
    out: &mut Outcome,
) {
    let Some(deadline) = tp
        .spec
        .training
        .progress_deadline
        .as_deref()
        .and_then(|d| parse_duration(d).ok())
    else {
        if conditions::remove_condition(&mut st.conditions, PROGRESS_STALLED) {
            set_metric(io.kept.metrics, tp, false);
        }
        return;
    };
    let started = train_started(st, now);
    let ckpt = st.checkpoint.clone().unwrap_or_default();
    let latest = ckpt.latest_time.as_ref().map(to_chrono);
    let stalled = checkpoints::stalled(latest, started, deadline, now);
    let was_stalled = is_stalled(st);
    let deadline_text = tp.spec.training.progress_deadline.clone().unwrap_or_default();
    let (reason, message) = verdict(&ckpt, latest, started, stalled, &deadline_text);
    let generation = st.observed_generation;
    conditions::set_condition(
        &mut st.conditions,
        conditions::condition(
            PROGRESS_STALLED,
            stalled,
            reason,
            message.clone(),
            generation,
            time(now),
        ),
    );
    set_metric(io.kept.metrics, tp, stalled);
    announce(io, tp, stalled, was_stalled, message, out);
}

/// When the run's progress is measured from: the Train stage's start, else the pipeline's,
/// else now.
fn train_started(st: &TrainingPipelineStatus, now: DateTime<Utc>) -> DateTime<Utc> {
    st.stages
        .iter()
        .find(|s| s.name == StageName::Train)
        .and_then(|s| s.start_time.as_ref())
        .or(st.start_time.as_ref())
        .map_or(now, to_chrono)
}

/// The `ProgressStalled` condition's reason and message: what the newest checkpoint is (or that
/// there is none) against the deadline.
fn verdict(
    ckpt: &CheckpointStatus,
    latest: Option<DateTime<Utc>>,
    started: DateTime<Utc>,
    stalled: bool,
    deadline_text: &str,
) -> (&'static str, String) {
    let dir = ckpt.dir.clone().unwrap_or_default();
    if stalled {
        let since = match (&ckpt.latest_uri, latest) {
            (Some(uri), Some(t)) if t >= started => {
                format!("the newest checkpoint, {uri}, was written at {}", t.to_rfc3339())
            }
            _ => format!("none since training started at {}", started.to_rfc3339()),
        };
        (
            NO_RECENT_CHECKPOINT,
            format!(
                "no checkpoint under {dir} within progressDeadline {deadline_text}: {since}; training is left running"
            ),
        )
    } else {
        let what = match (&ckpt.latest_uri, latest) {
            (Some(uri), Some(t)) => format!("newest checkpoint {uri} at {}", t.to_rfc3339()),
            _ => format!("no checkpoint under {dir} yet"),
        };
        (
            CHECKPOINT_RECENT,
            format!("{what}, within progressDeadline {deadline_text}"),
        )
    }
}

/// A stall that begins is counted and gets a Warning Event; one that ends gets a Normal one.
fn announce(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    stalled: bool,
    was_stalled: bool,
    message: String,
    out: &mut Outcome,
) {
    if stalled && !was_stalled {
        io.kept.metrics.count_training_stall(&namespace(tp));
        out.events.push(Transition {
            warning: true,
            reason: PROGRESS_STALLED.to_string(),
            note: message,
        });
    } else if !stalled && was_stalled {
        out.events.push(Transition {
            warning: false,
            reason: PROGRESS_RESUMED.to_string(),
            note: message,
        });
    }
}

fn is_stalled(st: &TrainingPipelineStatus) -> bool {
    find_condition(&st.conditions, PROGRESS_STALLED).is_some_and(|c| c.status == conditions::status::TRUE)
}

/// Training stopped (finished, failed, or between incarnations): a stall no longer applies.
fn end_stall(io: &Io<'_>, tp: &TrainingPipeline, st: &mut TrainingPipelineStatus, now: DateTime<Utc>) {
    if !is_stalled(st) {
        return;
    }
    let generation = st.observed_generation;
    conditions::set_condition(
        &mut st.conditions,
        conditions::condition(
            PROGRESS_STALLED,
            false,
            NOT_TRAINING,
            format!("training is {:?}", st.phase),
            generation,
            time(now),
        ),
    );
    set_metric(io.kept.metrics, tp, false);
}

fn namespace(tp: &TrainingPipeline) -> String {
    tp.namespace().unwrap_or_default()
}

fn set_metric(metrics: &Metrics, tp: &TrainingPipeline, stalled: bool) {
    metrics.set_training_stalled(&namespace(tp), &tp.name_any(), stalled);
}

/// The pipeline is going away: its series leaves the stalled gauge.
pub fn forget(metrics: &Metrics, tp: &TrainingPipeline) {
    metrics.forget_training(&namespace(tp), &tp.name_any());
}
