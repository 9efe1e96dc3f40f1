//! `spec.capacityPlan`: which rung and zone a pass works on, and whether the slice moves on.
//!
//! A pass runs the slice as if its spec named one zone and one kind of capacity
//! (`TpuSliceSpec::at`): the place `status.capacityPlan` records. Moving on is a status-only
//! step that also counts a move, so the next place is a new incarnation (a node id and create
//! request id of its own) and the place left behind becomes the *previous* incarnation, which
//! the pass deletes and sees gone before it creates anything (`plan::plan_absent`), as after a
//! preemption. So a slice never has requests alive on two rungs, across crashes too: what a
//! pass has not written to status it decides again.
//!
//! Pure: no Kubernetes, no Google Cloud.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tpu_operator_api::{
    conditions::{Progress, reasons},
    duration::parse_duration,
    tpu_slice::{
        AttemptOutcome, CapacityMode, CapacityPlanStatus, KEPT_ATTEMPTS, PlanPlace, RungAttempt,
        TpuSlicePhase, TpuSliceSpec, TpuSliceStatus,
    },
};

use super::{
    observe::Observed,
    plan::{Action, Details, Outcome, Requeue, Verdict},
};
use crate::{
    governance::{pricing::PriceTable, tenancy},
    runtime::clock::k8s_time as time,
};

/// What a create asks of the namespace's policy at every place of `spec`'s plan. One copy of
/// the spec is moved from place to place: a spec may carry 0.5 MiB of metadata, and a plan has
/// up to 64 places.
pub fn requests(spec: &TpuSliceSpec, project: &str, prices: &PriceTable) -> Vec<tenancy::Request> {
    let Some(plan) = &spec.capacity_plan else {
        return Vec::new();
    };
    let mut at = spec.at(spec.first_place().as_ref());
    spec.places()
        .iter()
        .filter_map(|p| {
            at.zone.clone_from(&p.zone);
            at.capacity = Some(plan.rungs[p.rung].capacity.clone());
            super::policy::request(&at, project, prices)
        })
        .collect()
}

/// The rung's capacity member name (`spot`, `reserved`, ...).
fn kind_of(spec: &TpuSliceSpec, place: &PlanPlace) -> &'static str {
    spec.capacity_plan
        .as_ref()
        .and_then(|p| p.rungs.get(place.rung))
        .map_or("onDemand", |r| r.mode().field())
}

/// How long the slice waits at `place` before moving on: the rung's `waitFor`; unset, nothing
/// for a kind that is refused at once (on-demand, spot) and for ever for one that waits.
fn patience(spec: &TpuSliceSpec, place: &PlanPlace) -> Option<Duration> {
    let rung = spec.capacity_plan.as_ref()?.rungs.get(place.rung)?;
    match &rung.wait_for {
        Some(d) => parse_duration(d).ok(),
        None => matches!(rung.mode(), CapacityMode::OnDemand | CapacityMode::Spot).then_some(Duration::ZERO),
    }
}

/// The place after `place`, in plan order.
fn next(spec: &TpuSliceSpec, place: &PlanPlace) -> Option<PlanPlace> {
    let places = spec.places();
    let at = places.iter().position(|p| p == place)?;
    places.get(at + 1).cloned()
}

/// When the slice moves on from where `status` stands if capacity does not come (`None`: it does
/// not: the last place, a kind that waits for ever, or already landed).
pub fn deadline(spec: &TpuSliceSpec, status: &CapacityPlanStatus) -> Option<DateTime<Utc>> {
    let place = status.place();
    next(spec, &place)?;
    if status
        .attempts
        .last()
        .is_some_and(|a| a.outcome == AttemptOutcome::Landed)
    {
        return None;
    }
    let wait = chrono::Duration::from_std(patience(spec, &place)?).ok()?;
    let since = DateTime::<Utc>::from_timestamp(status.since.0.as_second(), 0)?;
    Some(since + wait)
}

/// Whether the pass found no capacity where it asked: a stockout (or the stockout memory holding
/// the create back), an exhausted quota, a queued request not granted, or one the service gave
/// up on. A rate limit, Kueue, a policy or an invalid spec say nothing about the place's capacity.
fn refused(a: &Outcome) -> bool {
    given_up(a)
        || matches!(
            reason(a),
            reasons::WAITING_FOR_CAPACITY | reasons::QUOTA_EXCEEDED | reasons::QUEUED
        )
}

