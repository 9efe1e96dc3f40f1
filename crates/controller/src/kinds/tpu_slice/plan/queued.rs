//! Planning for `capacity.queued` and `capacity.reserved`: the queued resource's state decides, and once it is ACTIVE the
//! node's state does (as for a directly created node).
//!
//! Does not touch Kubernetes or Google Cloud.

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    duration::parse_duration,
    tpu_slice::TpuSlicePhase,
};
use tpu_operator_gcp::tpu_v2::model::{QueuedResource, queued_resource_state};

use super::{
    Action, Input, Outcome, Plan, Requeue, Verdict, plan_absent, plan_multislice, plan_node, plan_preempted,
    report,
};

pub(super) fn plan(input: &Input<'_>) -> Plan {
    if input.names.current.per_slice_queues() {
        return super::slices::plan(input);
    }
    match &input.observed.queued {
        None => plan_absent(input, Action::CreateQueuedResource),
        Some(qr) => plan_queued(input, qr),
    }
}

pub(super) fn plan_queued(input: &Input<'_>, qr: &QueuedResource) -> Plan {
    use queued_resource_state::{State as S, StateInitiator};
    let (state, by_service) = match &qr.state {
        Some(s) => (s.state.clone(), s.state_initiator == StateInitiator::Service),
        None => (S::Unspecified, false),
    };
    let name = state.name().unwrap_or("UNRECOGNIZED");
    match state {
        S::WaitingForResources if deadline(input, qr).is_some_and(|d| input.now >= d) => {
            let expired = Verdict::new(
                TpuSlicePhase::Failed,
                Progress::Stalled,
                reasons::QUEUE_EXPIRED,
                "no capacity was granted before validUntil",
            );
            Outcome::unavailable(expired).report()
        }
        S::Active => match &input.observed.node {
            Some(n) if !input.names.current.other_slices.is_empty() => plan_multislice(input, n),
            Some(n) => plan_node(input, n),
            None => in_queue(&state, name).report(),
        },
        S::Suspending | S::Suspended if by_service => {
            plan_preempted(input, &format!("{name} by the TPU service (capacity reclaimed)"))
        }
        S::Suspending | S::Suspended => report(Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reasons::FAILED,
            format!("queued resource is {name} by a user; delete the TpuSlice to replace it"),
        )),
        S::Failed => failed(input, qr).report(),
        _ => in_queue(&state, name).report(),
    }
}

/// A queued resource on its way (being created, in the queue, provisioning, ACTIVE with its node
/// not visible yet, deleted by someone else) or in a state not reported or not recognized yet:
/// say so (`name`: the state as GCP spells it) and look again, soon while it moves, at the
/// capacity interval while it waits.
pub(super) fn in_queue(state: &queued_resource_state::State, name: &str) -> Outcome {
    use TpuSlicePhase as P;
    use queued_resource_state::State as S;
    let (reason, phase, requeue, what) = match state {
        S::Creating => (reasons::CREATING, P::Queued, Requeue::Active, "being created"),
        S::Accepted => (
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "accepted into the queue",
        ),
        S::WaitingForResources => (
            reasons::WAITING_FOR_CAPACITY,
            P::Queued,
            Requeue::Capacity,
            "waiting for TPU capacity",
        ),
        S::Provisioning => (
            reasons::PROVISIONING,
            P::Provisioning,
            Requeue::Active,
            "capacity granted, nodes are being created",
        ),
        S::Active => (
            reasons::PROVISIONING,
            P::Provisioning,
            Requeue::Active,
            "its node is not visible yet",
        ),
        S::Deleting => (
            reasons::RECREATING,
            P::Recreating,
            Requeue::Active,
            "deleted outside the operator; it is recreated once gone",
        ),
        S::Unspecified => (
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "state not reported yet",
        ),
        _ => (
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "unrecognized state",
        ),
    };
    let message = format!("queued resource is {name}: {what}");
    let mut outcome =
        Outcome::from(Verdict::new(phase, Progress::Reconciling, reason, message).requeue(requeue));
    outcome.details.capacity = match state {
        S::WaitingForResources => Some(false),
        S::Provisioning => Some(true),
        _ => None,
    };
    outcome
}

/// When the queue gives up: `validUntilTime`, or `validUntilDuration` after the request.
fn deadline(input: &Input<'_>, qr: &QueuedResource) -> Option<DateTime<Utc>> {
    let q = input.spec.capacity.as_ref()?.queued.as_ref()?;
    if let Some(t) = &q.valid_until_time {
        return DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.with_timezone(&Utc));
    }
    let d = parse_duration(q.valid_until_duration.as_deref()?).ok()?;
    let created = DateTime::<Utc>::from_timestamp(qr.create_time.as_ref()?.seconds(), 0)?;
    Some(created + chrono::Duration::seconds(d.as_secs() as i64))
}

/// FAILED once the slice's own `validUntil` has passed is `QueueExpired`; anything else is a
/// plain failure. Either way the status carries the service's message.
///
/// The TPU API documents FAILED for an expired window ("due to unavailability of resources
/// within the constraints of the request (e.g., the 'valid until' start timing constraint
/// expired)", tpu v2 `QueuedResourceState.state`) but not the `failedData.error` code, so the
/// decision rests on the documented constraint (the deadline from the spec and the queued
/// resource's `createTime`), never on a code (docs/reliability.md, "Not verified against real
/// GCP").
fn failed(input: &Input<'_>, qr: &QueuedResource) -> Outcome {
    let error = qr
        .state
        .as_ref()
        .and_then(|s| s.failed_data())
        .and_then(|f| f.error.as_ref());
    let message = error.map(|e| e.message.clone()).unwrap_or_default();
    let expired = deadline(input, qr).is_some_and(|d| input.now >= d);
    let verdict = if expired {
        Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reasons::QUEUE_EXPIRED,
            format!("no capacity was granted before validUntil: {message}"),
        )
    } else {
        Verdict::new(
            TpuSlicePhase::Failed,
            Progress::Stalled,
            reasons::FAILED,
            format!("queued resource FAILED: {message}"),
        )
    };
    Outcome::unavailable(verdict)
}
