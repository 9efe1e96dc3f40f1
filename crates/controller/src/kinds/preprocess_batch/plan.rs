//! Deciding what to do from (spec, observed batch, status, now).
//!
//! Does not touch Kubernetes or Google Cloud. Every Dataproc batch state is matched explicitly, so a
//! new state in the API is a compile error here rather than a silent default.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, find_condition, reasons, types},
    preprocess_batch::{BatchTemplate, PreprocessBatchPhase as Phase, PreprocessBatchStatus},
};
use tpu_operator_gcp::dataproc_v1::model::batch::State;

use super::observe::{BatchLookup, Observed, ObservedBatch, OutputCheck};

mod cleanup;

pub use cleanup::{CleanupStep, plan_cleanup, plan_deletion};

/// First wait between a failed attempt and the next one; doubles per failed attempt.
pub const RETRY_BASE: Duration = Duration::from_secs(30);
/// Longest wait between attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(600);

/// How long to wait after the `failed_attempts`-th failed attempt before submitting the next.
pub fn retry_delay(failed_attempts: u32) -> Duration {
    let exp = failed_attempts.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(1 << exp).min(RETRY_MAX)
}

pub use crate::runtime::requeue::Requeue;

/// The pass's plan: the one Dataproc call it makes, the verdict, and what only a batch reports.
pub type Plan = crate::reconcile::plan::Plan<Action, Phase, Details>;

/// The verdict the plan reaches (phase, kstatus conditions, when to look again).
pub type Verdict = crate::reconcile::plan::Verdict<Phase>;

/// The pass's one Dataproc call.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// No call: the verdict says what the batch is doing (or, without conditions, that the
    /// status stays as it is: finished earlier, or waiting out the retry delay).
    Nothing,
    /// Create the batch of this attempt (1-based); `after_failure` describes why the previous
    /// attempt is being replaced.
    Submit {
        attempt: u32,
        after_failure: Option<String>,
    },
    /// Deletion: cancel a PENDING / RUNNING batch through its create operation.
    Cancel { operation: String },
    /// Deletion: delete a terminal batch.
    Delete { batch: String },
}

/// What a batch reports besides the verdict.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    /// The current attempt ended at this time (its batch is terminal, or it counts as failed).
    pub ended: Option<DateTime<Utc>>,
    /// `OutputVerified` condition: (verified, reason, message), when the output was checked.
    pub output: Option<(bool, &'static str, String)>,
    /// Deletion: once this pass's action succeeded nothing of the object's is left in Dataproc,
    /// so its finalizer may go.
    pub releases: bool,
}

/// No call, the status as it is (phase `phase`), looked at again after `requeue`.
fn keep(phase: Phase, requeue: Requeue) -> Plan {
    Plan::new(Action::Nothing, Verdict::keep(phase, requeue), Details::default())
}

/// No call; the status says `verdict` (and `details`).
fn report(verdict: Verdict, details: Details) -> Plan {
    Plan::new(Action::Nothing, verdict, details)
}

/// Submit `attempt`: until Dataproc answers, the plan expects the status a submitted batch has
/// (the report names the batch the answer carries, or says why none was sent).
fn submit(template: &BatchTemplate, attempt: u32, after_failure: Option<String>) -> Plan {
    let verdict = Verdict::new(
        Phase::Submitted,
        Progress::Reconciling,
        reasons::CREATING,
        format!("{}: submitting the batch", attempts_label(template, attempt)),
    );
    Plan::new(
        Action::Submit {
            attempt,
            after_failure,
        },
        verdict,
        Details::default(),
    )
}