/// A queued request the service will not grant any more: expired, or FAILED (e.g. its
/// reservation is gone). Waiting out `waitFor` there gains nothing.
fn given_up(a: &Outcome) -> bool {
    reason(a) == reasons::QUEUE_EXPIRED || (reason(a) == reasons::FAILED && a.details.capacity == Some(false))
}

/// The reason the pass reports (none when it leaves the conditions as they are).
fn reason(a: &Outcome) -> &'static str {
    a.verdict.kstatus.as_ref().map_or("", |k| k.reason)
}

/// The message the pass reports (none when it leaves the conditions as they are).
fn message(a: &Outcome) -> String {
    a.verdict
        .kstatus
        .as_ref()
        .map_or_else(String::new, |k| k.message.clone())
}

/// What the pass saw, for [`after_pass`].
pub struct Turn<'a> {
    /// The spec as declared (with its plan).
    pub spec: &'a TpuSliceSpec,
    pub old: Option<&'a CapacityPlanStatus>,
    /// The new status's preemptions and suspensions together: the incarnation without moves.
    pub base: u32,
    /// This pass counted a preemption or a suspension: the node here is lost.
    pub lost: bool,
    /// What the pass reports.
    pub outcome: &'a Outcome,
    /// No earlier incarnation's node or queued resource exists (read this pass).
    pub earlier_gone: bool,
    pub now: DateTime<Utc>,
}

/// The plan's status after a pass, and the message of a move if the pass moved on (`None`: no
/// plan).
pub fn after_pass(turn: &Turn<'_>) -> Option<(CapacityPlanStatus, Option<String>)> {
    let first = turn.spec.first_place()?;
    let mut st = turn.old.cloned().unwrap_or_else(|| CapacityPlanStatus {
        rung: 0,
        zone: first.zone.clone(),
        since: time(turn.now),
        moves: 0,
        attempts: Vec::new(),
    });
    if turn.lost {
        restart(turn, &mut st, &first);
        return Some((st, None));
    }
    let incarnation = incarnation(turn.base, &st);
    if st.attempts.last().is_none_or(|a| a.incarnation != incarnation) {
        let here = st.place();
        open(turn, &mut st, &here, incarnation);
    }
    let attempt = st.attempts.last_mut().expect("just opened");
    attempt.reason = reason(turn.outcome).to_owned();
    attempt.message = message(turn.outcome);
    if turn.outcome.verdict.phase == TpuSlicePhase::Ready {
        attempt.outcome = AttemptOutcome::Landed;
    }
    let moved = move_on(turn, &mut st, incarnation);
    Some((st, moved))
}

/// The plan's status after this pass (whose action was `action`, and which reports `outcome`),
/// and what status reports: on a move, the slice waits for capacity on the next rung (what
/// failed where it stood is behind it), and looks again at once.
pub fn settle(
    spec: &TpuSliceSpec,
    old: &TpuSliceStatus,
    observed: &Observed,
    action: &Action,
    outcome: Outcome,
    now: DateTime<Utc>,
) -> (Option<CapacityPlanStatus>, Outcome) {
    if *action == Action::ReturnToGranted
        && let Some(back) = old.capacity_plan.as_ref().and_then(|p| go_back(p, now))
    {
        return (Some(back), outcome);
    }
    let lost = matches!(action, Action::RecordPreemption | Action::RecordSuspension);
    let moves = old.capacity_plan.as_ref().map_or(0, |p| p.moves.max(0) as u32);
    let settled = after_pass(&Turn {
        spec,
        old: old.capacity_plan.as_ref(),
        base: old.incarnation() - moves + u32::from(lost),
        lost,
        outcome: &outcome,
        earlier_gone: observed.previous_node.is_none() && observed.previous_queued.is_none(),
        now,
    });
    let Some((status, moved)) = settled else {
        return (None, outcome);
    };
    let Some(message) = moved else {
        return (Some(status), outcome);
    };
    let verdict = Verdict::new(
        TpuSlicePhase::Waiting,
        Progress::Reconciling,
        reasons::WAITING_FOR_CAPACITY,
        message,
    )
    .requeue(Requeue::Active);
    let details = Details {
        capacity: Some(false),
        drift: None,
        failure: outcome.details.failure,
    };
    (Some(status), Outcome { verdict, details })
}

