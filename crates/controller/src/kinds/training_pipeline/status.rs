//! What the pipeline's status is built with besides its own methods (stage entries and
//! conditions live beside the type, in the api crate): times, the training shape, cost, a stall
//! and the Events of a status change.

use chrono::{DateTime, Utc};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use tpu_operator_api::{
    accelerator::{SliceShape, parse_accelerator_type, shape_from_config},
    common::CostEstimate,
    conditions::{self, Progress, reasons, types},
    training_pipeline::{TrainingPipelinePhase, TrainingPipelineSpec, TrainingPipelineStatus},
};

use crate::reconcile::{report::Transition, waits::stall_waits};

/// The one writer of `TrainingPipeline.status`.
pub const FIELD_MANAGER: &str = "trainingpipeline.tpu-operator.dev/controller";

pub fn time(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_millisecond(t.timestamp_millis()).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub fn to_chrono(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.0.as_millisecond()).unwrap_or_default()
}

/// Accelerator type and chip count of the training stage, for the printer columns.
pub fn accelerator_of(spec: &TrainingPipelineSpec) -> Option<(String, i32)> {
    let shape = training_shape(spec)?;
    Some((shape.accelerator_type(), i32::try_from(shape.chips).ok()?))
}

/// The TPU shape training runs on: the Vertex worker pool's, or one TPU VM slice's (a multislice
/// holds `slices` of it). `None` for a spec whose shape is invalid (admission refuses those).
pub fn training_shape(spec: &TrainingPipelineSpec) -> Option<SliceShape> {
    if let Some(v) = &spec.training.vertex {
        return v.tpu_shape();
    }
    let slice = &spec.training.tpu_vm.as_ref()?.slice;
    match (&slice.accelerator_type, &slice.accelerator_config) {
        (Some(t), _) => parse_accelerator_type(t).ok(),
        (None, Some(c)) => shape_from_config(c.type_, &c.topology).ok(),
        (None, None) => None,
    }
}

/// Estimated cost of a Vertex job from its run time (`startTime` to `endTime`, or now while it
/// runs) at the machine type's price. `None` before it starts (queued / pending time is not billed).
pub fn vertex_cost(
    v: &tpu_operator_api::training_pipeline::VertexTraining,
    job: &tpu_operator_gcp::aiplatform_v1::model::CustomJob,
    prices: &crate::governance::pricing::PriceTable,
    now: DateTime<Utc>,
) -> Option<CostEstimate> {
    let start = job.start_time.as_ref()?.seconds();
    let end = job.end_time.as_ref().map(|t| t.seconds());
    let (rate, key) = super::policy::vertex_per_hour(v, prices);
    let hours = (end.unwrap_or(now.timestamp()) - start).max(0) as f64 / 3600.0;
    Some(CostEstimate {
        so_far_usd: crate::governance::pricing::round_usd(rate * hours),
        per_hour_usd: if end.is_none() {
            crate::governance::pricing::round_usd(rate)
        } else {
            0.0
        },
        price_key: Some(key),
        accrued_through: None,
    })
}

/// The children's estimates summed (PreprocessBatch, TpuSlice, and the current Vertex job), each
/// brought up to `now`: a settled slice writes its status rarely, and its `soFarUsd` grows by
/// `perHourUsd` from its `accruedThrough` (a pipeline that finished training on it would
/// otherwise report the slice's spend as of when it became ready). The spend so far never goes
/// down when a released slice disappears.
pub fn aggregate_cost(
    old: Option<&CostEstimate>,
    children: &[CostEstimate],
    now: DateTime<Utc>,
) -> Option<CostEstimate> {
    if children.is_empty() && old.is_none() {
        return None;
    }
    // Folded from +0.0: an empty f64 `sum` is -0.0, which status would show as "-0".
    let sum = children.iter().fold(0.0, |total, c| total + accrued(c, now));
    Some(CostEstimate {
        so_far_usd: old.map_or(0.0, |o| o.so_far_usd).max(sum),
        per_hour_usd: children.iter().fold(0.0, |total, c| total + c.per_hour_usd),
        price_key: None,
        accrued_through: None,
    })
}

