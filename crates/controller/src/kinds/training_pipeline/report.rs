//! The status a pass writes, built in one place: the stored status as the plan's record carries
//! it, the plan's verdict, what the action did, what the progress check found, the links and
//! the time spent. The plan decides and `act` learns; only this module writes status fields
//! (besides a stall, which the pass reports on its own).
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::training_pipeline::{TrainingPipelineSpec, TrainingPipelineStatus};

use super::{
    done::{Did, Done},
    links,
    observe::Reads,
    plan::Plan,
    status::time,
    time_spent,
};

/// The status as the plan decides it: the state machine's record with the verdict (the phase,
/// and the message and kstatus conditions stamped at the plan's time) and the stage conditions
/// derived from the record's stages. `suspend`: the spec's.
pub fn decided(plan: &Plan, suspend: bool) -> TrainingPipelineStatus {
    let mut st = plan.details.record.clone();
    let now = time(plan.details.now);
    if let Some(k) = &plan.verdict.kstatus {
        st.message = Some(k.message.clone());
        st.set_kstatus(k.progress, k.reason, &k.message, now.clone());
    }
    st.phase = plan.verdict.phase;
    st.set_stage_conditions(suspend, now);
    st
}

/// [`decided`] with what the action did: the status the progress check reads. A list of the
/// attempt's jobs that shows the recorded job (`list_caught_up`) confirms every create before.
pub fn acted(plan: &Plan, suspend: bool, did: &Did, list_caught_up: bool) -> TrainingPipelineStatus {
    let mut st = decided(plan, suspend);
    did.record(&mut st);
    if list_caught_up {
        st.unconfirmed_create_time = None;
    }
    st
}

/// The status this pass writes, from the stored one (`old`), what was read, the plan and what
/// the action and the progress check did.
pub fn written(
    spec: &TrainingPipelineSpec,
    old: &TrainingPipelineStatus,
    reads: &Reads,
    plan: &Plan,
    done: &Done,
) -> TrainingPipelineStatus {
    let mut st = acted(plan, spec.suspend, &done.action, reads.list_caught_up);
    done.progress.record(&mut st);
    let job = done.action.created().or(reads.job.as_ref());
    links::set(&mut st, spec, reads, job);
    time_spent::account(old, &mut st, plan.details.now);
    st
}
