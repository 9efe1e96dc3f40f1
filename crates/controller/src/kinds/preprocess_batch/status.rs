//! Building the status (phase, kstatus conditions, batch facts, estimated cost).
//!
//! Every builder starts from the status the object had, so `lastTransitionTime` moves only on a
//! real flip and an unchanged status compares equal (no write).

pub use crate::runtime::clock::k8s_time;
use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{self, Progress, reasons, set_condition, set_kstatus, types},
    preprocess_batch::{PreprocessBatch, PreprocessBatchPhase as Phase, PreprocessBatchStatus},
};
use tpu_operator_gcp::dataproc_v1::model::batch::State;

use super::{
    Done,
    act::SubmitOutcome,
    cost,
    observe::{BatchLookup, Observed, ObservedBatch},
    plan::{Action, Details, Plan, Verdict, allowed_attempts},
};
use crate::reconcile::plan::Kstatus;

/// The only writer of `PreprocessBatch.status`.
pub const FIELD_MANAGER: &str = "preprocessbatch.tpu-operator.dev/controller";

fn base(obj: &PreprocessBatch) -> (PreprocessBatchStatus, Option<i64>) {
    let mut s = obj.status.clone().unwrap_or_default();
    s.observed_generation = obj.metadata.generation;
    (s, obj.metadata.generation)
}

/// The status a pass writes: built from the old status, what was observed, the plan and what
/// its one call did. A deletion pass reports only its verdict.
pub fn report(
    obj: &PreprocessBatch,
    observed: &Observed,
    plan: &Plan,
    done: &Done,
    now: DateTime<Utc>,
) -> PreprocessBatchStatus {
    if obj.metadata.deletion_timestamp.is_some() {
        return cleaning_up(obj, &plan.verdict, now);
    }
    match (&plan.action, done, &plan.verdict.kstatus) {
        (Action::Submit { after_failure, .. }, Done::Submitted { outcome, .. }, _) => {
            after_submit(obj, &plan.verdict, outcome, after_failure.as_deref(), now)
        }
        (Action::Nothing, _, Some(kstatus)) => {
            from_verdict(obj, observed, (&plan.verdict, kstatus), &plan.details, now)
        }
        // A verdict that keeps the status (finished, or waiting out the retry delay), or a
        // submit that made no call.
        _ => unchanged(obj),
    }
}

/// The old status with only `observedGeneration` refreshed.
fn unchanged(obj: &PreprocessBatch) -> PreprocessBatchStatus {
    base(obj).0
}

/// The status after a pass that only observed: the verdict's phase and conditions, with what
/// the batch reported.
fn from_verdict(
    obj: &PreprocessBatch,
    observed: &Observed,
    (verdict, kstatus): (&Verdict, &Kstatus),
    details: &Details,
    now: DateTime<Utc>,
) -> PreprocessBatchStatus {
    let (mut s, generation) = base(obj);
    if let BatchLookup::Found(batch) = &observed.batch {
        record_batch(&mut s, batch);
        // A settled phase is the last time this attempt's batch is read: count its usage once.
        let settled = verdict.phase.attempt_settled();
        s.estimated_cost = Some(cost::estimate(s.estimated_cost.as_ref(), &batch.usage, settled));
    }
    if let Some(ended) = details.ended {
        s.completion_time = Some(k8s_time(ended));
    }
    if verdict.phase == Phase::Succeeded && details.output.as_ref().is_some_and(|(ok, ..)| *ok) {
        s.output_uri = obj.spec.batch.output_uri.clone();
    }
    s.phase = verdict.phase;
    set_kstatus(
        &mut s.conditions,
        kstatus.progress,
        kstatus.reason,
        &kstatus.message,
        generation,
        k8s_time(now),
    );
    if let Some((verified, reason, message)) = &details.output {
        let c = conditions::condition(
            types::OUTPUT_VERIFIED,
            *verified,
            reason,
            message.clone(),
            generation,
            k8s_time(now),
        );
        set_condition(&mut s.conditions, c);
    }
    s
}