/// `old` stalled for `reason` (the phase and stages as they were).
pub fn stalled(
    old: &TrainingPipelineStatus,
    generation: Option<i64>,
    reason: &'static str,
    message: &str,
    retry: bool,
    now: DateTime<Utc>,
) -> TrainingPipelineStatus {
    let mut new = old.clone();
    new.observed_generation = generation;
    if stall_waits(reason, retry) {
        new.phase = TrainingPipelinePhase::Waiting;
    }
    new.message = Some(message.to_string());
    new.set_kstatus(Progress::Stalled, reason, message, time(now));
    new
}

/// The Events of a status change: the pipeline's other Events come from its plan and progress
/// (published by the pass that decided them); only a new stall by the policy or by another
/// pipeline writing the same directories is seen here.
pub fn transitions(old: &TrainingPipelineStatus, new: &TrainingPipelineStatus) -> Vec<Transition> {
    let stalled = |s: &TrainingPipelineStatus, reason: &str| {
        conditions::find_condition(&s.conditions, types::STALLED)
            .is_some_and(|c| c.status == conditions::status::TRUE && c.reason == reason)
    };
    [reasons::POLICY_DENIED, reasons::ARTIFACTS_IN_USE]
        .into_iter()
        .filter(|reason| stalled(new, reason) && !stalled(old, reason))
        .map(|reason| Transition::warning(reason, new.message.clone().unwrap_or_default()))
        .collect()
}

/// `c`'s spend so far as of `now` (as written when it has no `accruedThrough`), to the cent.
fn accrued(c: &CostEstimate, now: DateTime<Utc>) -> f64 {
    let since = c
        .accrued_through
        .as_ref()
        .and_then(|t| DateTime::<Utc>::from_timestamp(t.0.as_second(), 0));
    let Some(since) = since.filter(|s| *s < now) else {
        return c.so_far_usd;
    };
    let hours = (now - since).num_seconds() as f64 / 3600.0;
    ((c.so_far_usd + c.per_hour_usd * hours) * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(so_far: f64, per_hour: f64) -> CostEstimate {
        CostEstimate {
            so_far_usd: so_far,
            per_hour_usd: per_hour,
            price_key: None,
            accrued_through: None,
        }
    }

    #[test]
    fn cost_sums_children_and_never_decreases() {
        let now = Utc::now();
        assert_eq!(aggregate_cost(None, &[], now), None);
        let both = aggregate_cost(None, &[cost(1.0, 0.0), cost(2.5, 10.0)], now).unwrap();
        assert_eq!((both.so_far_usd, both.per_hour_usd), (3.5, 10.0));
        // The slice was released: its share stays in the total, the burn rate drops.
        let after = aggregate_cost(Some(&both), &[cost(1.0, 0.0)], now).unwrap();
        assert_eq!((after.so_far_usd, after.per_hour_usd), (3.5, 0.0));
    }

    /// A slice that settled when it became ready (its estimate written then) still burns: the
    /// pipeline counts its spend up to now, not up to its last status write.
    #[test]
    fn a_settled_childs_estimate_is_accrued_up_to_now() {
        let ready = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let slice = CostEstimate {
            accrued_through: Some(Time(Timestamp::from_second(ready.timestamp()).unwrap())),
            ..cost(0.10, 6.0)
        };
        let batch = cost(0.02, 0.0);
        let later = ready + chrono::Duration::minutes(10);
        let total = aggregate_cost(None, &[batch.clone(), slice.clone()], later).unwrap();
        assert_eq!(
            total.so_far_usd,
            0.02 + 1.10,
            "0.10 + 6 $/h for 10 min, and the batch"
        );
        let before = aggregate_cost(None, &[batch, slice], ready - chrono::Duration::minutes(1));
        let before = before.unwrap().so_far_usd;
        assert!((before - 0.12).abs() < 1e-9, "never accrued backwards: {before}");
    }
}
