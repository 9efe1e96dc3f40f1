//! The status a pass writes, built in one place: the stored status, the plan's record (what the
//! state machine decided) and verdict, what the action did, what the progress check found, the links and
//! the time spent. The plan decides and `act` learns; only this module writes status fields
//! (besides a stall, which the pass reports on its own).
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    common::CostEstimate,
    training_pipeline::{TrainingPipeline, TrainingPipelineSpec, TrainingPipelineStatus},
};

use super::{
    done::{Did, Done},
    links,
    observe::Reads,
    plan::{Observed, Plan, Record},
    status::{self, time},
    time_spent,
};

/// What a status is built on besides the plan: the pipeline as stored and what the pass read
/// that the status shows but the plan does not decide (the children's cost estimates).
pub struct Basis<'a> {
    pub spec: &'a TrainingPipelineSpec,
    /// The stored status: every field the plan and `act` leave alone stays as it is.
    pub old: &'a TrainingPipelineStatus,
    /// `metadata.generation`: the status describes it.
    pub generation: Option<i64>,
    pub costs: &'a [CostEstimate],
}

impl<'a> Basis<'a> {
    /// For a pass over `tp` (as targeted: its artifacts expanded) whose stored status is `old`.
    pub fn of(tp: &'a TrainingPipeline, old: &'a TrainingPipelineStatus, observed: &'a Observed) -> Self {
        Basis {
            spec: &tp.spec,
            old,
            generation: tp.metadata.generation,
            costs: &observed.costs,
        }
    }
}

/// The status as the plan decides it: the stored status with the plan's record, the generation,
/// the training shape and the cost, then the verdict (the phase, and the message and kstatus
/// conditions stamped at the plan's time) and the stage conditions derived from the record's
/// stages.
pub fn decided(basis: &Basis, plan: &Plan) -> TrainingPipelineStatus {
    let mut st = recorded(basis.old, &plan.details.record);
    let now = time(plan.details.now);
    // Set first: the conditions below are stamped with it.
    st.observed_generation = basis.generation;
    // A spec whose training mode is invalid keeps the shape it had (it fails as `InvalidSpec`).
    if let (Ok(_), Some((accelerator, chips))) =
        (basis.spec.training.mode(), status::accelerator_of(basis.spec))
    {
        st.accelerator_type = Some(accelerator);
        st.chips = Some(chips);
    }
    st.estimated_cost =
        status::aggregate_cost(basis.old.estimated_cost.as_ref(), basis.costs, plan.details.now);
    if let Some(k) = &plan.verdict.kstatus {
        st.message = Some(k.message.clone());
        st.set_kstatus(k.progress, k.reason, &k.message, now.clone());
    }
    st.phase = plan.verdict.phase;
    st.set_stage_conditions(basis.spec.suspend, now);
    st
}

/// `old` with the record's fields as the plan left them. Taken apart whole, so a field added
/// to [`Record`] is written here or the build fails.
fn recorded(old: &TrainingPipelineStatus, record: &Record) -> TrainingPipelineStatus {
    let Record {
        current_stage,
        stages,
        custom_job_name,
        pending_operation,
        attempts,
        start_time,
        completion_time,
        reaped_time,
        outputs,
        rerun,
        kept_slice,
        suspension,
        budget_suspension,
        kueue,
    } = record.clone();
    TrainingPipelineStatus {
        current_stage,
        stages,
        custom_job_name,
        pending_operation,
        attempts,
        start_time,
        completion_time,
        reaped_time,
        outputs,
        rerun,
        kept_slice,
        suspension,
        budget_suspension,
        kueue,
        ..old.clone()
    }
}

/// [`decided`] with what the action did: the status the progress check reads. A list of the
/// attempt's jobs that shows the recorded job (`list_caught_up`) confirms every create before.
pub fn acted(basis: &Basis, plan: &Plan, did: &Did, list_caught_up: bool) -> TrainingPipelineStatus {
    let mut st = decided(basis, plan);
    did.record(&mut st);
    if list_caught_up {
        st.unconfirmed_create_time = None;
    }
    st
}

/// The status this pass writes, from the stored one, what was read, the plan and what the
/// action and the progress check did.
pub fn written(basis: &Basis, reads: &Reads, plan: &Plan, done: &Done) -> TrainingPipelineStatus {
    let mut st = acted(basis, plan, &done.action, reads.list_caught_up);
    done.progress.record(&mut st);
    let job = done.action.created().or(reads.job.as_ref());
    links::set(&mut st, basis.spec, reads, job);
    time_spent::account(basis.old, &mut st, plan.details.now);
    st
}