/// The status right after a submit: the new batch's name and operation first of all, in the
/// phase and conditions the plan expected; a refused or paced submit says why instead.
fn after_submit(
    obj: &PreprocessBatch,
    verdict: &Verdict,
    outcome: &SubmitOutcome,
    after_failure: Option<&str>,
    now: DateTime<Utc>,
) -> PreprocessBatchStatus {
    let (mut s, generation) = base(obj);
    let allowed = allowed_attempts(&obj.spec.batch);
    let (attempt, batch_name) = match outcome {
        SubmitOutcome::Refused {
            phase,
            reason,
            message,
            ..
        } => {
            if let Some(phase) = phase {
                s.phase = *phase;
            }
            return s.with_kstatus(Progress::Stalled, reason, message, generation, k8s_time(now));
        }
        SubmitOutcome::Paced { message, .. } => {
            // Nothing was sent: the conditions say why, nothing else changes.
            let reason = reasons::WAITING_FOR_CREATE_RATE;
            return s.with_kstatus(Progress::Reconciling, reason, message, generation, k8s_time(now));
        }
        SubmitOutcome::Created {
            attempt,
            batch_name,
            operation,
        } => {
            s.pending_operation = Some(operation.clone());
            (*attempt, batch_name.clone())
        }
        SubmitOutcome::Adopted { attempt, batch } => (*attempt, batch.name.clone()),
    };
    let links = crate::kinds::links::dataproc_batch(&batch_name);
    s.replace_batch(attempt, &batch_name, links);
    s.start_time.get_or_insert_with(|| k8s_time(now));
    s.phase = verdict.phase;
    s.message = after_failure.map(|why| format!("previous attempt: {why}"));
    conditions::remove_condition(&mut s.conditions, types::OUTPUT_VERIFIED);
    if let Some(expected) = &verdict.kstatus {
        // The plan's conditions, naming the batch Dataproc now holds.
        let message = format!("attempt {attempt}/{allowed}: submitted batch {batch_name}");
        let (progress, reason) = (expected.progress, expected.reason);
        set_kstatus(
            &mut s.conditions,
            progress,
            reason,
            &message,
            generation,
            k8s_time(now),
        );
    }
    if let SubmitOutcome::Adopted { batch, .. } = outcome {
        record_batch(&mut s, batch);
    }
    s
}

/// The status while deletion cancels or deletes batches (phase Cancelling / Deleting): the
/// deletion plan's verdict, nothing read from a batch.
fn cleaning_up(obj: &PreprocessBatch, verdict: &Verdict, now: DateTime<Utc>) -> PreprocessBatchStatus {
    let (mut s, generation) = base(obj);
    let Some(kstatus) = &verdict.kstatus else {
        return s;
    };
    s.phase = verdict.phase;
    let (progress, reason) = (kstatus.progress, kstatus.reason);
    s.with_kstatus(progress, reason, &kstatus.message, generation, k8s_time(now))
}

/// Copies what Dataproc reports about the current batch.
fn record_batch(s: &mut PreprocessBatchStatus, b: &ObservedBatch) {
    let terminal = matches!(b.state, State::Succeeded | State::Failed | State::Cancelled);
    s.batch_name = Some(b.name.clone());
    s.links = crate::kinds::links::dataproc_batch(&b.name);
    s.batch_uuid = Some(b.uuid.clone()).filter(|u| !u.is_empty());
    s.batch_state = b.state.name().map(str::to_owned);
    s.state_message = Some(b.state_message.clone()).filter(|m| !m.is_empty());
    s.driver_output_uri = b.driver_output_uri.clone();
    s.pending_operation = Some(b.operation.clone()).filter(|op| !op.is_empty() && !terminal);
    if terminal {
        s.completion_time = b.state_time.map(k8s_time);
    }
    if s.start_time.is_none() {
        s.start_time = b.create_time.map(k8s_time);
    }
    s.message = Some(history(b));
}

/// `batch <name>: PENDING 09:00:00Z -> RUNNING 09:01:00Z -> SUCCEEDED 09:03:00Z; Spark History
/// Server: <url>`: the batch's state history and its `runtimeInfo` endpoints, in `status.message`
/// (the status has no dedicated fields for them).
pub fn history(b: &ObservedBatch) -> String {
    let mut out: Vec<String> = Vec::new();
    for entry in &b.history {
        let name = entry.state.name().unwrap_or("UNKNOWN");
        let item = match entry.since {
            Some(t) => format!("{name} {}", t.format("%Y-%m-%dT%H:%M:%SZ")),
            None => name.to_string(),
        };
        // The current state repeats the last history entry on some responses.
        if out.last() != Some(&item) {
            out.push(item);
        }
    }
    let mut text = format!("batch {}: {}", b.name, out.join(" -> "));
    for (name, url) in &b.endpoints {
        text.push_str(&format!("; {name}: {url}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::preprocess_batch::observe::StateEntry;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_772_442_000 + secs, 0).unwrap()
    }

    #[test]
    fn history_lists_each_state_once() {
        let b = ObservedBatch {
            name: "projects/p/locations/r/batches/b".into(),
            uuid: String::new(),
            state: State::Succeeded,
            state_message: String::new(),
            state_time: Some(at(180)),
            create_time: Some(at(0)),
            operation: String::new(),
            driver_output_uri: None,
            endpoints: [("Spark History Server".to_string(), "https://shs/".to_string())].into(),
            usage: Default::default(),
            history: vec![
                StateEntry {
                    state: State::Pending,
                    since: Some(at(0)),
                },
                StateEntry {
                    state: State::Running,
                    since: Some(at(60)),
                },
                StateEntry {
                    state: State::Succeeded,
                    since: Some(at(180)),
                },
                StateEntry {
                    state: State::Succeeded,
                    since: Some(at(180)),
                },
            ],
        };
        assert_eq!(
            history(&b),
            "batch projects/p/locations/r/batches/b: PENDING 2026-03-02T09:00:00Z -> \
             RUNNING 2026-03-02T09:01:00Z -> SUCCEEDED 2026-03-02T09:03:00Z; \
             Spark History Server: https://shs/"
        );
    }
}
