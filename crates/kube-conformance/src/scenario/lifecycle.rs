//! Deletion: finalizers (deletionTimestamp, no new finalizers, removal of the last one) and
//! ownerReference garbage collection with background, foreground and orphan propagation, for a
//! built-in kind and for a custom resource owned by a built-in one.

use kube::core::params::{DeleteParams, GetParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{bytes, core, custom::widget, meta_str, widgets};
use crate::transcript::{SendError, Session};

pub(super) async fn run(s: &mut Session) -> Result<(), SendError> {
    finalizers(s).await?;
    garbage_collection(s).await
}

const HOLD: &str = "conformance.tpu-operator.dev/hold";

async fn finalizers(s: &mut Session) -> Result<(), SendError> {
    let merge = PatchParams::default();
    let mut held = widget("held", json!({"size": 1}));
    held["metadata"]["finalizers"] = json!([HOLD]);
    s.send(
        "finalizer: create with finalizer",
        widgets().create(&PostParams::default(), bytes(&held)),
        201,
    )
    .await?;
    s.send(
        "finalizer: delete sets deletionTimestamp",
        widgets().delete("held", &DeleteParams::default()),
        200,
    )
    .await?;
    s.send(
        "finalizer: object still readable",
        widgets().get("held", &GetParams::default()),
        200,
    )
    .await?;
    s.send(
        "finalizer: delete again is accepted",
        widgets().delete("held", &DeleteParams::default()),
        200,
    )
    .await?;
    let add = Patch::Merge(json!({"metadata": {"finalizers": [HOLD, "conformance.tpu-operator.dev/late"]}}));
    s.send(
        "finalizer: adding one while deleting is rejected",
        widgets().patch("held", &merge, &add),
        422,
    )
    .await?;
    let spec = Patch::Merge(json!({"spec": {"size": 2}}));
    s.send(
        "finalizer: spec update while deleting",
        widgets().patch("held", &merge, &spec),
        200,
    )
    .await?;
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    s.send(
        "finalizer: removing the last finalizer",
        widgets().patch("held", &merge, &release),
        200,
    )
    .await?;
    let gone = |status: u16, _: &Value| status == 404;
    s.poll_until(
        "finalizer: object gone",
        || widgets().get("held", &GetParams::default()),
        404,
        gone,
    )
    .await?;
    Ok(())
}

fn owned_configmap(name: &str, owner: &Value, block: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": meta_str(owner, "name"),
        "uid": meta_str(owner, "uid"), "blockOwnerDeletion": block}]}})
}

async fn family(s: &mut Session, policy: &str) -> Result<(), SendError> {
    let pp = PostParams::default();
    let owner =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("owner-{policy}")}});
    let owner = s
        .send(
            &format!("gc {policy}: create owner"),
            core("configmaps").create(&pp, bytes(&owner)),
            201,
        )
        .await?;
    let child = owned_configmap(&format!("child-{policy}"), &owner, true);
    s.send(
        &format!("gc {policy}: create child"),
        core("configmaps").create(&pp, bytes(&child)),
        201,
    )
    .await?;
    let mut custom = widget(&format!("child-{policy}"), json!({"size": 1}));
    custom["metadata"]["ownerReferences"] =
        owned_configmap("", &owner, false)["metadata"]["ownerReferences"].clone();
    s.send(
        &format!("gc {policy}: create custom-resource child"),
        widgets().create(&pp, bytes(&custom)),
        201,
    )
    .await?;
    Ok(())
}

async fn garbage_collection(s: &mut Session) -> Result<(), SendError> {
    dangling_owner(s).await?;
    background(s).await?;
    foreground(s).await?;
    orphan(s).await
}

/// A poll's end: the object is gone.
fn gone(status: u16, _: &Value) -> bool {
    status == 404
}

/// A poll's end: the dependent is still there, its ownerReferences removed.
fn orphaned(status: u16, v: &Value) -> bool {
    status == 200 && v["metadata"].get("ownerReferences").is_none()
}

type GetRequest = Result<http::Request<Vec<u8>>, kube::core::request::Error>;

/// A GET of ConfigMap `name`, repeatable for polling.
fn get_cm(name: &'static str) -> impl Fn() -> GetRequest {
    move || core("configmaps").get(name, &GetParams::default())
}

/// A GET of widget `name`, repeatable for polling.
fn get_widget(name: &'static str) -> impl Fn() -> GetRequest {
    move || widgets().get(name, &GetParams::default())
}

/// A dependent of an owner that never existed is collected.
async fn dangling_owner(s: &mut Session) -> Result<(), SendError> {
    // The real garbage collector watches a kind only after its discovery resync (every 30 s) has
    // seen it, and until then deletes a new kind's dependents instead of orphaning them. A child of
    // an owner that never existed is collected exactly when the collector watches widgets, so
    // waiting for that makes the orphan case below deterministic (and checks the dangling case).
    let mut dangling = widget("dangling", json!({"size": 1}));
    dangling["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "never-existed", "uid": "6c8e3f0a-0000-4000-8000-000000000001"}]);
    s.send(
        "gc: create child of an owner that never existed",
        widgets().create(&PostParams::default(), bytes(&dangling)),
        201,
    )
    .await?;
    s.poll_until(
        "gc: child of a missing owner collected",
        get_widget("dangling"),
        404,
        gone,
    )
    .await?;
    Ok(())
}

/// Background propagation: the owner goes at once, its dependents after it.
async fn background(s: &mut Session) -> Result<(), SendError> {
    family(s, "background").await?;
    s.send(
        "gc background: delete owner",
        core("configmaps").delete("owner-background", &DeleteParams::background()),
        200,
    )
    .await?;
    s.poll_until(
        "gc background: child collected",
        get_cm("child-background"),
        404,
        gone,
    )
    .await?;
    s.poll_until(
        "gc background: custom child collected",
        get_widget("child-background"),
        404,
        gone,
    )
    .await?;
    Ok(())
}

/// Foreground propagation: the dependents go first, then the owner.
async fn foreground(s: &mut Session) -> Result<(), SendError> {
    family(s, "foreground").await?;
    s.send(
        "gc foreground: delete owner (foregroundDeletion finalizer)",
        core("configmaps").delete("owner-foreground", &DeleteParams::foreground()),
        200,
    )
    .await?;
    s.poll_until(
        "gc foreground: child collected",
        get_cm("child-foreground"),
        404,
        gone,
    )
    .await?;
    s.poll_until(
        "gc foreground: custom child collected",
        get_widget("child-foreground"),
        404,
        gone,
    )
    .await?;
    s.poll_until(
        "gc foreground: owner gone after its children",
        get_cm("owner-foreground"),
        404,
        gone,
    )
    .await?;
    Ok(())
}

/// Orphan propagation: the owner goes, its dependents stay without their ownerReferences.
async fn orphan(s: &mut Session) -> Result<(), SendError> {
    family(s, "orphan").await?;
    s.send(
        "gc orphan: delete owner",
        core("configmaps").delete("owner-orphan", &DeleteParams::orphan()),
        200,
    )
    .await?;
    s.poll_until("gc orphan: owner gone", get_cm("owner-orphan"), 404, gone)
        .await?;
    s.poll_until(
        "gc orphan: child kept, ownerReferences removed",
        get_cm("child-orphan"),
        200,
        orphaned,
    )
    .await?;
    s.poll_until(
        "gc orphan: custom child kept, ownerReferences removed",
        get_widget("child-orphan"),
        200,
        orphaned,
    )
    .await?;
    Ok(())
}