/// Undoes the last move: the request left behind was granted after all. The attempt of the
/// incarnation moved to goes (nothing was created for it), the one before asks again, and the
/// incarnation number falls back to it, whose request exists.
fn go_back(plan: &CapacityPlanStatus, now: DateTime<Utc>) -> Option<CapacityPlanStatus> {
    let mut st = plan.clone();
    let [.., left, _] = st.attempts.as_slice() else {
        return None;
    };
    if left.outcome != AttemptOutcome::MovedOn || st.moves < 1 {
        return None;
    }
    st.attempts.pop();
    st.moves -= 1;
    let back = st.attempts.last_mut()?;
    back.outcome = AttemptOutcome::Trying;
    back.end_time = None;
    back.message = format!(
        "granted after the slice had moved on: back here at {}",
        time(now).0
    );
    st.rung = back.rung;
    st.zone = back.zone.clone();
    st.since = back.start_time.clone();
    Some(st)
}

fn incarnation(base: u32, st: &CapacityPlanStatus) -> i32 {
    i32::try_from(base)
        .unwrap_or(i32::MAX)
        .saturating_add(st.moves.max(0))
}

/// The slice moves to the next place when nothing of an earlier incarnation is left, this place
/// refused, and its patience ran out (or its request expired).
fn move_on(turn: &Turn<'_>, st: &mut CapacityPlanStatus, incarnation: i32) -> Option<String> {
    let here = st.place();
    let to = next(turn.spec, &here)?;
    if !turn.earlier_gone || !refused(turn.outcome) {
        return None;
    }
    if !given_up(turn.outcome) && deadline(turn.spec, st).is_none_or(|d| turn.now < d) {
        return None;
    }
    let message = format!(
        "no {} capacity in {} ({}): moving on to rung {} ({} in {})",
        kind_of(turn.spec, &here),
        here.zone,
        reason(turn.outcome),
        to.rung + 1,
        kind_of(turn.spec, &to),
        to.zone,
    );
    if let Some(last) = st.attempts.last_mut() {
        last.outcome = AttemptOutcome::MovedOn;
        last.end_time = Some(time(turn.now));
        last.message = format!("{}; {message}", last.message);
    }
    st.moves += 1;
    open(turn, st, &to, incarnation + 1);
    Some(message)
}

/// The node was lost: the attempt that held it ends, and the plan starts again at its first place
/// with the new incarnation.
fn restart(turn: &Turn<'_>, st: &mut CapacityPlanStatus, first: &PlanPlace) {
    if let Some(last) = st.attempts.last_mut().filter(|a| a.end_time.is_none()) {
        last.outcome = if last.outcome == AttemptOutcome::Landed {
            AttemptOutcome::Lost
        } else {
            AttemptOutcome::MovedOn
        };
        last.end_time = Some(time(turn.now));
        last.reason = reason(turn.outcome).to_owned();
        last.message = message(turn.outcome);
    }
    let incarnation = incarnation(turn.base, st);
    open(turn, st, first, incarnation);
}

/// Starts asking at `place` as incarnation `incarnation`.
fn open(turn: &Turn<'_>, st: &mut CapacityPlanStatus, place: &PlanPlace, incarnation: i32) {
    st.rung = i32::try_from(place.rung).unwrap_or(0);
    st.zone = place.zone.clone();
    st.since = time(turn.now);
    st.attempts.push(RungAttempt {
        rung: st.rung,
        capacity: kind_of(turn.spec, place).to_owned(),
        zone: place.zone.clone(),
        incarnation,
        outcome: AttemptOutcome::Trying,
        reason: String::new(),
        message: String::new(),
        start_time: time(turn.now),
        end_time: None,
    });
    let excess = st.attempts.len().saturating_sub(KEPT_ATTEMPTS);
    st.attempts.drain(..excess);
}

#[cfg(test)]
mod tests;
