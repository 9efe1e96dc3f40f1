//! Reaping: a slice whose run is over (`spec.maxRunDuration`, `spec.idleTimeout`, the end of a
//! flex-start run) has its cloud objects deleted, then stays Stalled until the spec changes.
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    duration::parse_duration,
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::queued_resource_state;

use super::{Action, CleanupStep, Input, Plan, Verdict, doing, plan_cleanup, report};

/// `spec.maxRunDuration` since the node became READY has passed: delete what runs, then stay
/// Stalled (never recreate) until the spec changes.
pub(super) fn max_run_exceeded(input: &Input<'_>) -> Option<Plan> {
    let limit = input.spec.max_run_duration.as_deref()?;
    let since = input.ready_since?;
    reap_after(
        input,
        since,
        limit,
        reasons::MAX_RUN_DURATION_EXCEEDED,
        "maxRunDuration",
    )
}

/// The workload finished (its completion marker appeared) `spec.idleTimeout` ago and the slice
/// is still billing with nothing to run: delete it like [`max_run_exceeded`]. A marker older
/// than the current incarnation's READY time belongs to an earlier node and does not count.
pub(super) fn idle_timeout_exceeded(input: &Input<'_>) -> Option<Plan> {
    let limit = input.spec.idle_timeout.as_deref()?;
    let since = input.last_active?;
    if input.ready_since.is_some_and(|ready| since < ready) {
        return None;
    }
    reap_after(input, since, limit, reasons::IDLE_TIMEOUT, "idleTimeout")
}

/// Once `limit` (a duration string of field `field`) has passed since `since`: delete the
/// slice's cloud objects, then report Stalled with `reason` until the spec changes.
fn reap_after(
    input: &Input<'_>,
    since: DateTime<Utc>,
    limit: &str,
    reason: &'static str,
    field: &str,
) -> Option<Plan> {
    let duration = parse_duration(limit).ok()?;
    if input.now < since + chrono::Duration::seconds(duration.as_secs() as i64) {
        return None;
    }
    Some(reap(
        input,
        reason,
        &format!("{field} {limit} exceeded"),
        &format!("raise or remove spec.{field} to recreate it"),
    ))
}

/// `spec.suspend`: delete what bills (node or queued resource) as a reap does, then stay
/// `Suspended` (all kstatus conditions False) until the spec says otherwise; resuming creates a
/// new node through the ordinary path. A slice Kueue gates then deletes its Workload, as a
/// suspended pipeline does: the quota is free once nothing bills, and resuming queues it again.
pub(super) fn suspended(input: &Input<'_>) -> Option<Plan> {
    if !input.spec.suspend {
        return None;
    }
    let deleting = |message: String| {
        Verdict::new(
            TpuSlicePhase::Deleting,
            Progress::Reconciling,
            reasons::SUSPENDED,
            message,
        )
    };
    Some(match plan_cleanup(input.observed) {
        CleanupStep::Delete(action) => doing(
            action,
            deleting("suspended: deleting the node so that nothing bills".into()),
        ),
        CleanupStep::Wait(message) => report(deleting(format!("suspended: {message}"))),
        CleanupStep::Done => {
            let holds_workload = input.queue.is_some_and(|q| q.found.is_some());
            let step = if !input.suspended {
                Action::RecordSuspension
            } else if holds_workload {
                Action::DeleteWorkload
            } else {
                Action::Nothing
            };
            doing(
                step,
                Verdict::new(
                    TpuSlicePhase::Suspended,
                    Progress::Idle,
                    reasons::SUSPENDED,
                    "suspended: no node exists and none is created until spec.suspend is false",
                ),
            )
        }
    })
}

/// A flex-start slice whose run duration is over (Compute Engine deleted its VMs; the resize
/// request says so, or this generation's status already does): delete what is left and stay
/// Stalled like `maxRunDuration`, never recreating.
pub(super) fn flex_run_over(input: &Input<'_>) -> Option<Plan> {
    let flex = input.spec.capacity.as_ref()?.flex_start.as_ref()?;
    let signalled = input
        .observed
        .queued
        .as_ref()
        .and_then(|q| q.state.as_ref())
        .filter(|s| s.state == queued_resource_state::State::Failed)
        .and_then(|s| s.failed_data())
        .and_then(|f| f.error.as_ref())
        .is_some_and(|e| e.code == RUN_OVER_CODE);
    if !(signalled || input.run_over) {
        return None;
    }
    Some(reap(
        input,
        reasons::MAX_RUN_DURATION_EXCEEDED,
        &format!("capacity.flexStart.runDuration {} is over", flex.run_duration),
        "change the spec (or recreate the TpuSlice) to run again",
    ))
}

/// The code a finished flex-start run is reported with (DEADLINE_EXCEEDED, see
/// `tpu_operator_gcp::compute::convert`).
const RUN_OVER_CODE: i32 = 4;

/// Deletes the slice's cloud objects, then reports Stalled with `reason`.
fn reap(input: &Input<'_>, reason: &'static str, what: &str, fix: &str) -> Plan {
    match plan_cleanup(input.observed) {
        CleanupStep::Delete(action) => doing(
            action,
            Verdict::new(
                TpuSlicePhase::Deleting,
                Progress::Reconciling,
                reason,
                format!("{what}: deleting the slice"),
            ),
        ),
        CleanupStep::Wait(message) => report(Verdict::new(
            TpuSlicePhase::Deleting,
            Progress::Reconciling,
            reason,
            format!("{what}: {message}"),
        )),
        CleanupStep::Done => report(Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reason,
            format!("{what}: the slice was deleted; {fix}"),
        )),
    }
}
