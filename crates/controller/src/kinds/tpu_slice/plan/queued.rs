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
    Action, Assessment, Input, Plan, Requeue, plan_absent, plan_multislice, plan_node, plan_preempted,
};

pub(super) fn plan(input: &Input<'_>) -> Plan {
    match &input.observed.queued {
        None => plan_absent(input, Action::CreateQueuedResource),
        Some(qr) => plan_queued(input, qr),
    }
}

fn plan_queued(input: &Input<'_>, qr: &QueuedResource) -> Plan {
    use TpuSlicePhase as P;
    use queued_resource_state::{State as S, StateInitiator};
    let (state, by_service) = match &qr.state {
        Some(s) => (s.state.clone(), s.state_initiator == StateInitiator::Service),
        None => (S::Unspecified, false),
    };
    let name = state.name().unwrap_or("UNRECOGNIZED");
    let waiting = |reason, phase, requeue, what: &str| {
        Plan::report(
            Assessment::new(
                Progress::Reconciling,
                reason,
                phase,
                format!("queued resource is {name}: {what}"),
            )
            .requeue(requeue),
        )
    };
    match state {
        S::Creating => waiting(reasons::CREATING, P::Queued, Requeue::Active, "being created"),
        S::Accepted => waiting(
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "accepted into the queue",
        ),
        S::WaitingForResources if deadline(input, qr).is_some_and(|d| input.now >= d) => {
            let mut a = failed(input, qr);
            a.reason = reasons::QUEUE_EXPIRED;
            a.message = "no capacity was granted before validUntil".into();
            Plan::report(a)
        }
        S::WaitingForResources => {
            let mut p = waiting(
                reasons::WAITING_FOR_CAPACITY,
                P::Queued,
                Requeue::Capacity,
                "waiting for TPU capacity",
            );
            p.assessment.capacity = Some(false);
            p
        }
        S::Provisioning => {
            let mut p = waiting(
                reasons::PROVISIONING,
                P::Provisioning,
                Requeue::Active,
                "capacity granted, nodes are being created",
            );
            p.assessment.capacity = Some(true);
            p
        }
        S::Active => match &input.observed.node {
            Some(n) if !input.names.current.other_slices.is_empty() => plan_multislice(input, n),
            Some(n) => plan_node(input, n),
            None => waiting(
                reasons::PROVISIONING,
                P::Provisioning,
                Requeue::Active,
                "its node is not visible yet",
            ),
        },
        S::Suspending | S::Suspended if by_service => {
            plan_preempted(input, &format!("{name} by the TPU service (capacity reclaimed)"))
        }
        S::Suspending | S::Suspended => Plan::report(Assessment::new(
            Progress::Stalled,
            reasons::FAILED,
            P::Failed,
            format!("queued resource is {name} by a user; delete the TpuSlice to replace it"),
        )),
        S::Failed => Plan::report(failed(input, qr)),
        S::Deleting => waiting(
            reasons::RECREATING,
            P::Recreating,
            Requeue::Active,
            "deleted outside the operator; it is recreated once gone",
        ),
        S::Unspecified => waiting(
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "state not reported yet",
        ),
        _ => waiting(
            reasons::QUEUED,
            P::Queued,
            Requeue::Capacity,
            "unrecognized state",
        ),
    }
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
fn failed(input: &Input<'_>, qr: &QueuedResource) -> Assessment {
    let error = qr
        .state
        .as_ref()
        .and_then(|s| s.failed_data())
        .and_then(|f| f.error.as_ref());
    let message = error.map(|e| e.message.clone()).unwrap_or_default();
    let expired = deadline(input, qr).is_some_and(|d| input.now >= d);
    let mut a = if expired {
        Assessment::new(
            Progress::Stalled,
            reasons::QUEUE_EXPIRED,
            TpuSlicePhase::Failed,
            format!("no capacity was granted before validUntil: {message}"),
        )
    } else {
        Assessment::new(
            Progress::Stalled,
            reasons::FAILED,
            TpuSlicePhase::Failed,
            format!("queued resource FAILED: {message}"),
        )
    };
    a.capacity = Some(false);
    a
}