/// The apply-path plan.
pub fn plan(
    template: &BatchTemplate,
    status: &PreprocessBatchStatus,
    observed: &Observed,
    now: DateTime<Utc>,
) -> Plan {
    let attempt = u32::try_from(status.attempts).unwrap_or(0);
    match status.phase {
        Phase::Succeeded | Phase::Failed | Phase::Cancelled => return keep(status.phase, Requeue::Stable),
        Phase::Retrying => return next_attempt(template, status, attempt, now),
        Phase::Pending | Phase::Waiting | Phase::Submitted => {}
        Phase::Running | Phase::Cancelling | Phase::Deleting => {}
    }
    if attempt == 0 {
        return first_attempt(template, observed);
    }
    match &observed.batch {
        BatchLookup::NotRead => running(
            Phase::Submitted,
            reasons::CREATING,
            "waiting to read the batch".into(),
        ),
        BatchLookup::Missing => attempt_failed(
            template,
            attempt,
            Failure::new(
                reasons::NOT_FOUND,
                "the batch disappeared (deleted outside the operator)",
            ),
            now,
            now,
        ),
        BatchLookup::Found(batch) => from_batch(template, attempt, batch, &observed.output, now),
    }
}

fn from_batch(
    template: &BatchTemplate,
    attempt: u32,
    batch: &ObservedBatch,
    output: &OutputCheck,
    now: DateTime<Utc>,
) -> Plan {
    let of = attempts_label(template, attempt);
    let ended = batch.state_time.unwrap_or(now);
    match &batch.state {
        State::Pending => running(
            Phase::Submitted,
            reasons::CREATING,
            format!("{of}: batch {} is PENDING", batch.name),
        ),
        State::Running => running(
            Phase::Running,
            reasons::RUNNING,
            format!("{of}: batch {} is RUNNING", batch.name),
        ),
        State::Cancelling => running(
            Phase::Cancelling,
            reasons::CANCELLING,
            format!("{of}: batch {} is being cancelled", batch.name),
        ),
        State::Cancelled => attempt_failed(
            template,
            attempt,
            Failure::new(
                reasons::CANCELLED,
                non_empty(&batch.state_message, "the batch was cancelled"),
            ),
            ended,
            now,
        ),
        State::Failed => attempt_failed(
            template,
            attempt,
            Failure::new(
                reasons::FAILED,
                non_empty(&batch.state_message, "the batch failed"),
            ),
            ended,
            now,
        ),
        State::Succeeded => succeeded_batch(template, attempt, batch, output, ended, now),
        // UNSPECIFIED, or a state added to the API later (`State` is non-exhaustive).
        _ => running(
            Phase::Submitted,
            reasons::CREATING,
            format!(
                "{of}: batch {} reports an unknown state {:?}",
                batch.name, batch.state
            ),
        ),
    }
}

/// Phase Retrying: the next attempt once the retry delay after the last one's end passed.
fn next_attempt(
    template: &BatchTemplate,
    status: &PreprocessBatchStatus,
    attempt: u32,
    now: DateTime<Utc>,
) -> Plan {
    // The end time is written together with phase Retrying; should it be missing (a
    // hand-edited status), retry now rather than wait for a moment that never comes.
    let due = status
        .completion_time
        .as_ref()
        .map(|ended| from_time(ended) + chrono::Duration::from_std(retry_delay(attempt)).unwrap_or_default())
        .unwrap_or(now);
    if now < due {
        let wait = (due - now).to_std().unwrap_or_default();
        return keep(status.phase, Requeue::After(wait));
    }
    let why = find_condition(&status.conditions, types::RECONCILING).map(|c| c.message.clone());
    submit(template, attempt + 1, why)
}

/// No attempt yet: submit the first, unless a declared input does not exist.
fn first_attempt(template: &BatchTemplate, observed: &Observed) -> Plan {
    if !observed.missing_inputs.is_empty() {
        let message = format!(
            "declared input(s) do not exist: {}; upload them (checked again every few minutes)",
            observed.missing_inputs.join(", ")
        );
        let verdict = Verdict::new(Phase::Pending, Progress::Stalled, reasons::NOT_FOUND, message);
        return report(verdict, Details::default());
    }
    submit(template, 1, None)
}

