//! An owned child (the PreprocessBatch, the TpuSlice) read by name: whether this pipeline
//! controls it, and its state from its kstatus conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, Resource, ResourceExt};
use tpu_operator_api::common::{CostEstimate, Links};
use tpu_operator_api::{
    conditions::{Progress, find_condition, progress_of, types},
    training_pipeline::TrainingPipeline,
};

use super::super::plan::Child;
use crate::reconcile::handles::Io;
use crate::runtime::error::{ReconcileError, Result};

/// What the pipeline reads of a child's status.
#[derive(Clone, Debug, Default)]
pub(super) struct ChildStatus {
    pub conditions: Vec<Condition>,
    pub cost: Option<CostEstimate>,
    pub links: Option<Links>,
    /// The child's cloud object (its batch, its node).
    pub gcp_name: Option<String>,
    /// Where a slice child's capacity plan stands (`CapacityPlanStatus::summary`).
    pub capacity: Option<String>,
    /// What interrupted a slice child (none: nothing did).
    pub interruptions: Option<tpu_operator_api::training_pipeline::Interruptions>,
}

/// An owned child's state from its metadata and kstatus conditions, and what else the pipeline
/// reads of its status (nothing of a child it does not control).
pub(super) async fn child<K, F>(
    io: &Io<'_>,
    tp: &TrainingPipeline,
    name: &str,
    status_of: F,
) -> Result<(Child, ChildStatus)>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    F: Fn(&K) -> Option<ChildStatus>,
{
    let ns = tp
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))?;
    let api: Api<K> = Api::namespaced(io.client.clone(), &ns);
    let Some(obj) = api
        .get_opt(name)
        .await
        .map_err(ReconcileError::kube("get owned child"))?
    else {
        return Ok((Child::Absent, ChildStatus::default()));
    };
    if !controlled_by(obj.meta(), tp) {
        return Ok((Child::NotOwned, ChildStatus::default()));
    }
    let status = status_of(&obj).unwrap_or_default();
    if obj.meta().deletion_timestamp.is_some() {
        return Ok((Child::Deleting, status));
    }
    Ok((state_of(&status.conditions), status))
}

/// Whether the pipeline is the object's controller (its controlling ownerReference names the
/// pipeline's UID): an object of the same name that someone else made is not this child.
fn controlled_by(meta: &kube::api::ObjectMeta, tp: &TrainingPipeline) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == tp.metadata.uid.as_ref())
}

/// A live owned child's state from its kstatus conditions.
fn state_of(conds: &[Condition]) -> Child {
    let text = |t: &str| {
        find_condition(conds, t)
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    };
    match progress_of(conds) {
        Some(Progress::Ready) => Child::Ready {
            message: text(types::READY).1,
        },
        Some(Progress::Stalled) => {
            let (reason, message) = text(types::STALLED);
            Child::Stalled { reason, message }
        }
        Some(Progress::Reconciling) => {
            let (reason, message) = text(types::RECONCILING);
            Child::Progressing { reason, message }
        }
        Some(Progress::Idle) => {
            let (reason, message) = text(types::READY);
            Child::Progressing { reason, message }
        }
        None => Child::Progressing {
            reason: "Pending".into(),
            message: "not reconciled yet".into(),
        },
    }
}
