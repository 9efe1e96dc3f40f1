//! The pipeline's links: each stage's cloud object (the PreprocessBatch child's batch, the
//! training slice's node, the Vertex custom job) and, at the top, the current stage's; the
//! children's cloud objects as the stages' `gcpName` (the Vertex job's is set where it is made);
//! and where a training slice's capacity plan stands and what interrupted it, as the train
//! stage's `capacity` and `interruptions`.
//!
//! Does not touch Kubernetes or Google Cloud.

use std::collections::BTreeMap;

use tpu_operator_api::training_pipeline::{
    StageName, TrainingMode, TrainingPipelineSpec, TrainingPipelineStatus,
};
use tpu_operator_gcp::{aiplatform_v1::model::CustomJob, logging::sources};

use super::observe::{ChildCloud, Reads};
use crate::kinds::links;

/// Sets `stages[].links` and `links` from what this pass read (`job`: the current Vertex job as
/// read or as just created). A stage keeps the links it had when nothing new was read of it (a
/// finished pipeline reads no job).
pub fn set(
    st: &mut TrainingPipelineStatus,
    spec: &TrainingPipelineSpec,
    reads: &Reads,
    job: Option<&CustomJob>,
) {
    child(st, StageName::Preprocess, &reads.preprocess);
    match spec.training.mode() {
        Ok(TrainingMode::TpuVm) => child(st, StageName::Train, &reads.train),
        _ => {
            if let Some(name) = st.custom_job_name.clone() {
                let web = web_access(st, &name, job);
                let tensorboard = spec.training.vertex.as_ref().and_then(|v| v.tensorboard.clone());
                st.stage_mut(StageName::Train).links = links::vertex_job(&name, web, tensorboard);
            }
        }
    }
    st.links = st
        .current_stage
        .and_then(|c| st.stage(c).links.clone())
        .or_else(|| st.stages.iter().rev().find_map(|s| s.links.clone()));
}

/// A child's cloud object, links and capacity plan, when this pass read them (a gone child's
/// stay).
fn child(st: &mut TrainingPipelineStatus, name: StageName, read: &ChildCloud) {
    if read.capacity.is_some() {
        st.stage_mut(name).capacity.clone_from(&read.capacity);
    }
    if read.gcp_name.is_none() && read.links.is_none() {
        return;
    }
    let stage = st.stage_mut(name);
    // Read with the child's status: what interrupts it now (a maintenance over is cleared).
    stage.interruptions.clone_from(&read.interruptions);
    if read.gcp_name.is_some() {
        stage.gcp_name.clone_from(&read.gcp_name);
    }
    if read.links.is_some() {
        stage.links.clone_from(&read.links);
    }
}

/// The current job's web access URIs: as read this pass, else as the stage had them for the
/// same job.
fn web_access(st: &TrainingPipelineStatus, name: &str, job: Option<&CustomJob>) -> BTreeMap<String, String> {
    if let Some(job) = job.filter(|j| j.name == name) {
        return job
            .web_access_uris
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    }
    let old = st.stage(StageName::Train).links.as_ref();
    match old {
        Some(l) if l.console == sources::vertex_job_console(name) => l.web_access.clone(),
        _ => BTreeMap::new(),
    }
}
