//! The Kubernetes calls of the Kueue integration: the object's Workload (read, create, change,
//! release, delete, let go), the WorkloadPriorityClass its label names, and its position from Kueue's visibility
//! API. The operator's own identity makes them (its chart grants `workloads`, `workloads/status`
//! and `workloadpriorityclasses` when `kueue.enabled`).

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde::Deserialize;

use super::{
    IN_USE_FINALIZER, gate,
    workload::{Workload, WorkloadSpec},
};

/// Why a Kueue call failed.
pub type Error = kube::Error;

/// The Workload `name` in `namespace`, or `None` when it does not exist.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<Option<Workload>, Error> {
    Api::<Workload>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
}

/// Creates the Workload `name` for `owner` (its controller: deleted with it by the garbage
/// collector). An existing one (a create whose reply was lost) is fine: the next pass reads it.
pub async fn create(
    client: &Client,
    namespace: &str,
    name: &str,
    owner: OwnerReference,
    spec: WorkloadSpec,
) -> Result<(), Error> {
    let mut wl = Workload::new(name, spec);
    wl.metadata.namespace = Some(namespace.to_string());
    wl.metadata.owner_references = Some(vec![owner]);
    wl.metadata.finalizers = Some(vec![IN_USE_FINALIZER.to_string()]);
    wl.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_string(),
            "tpu-operator".to_string(),
        )]
        .into(),
    );
    match Api::<Workload>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &wl)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Releases an evicted Workload's reservation once its cloud work is stopped
/// ([`gate::release_patch`]); one being deleted is let go instead ([`let_go`]). A conflict
/// (Kueue wrote meanwhile) is returned: the pass retries on the fresh Workload.
pub async fn release(
    client: &Client,
    wl: &Workload,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if wl.metadata.deletion_timestamp.is_some() {
        return let_go(client, wl).await;
    }
    let namespace = wl.metadata.namespace.as_deref().unwrap_or_default();
    let name = wl.metadata.name.as_deref().unwrap_or_default();
    let patch = gate::release_patch(wl, reason, message, now);
    Api::<Workload>::namespaced(client.clone(), namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Changes the Workload by a merge `patch` (of its spec or metadata; never its status) and
/// returns it as written.
pub async fn patch(client: &Client, wl: &Workload, patch: &serde_json::Value) -> Result<Workload, Error> {
    let namespace = wl.metadata.namespace.as_deref().unwrap_or_default();
    let name = wl.metadata.name.as_deref().unwrap_or_default();
    Api::<Workload>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Deletes the Workload and lets it go ([`let_go`]): its work is gone, so the quota is free at
/// once rather than when the garbage collector gets to it. Already gone is fine.
pub async fn delete(client: &Client, namespace: &str, name: &str) -> Result<(), Error> {
    match Api::<Workload>::namespaced(client.clone(), namespace)
        .delete(name, &Default::default())
        .await
    {
        // Still there (held by the finalizer): the deleted object it was, to let go.
        Ok(deleted) => match deleted.left() {
            Some(held) => let_go(client, &held).await,
            None => Ok(()),
        },
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the operator's finalizer ([`IN_USE_FINALIZER`]) once nothing of the Workload's work
/// bills, so that its deletion completes and Kueue hands the quota on. Conditional on the
/// `resourceVersion` read (the list is written whole); gone, or without the finalizer, is fine.
pub async fn let_go(client: &Client, wl: &Workload) -> Result<(), Error> {
    let finalizers = wl.metadata.finalizers.as_deref().unwrap_or_default();
    if !finalizers.iter().any(|f| f == IN_USE_FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = finalizers.iter().filter(|f| *f != IN_USE_FINALIZER).collect();
    let patch = serde_json::json!({"metadata": {
        "finalizers": rest,
        "resourceVersion": wl.metadata.resource_version,
    }});
    match self::patch(client, wl, &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The value of WorkloadPriorityClass `name`; `None` when it does not exist.
pub async fn priority(client: &Client, name: &str) -> Result<Option<i32>, Error> {
    let gvk = GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "WorkloadPriorityClass");
    let resource = ApiResource::from_gvk(&gvk);
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    Ok(api.get_opt(name).await?.map(|class| {
        class
            .data
            .get("value")
            .and_then(serde_json::Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(0)
    }))
}

#[derive(Deserialize)]
struct PendingWorkloads {
    #[serde(default)]
    items: Vec<PendingWorkload>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingWorkload {
    metadata: kube::core::ObjectMeta,
    position_in_local_queue: i32,
}

/// The Workload's position in its LocalQueue, 1 being the next to be admitted, from Kueue's
/// visibility API (`visibility.kueue.x-k8s.io/v1beta2`, served through API aggregation when
/// Kueue's `VisibilityOnDemand` is on). `None` when the API is not served, the caller may not
/// read it, or the Workload is not in the queue's pending list: the position is information,
/// never a reason to fail a pass.
pub async fn position(client: &Client, namespace: &str, queue: &str, workload: &str) -> Option<i32> {
    let path = format!(
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{queue}/pendingworkloads"
    );
    let request = http::Request::get(path).body(Vec::new()).ok()?;
    let pending: PendingWorkloads = match client.request(request).await {
        Ok(p) => p,
        Err(err) => {
            tracing::debug!(error = %err, queue, "Kueue's visibility API did not answer; no position");
            return None;
        }
    };
    pending
        .items
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(workload))
        .map(|p| p.position_in_local_queue + 1)
}
