//! Writing results back to Kubernetes: status by server-side apply and Events on transitions,
//! through [`Reports`] (the API server in a cluster, memory in the pass's unit tests).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Deserialize, Serialize};

use super::context::Context;
use crate::runtime::{
    clock::Clock,
    error::{ReconcileError, Result},
    events::{EventRecorder, EventType},
};

/// Where a pass's results go: the object's status and its Events. The pass, the deletion pass
/// and the status writer reach Kubernetes only through this, so they are tested without an API
/// server (a memory implementation) and run against one in a cluster ([`KubeReports`]).
#[async_trait]
pub trait Reports: Send + Sync {
    /// Server-side apply (forced, owned by `field_manager`) of `patch` to the status of object
    /// `name` in the collection at `path` (`/apis/<group>/<version>/namespaces/<ns>/<plural>`):
    /// the version written. `patch` carries `metadata.resourceVersion` when the write is
    /// conditional on it (a stale one is refused with 409 Conflict).
    async fn apply_status(
        &self,
        path: &str,
        name: &str,
        field_manager: &str,
        patch: serde_json::Value,
    ) -> Result<Option<String>>;

    /// One Event about `regarding` (a repeat within the window grows a series).
    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error>;

    /// Stamps Events with `clock` (the controllers' clock: under `local`, the emulated one).
    fn set_clock(&mut self, clock: Arc<dyn Clock>);
}

/// [`Reports`] to the API server: one recorder for the process (its cache is what turns a
/// repeated event into one Event with a growing series count instead of a new object each time).
pub struct KubeReports {
    client: kube::Client,
    recorder: EventRecorder,
}

impl KubeReports {
    pub fn new(client: kube::Client) -> Self {
        let recorder = EventRecorder::new(client.clone(), "tpu-operator", None);
        Self { client, recorder }
    }
}

#[async_trait]
impl Reports for KubeReports {
    async fn apply_status(
        &self,
        path: &str,
        name: &str,
        field_manager: &str,
        patch: serde_json::Value,
    ) -> Result<Option<String>> {
        // The request `Api::patch_status` sends, with the echoed object read only for its new
        // version: decoding it whole (its managed fields are a JSON tree per field manager) was a
        // full object decode per write, thrown away; the watch delivers the object anyway.
        let request = kube::core::Request::new(path)
            .patch_subresource(
                "status",
                name,
                &PatchParams::apply(field_manager).force(),
                &Patch::Apply(patch),
            )
            .map_err(|err| ReconcileError::kube("apply status")(kube::Error::BuildRequest(err)))?;
        let written: Written = self
            .client
            .request(request)
            .await
            .map_err(ReconcileError::kube("apply status"))?;
        Ok(written.metadata.resource_version)
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        self.recorder.publish(regarding, type_, reason, note).await
    }

    fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.recorder.set_clock(clock);
    }
}

/// Applies `status` to `obj` as the whole status owned by `field_manager`, conditional on `obj`
/// still being at version `base` (see below).
///
/// One field manager per controller and `force`: the controller is the only writer of status, and
/// fields it stops sending (a cleared pending operation, say) are removed by the server rather than
/// left stale, which a merge patch would not do.
pub async fn apply_status<K, S>(
    ctx: &Context,
    obj: &K,
    base: Option<&str>,
    field_manager: &str,
    status: &S,
) -> Result<Option<String>>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    S: Serialize,
{
    let ns = obj
        .namespace()
        .ok_or(ReconcileError::MissingMetadata("namespace"))?;
    // The status was computed from `obj` as this reconcile read it, from the watch cache. The
    // cache can lag behind the API server (our own last write not yet seen, say, when a child or
    // the cloud watch wakes the object first); written unconditionally, a status from that older
    // object would undo the newer one (a pipeline's attempt 2 back to attempt 1, seen against
    // kube-apiserver). With the object's resourceVersion in the apply, the write is conditional:
    // a stale one fails with 409 Conflict (a transient error: the object is retried once the
    // cache has caught up), as a read-modify-write must per the API conventions.
    let mut patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(rv) = base {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    let path = K::url_path(&(), Some(&ns));
    ctx.reports
        .apply_status(&path, &obj.name_any(), field_manager, patch)
        .await
}

/// What a status write's response is read for. Every other field of the echoed object is
/// skipped by the parser, not decoded.
#[derive(Deserialize)]
struct Written {
    metadata: WrittenMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

/// One Kubernetes Event a reconcile publishes about its object: every kind's transitions are
/// these, published with [`publish`] after the status write that made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

impl Transition {
    pub fn normal(reason: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            note: note.into(),
        }
    }

    pub fn warning(reason: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason: reason.into(),
            note: note.into(),
        }
    }
}

/// Publishes one transition's Event about `obj`.
pub async fn publish<K>(ctx: &Context, obj: &K, t: Transition)
where
    K: Resource<DynamicType = ()>,
{
    publish_event(ctx, obj, t.warning, &t.reason, t.note).await;
}

/// Publishes a Kubernetes Event about `obj`. Failing to publish an event never fails a reconcile.
pub async fn publish_event<K>(ctx: &Context, obj: &K, warning: bool, reason: &str, note: String)
where
    K: Resource<DynamicType = ()>,
{
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    // Notes carry cloud and workload text (a job's error, a workload's last lines) to whoever
    // reads the namespace's Events: no terminal escapes, no bidi overrides.
    let note = truncate(tpu_operator_api::text::displayable(&note), 1024);
    if let Err(e) = ctx
        .reports
        .publish(&obj.object_ref(&()), type_, reason, &note)
        .await
    {
        tracing::warn!(error = %e, reason, "failed to publish event");
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(super::truncate("aé".repeat(3), 2), "a");
        assert_eq!(super::truncate("abc".into(), 10), "abc");
    }
}