/// A SUCCEEDED batch succeeds once its declared output (if any) is seen; one that wrote no
/// output is a failed attempt.
fn succeeded_batch(
    template: &BatchTemplate,
    attempt: u32,
    batch: &ObservedBatch,
    output: &OutputCheck,
    ended: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Plan {
    let of = attempts_label(template, attempt);
    match output {
        OutputCheck::NotDeclared => succeeded(format!("{of}: batch {} SUCCEEDED", batch.name), None),
        OutputCheck::Present => succeeded(
            format!("{of}: batch {} SUCCEEDED and its output exists", batch.name),
            Some((true, reasons::OUTPUT_FOUND, "the declared output exists".into())),
        ),
        OutputCheck::Missing(detail) => {
            let message = format!("batch SUCCEEDED but wrote no output: {detail}");
            let mut decision = attempt_failed(
                template,
                attempt,
                Failure::new(reasons::OUTPUT_MISSING, &message),
                ended,
                now,
            );
            if decision.action == Action::Nothing {
                decision.details.output = Some((false, reasons::OUTPUT_MISSING, message));
            }
            decision
        }
        OutputCheck::NotChecked => running(
            Phase::Running,
            reasons::RUNNING,
            format!("{of}: checking the output"),
        ),
    }
}

/// Why an attempt failed: a condition reason and the API's (or our) message.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The current attempt failed: wait, retry, or give up.
fn attempt_failed(
    template: &BatchTemplate,
    attempt: u32,
    failure: Failure,
    ended: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Plan {
    let allowed = allowed_attempts(template);
    let of = attempts_label(template, attempt);
    if attempt < allowed {
        let due = ended + chrono::Duration::from_std(retry_delay(attempt)).unwrap_or_default();
        if now >= due {
            let why = format!("{of} failed ({}): {}", failure.reason, failure.message);
            return submit(template, attempt + 1, Some(why));
        }
        let wait = (due - now).to_std().unwrap_or_default();
        let message = format!(
            "{of} failed ({}): {}; next attempt at {}",
            failure.reason,
            failure.message,
            due.to_rfc3339()
        );
        let verdict = Verdict::new(Phase::Retrying, Progress::Reconciling, reasons::RETRYING, message);
        return report(verdict.requeue(Requeue::After(wait)), ended_at(ended));
    }
    let (phase, reason) = match (failure.reason, template.max_retries > 0) {
        (reasons::CANCELLED, _) => (
            Phase::Cancelled,
            if allowed > 1 {
                reasons::RETRIES_EXHAUSTED
            } else {
                reasons::CANCELLED
            },
        ),
        (_, true) => (Phase::Failed, reasons::RETRIES_EXHAUSTED),
        (reason, false) => (Phase::Failed, reason),
    };
    let message = format!("{of} failed ({}): {}", failure.reason, failure.message);
    report(
        Verdict::new(phase, Progress::Stalled, reason, message),
        ended_at(ended),
    )
}

/// The details of an attempt that ended at `ended`.
fn ended_at(ended: DateTime<Utc>) -> Details {
    Details {
        ended: Some(ended),
        ..Details::default()
    }
}

fn running(phase: Phase, reason: &'static str, message: String) -> Plan {
    // Reconciling: looked at again at the active interval.
    report(
        Verdict::new(phase, Progress::Reconciling, reason, message),
        Details::default(),
    )
}

fn succeeded(message: String, output: Option<(bool, &'static str, String)>) -> Plan {
    let verdict = Verdict::new(Phase::Succeeded, Progress::Ready, reasons::SUCCEEDED, message);
    report(
        verdict,
        Details {
            output,
            ..Details::default()
        },
    )
}

/// First attempt plus `maxRetries` retries.
pub fn allowed_attempts(template: &BatchTemplate) -> u32 {
    u32::try_from(template.max_retries).unwrap_or(0) + 1
}

fn attempts_label(template: &BatchTemplate, attempt: u32) -> String {
    format!("attempt {attempt}/{}", allowed_attempts(template))
}

fn non_empty(s: &str, fallback: &str) -> String {
    if s.is_empty() { fallback.into() } else { s.into() }
}

fn from_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

#[cfg(test)]
mod tests;
