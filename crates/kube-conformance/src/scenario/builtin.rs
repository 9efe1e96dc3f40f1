//! Built-in kinds the operator touches: ConfigMap (every write verb, optimistic concurrency, the
//! four patch types, selectors, preconditions), Secret, Lease, events.k8s.io Event.

use kube::core::{
    params::{DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams, Preconditions},
    request::Request,
};
use serde_json::{Value, json};

use super::{NAMESPACE, bytes, core, grouped, meta_str};
use crate::transcript::{SendError, Session};

pub(super) async fn run(s: &mut Session) -> Result<(), SendError> {
    configmaps(s).await?;
    others(s).await
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"suite": "differential"}}, "data": data})
}

fn json_patch(ops: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).expect("the scenario's JSON patches are well-formed"))
}

async fn configmaps(s: &mut Session) -> Result<(), SendError> {
    let (uid, first_rv) = configmap_create_and_get(s).await?;
    configmap_updates(s, first_rv).await?;
    configmap_patches(s).await?;
    configmap_generate_name_and_lists(s).await?;
    configmap_deletes(s, uid).await
}

fn cm() -> Request {
    core("configmaps")
}

/// Create (and its conflicts and invalid names) and get; returns the UID and first resourceVersion.
async fn configmap_create_and_get(s: &mut Session) -> Result<(String, String), SendError> {
    let pp = PostParams::default();
    let created = s
        .send(
            "configmap: create",
            cm().create(&pp, bytes(&configmap("alpha", json!({"a": "1"})))),
            201,
        )
        .await?;
    let first_rv = meta_str(&created, "resourceVersion").to_owned();
    let uid = meta_str(&created, "uid").to_owned();
    s.send(
        "configmap: create existing name",
        cm().create(&pp, bytes(&configmap("alpha", json!({})))),
        409,
    )
    .await?;
    s.send("configmap: get", cm().get("alpha", &GetParams::default()), 200)
        .await?;
    s.send(
        "configmap: get missing",
        cm().get("missing", &GetParams::default()),
        404,
    )
    .await?;
    let bad = configmap("Not_A_DNS_Name", json!({}));
    s.send(
        "configmap: create with invalid name",
        cm().create(&pp, bytes(&bad)),
        422,
    )
    .await?;
    Ok((uid, first_rv))
}

/// Replace with a current, a stale, an unchanged and no resourceVersion.
async fn configmap_updates(s: &mut Session, first_rv: String) -> Result<(), SendError> {
    let pp = PostParams::default();
    let mut update = configmap("alpha", json!({"a": "2"}));
    update["metadata"]["resourceVersion"] = json!(first_rv);
    let updated = s
        .send(
            "configmap: update",
            cm().replace("alpha", &pp, bytes(&update)),
            200,
        )
        .await?;
    s.send(
        "configmap: update with stale resourceVersion",
        cm().replace("alpha", &pp, bytes(&update)),
        409,
    )
    .await?;
    update["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"].clone();
    s.send(
        "configmap: update that changes nothing keeps resourceVersion",
        cm().replace("alpha", &pp, bytes(&update)),
        200,
    )
    .await?;
    let mut unconditional = configmap("alpha", json!({"a": "2"}));
    unconditional["metadata"]["labels"]["pass"] = json!("unconditional");
    s.send(
        "configmap: update without resourceVersion",
        cm().replace("alpha", &pp, bytes(&unconditional)),
        200,
    )
    .await?;
    Ok(())
}

/// The four patch types, null removal, JSON-patch tests (kube-runtime's finalizer form) and
/// type errors.
async fn configmap_patches(s: &mut Session) -> Result<(), SendError> {
    configmap_merge_patches(s).await?;
    configmap_json_patches(s).await?;
    configmap_strategic_and_failing_patches(s).await
}

/// Adds data key b through a merge patch.
fn add_b() -> Patch<Value> {
    Patch::Merge(json!({"data": {"b": "x"}}))
}

/// Merge patches: a change, the same again (no change), and null removing a key.
async fn configmap_merge_patches(s: &mut Session) -> Result<(), SendError> {
    let merge = PatchParams::default();
    let add_b = add_b();
    s.send("configmap: merge patch", cm().patch("alpha", &merge, &add_b), 200)
        .await?;
    s.send(
        "configmap: merge patch that changes nothing",
        cm().patch("alpha", &merge, &add_b),
        200,
    )
    .await?;
    let remove_label = Patch::Merge(json!({"metadata": {"labels": {"pass": null}}}));
    s.send(
        "configmap: merge patch null removes a key",
        cm().patch("alpha", &merge, &remove_label),
        200,
    )
    .await?;
    Ok(())
}

/// JSON patches: test then replace, a failing test, a test for null on an absent path (what
/// kube-runtime's finalizer helper sends) and a remove.
async fn configmap_json_patches(s: &mut Session) -> Result<(), SendError> {
    let merge = PatchParams::default();
    let test_replace = json_patch(json!([
        {"op": "test", "path": "/data/b", "value": "x"},
        {"op": "replace", "path": "/data/b", "value": "y"}]));
    s.send(
        "configmap: json patch test+replace",
        cm().patch("alpha", &merge, &test_replace),
        200,
    )
    .await?;
    let failing_test = json_patch(json!([{"op": "test", "path": "/data/b", "value": "nope"}]));
    s.send(
        "configmap: json patch failing test",
        cm().patch("alpha", &merge, &failing_test),
        422,
    )
    .await?;
    // kube-runtime's finalizer helper sends exactly this before adding the first finalizer.
    let null_test = json_patch(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["conformance.tpu-operator.dev/test"]}]));
    s.send(
        "configmap: json patch test null on absent path",
        cm().patch("alpha", &merge, &null_test),
        200,
    )
    .await?;
    let drop_finalizer = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers"}]));
    s.send(
        "configmap: json patch remove",
        cm().patch("alpha", &merge, &drop_finalizer),
        200,
    )
    .await?;
    Ok(())
}

/// A strategic merge patch, a merge patch with a type error, and a patch of a missing object.
async fn configmap_strategic_and_failing_patches(s: &mut Session) -> Result<(), SendError> {
    let merge = PatchParams::default();
    let strategic = Patch::Strategic(json!({"data": {"c": "z"}}));
    s.send(
        "configmap: strategic merge patch",
        cm().patch("alpha", &merge, &strategic),
        200,
    )
    .await?;
    let wrong_type = Patch::Merge(json!({"data": {"d": 5}}));
    s.send(
        "configmap: merge patch with non-string data",
        cm().patch("alpha", &merge, &wrong_type),
        422,
    )
    .await?;
    s.send(
        "configmap: patch missing object",
        cm().patch("missing", &merge, &add_b()),
        404,
    )
    .await?;
    Ok(())
}

/// generateName, then lists by label, set-based and field selectors.
async fn configmap_generate_name_and_lists(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let mut generated = configmap("", json!({"g": "1"}));
    generated["metadata"] = json!({"generateName": "gen-", "labels": {"suite": "differential"}});
    let made = s
        .send(
            "configmap: create with generateName",
            cm().create(&pp, bytes(&generated)),
            201,
        )
        .await?;
    let gen_name = meta_str(&made, "name").to_owned();
    if !gen_name.is_empty() {
        s.send(
            "configmap: get generated name",
            cm().get(&gen_name, &GetParams::default()),
            200,
        )
        .await?;
    }
    let list = |lp: ListParams| cm().list(&lp);
    s.send(
        "configmap: list by label",
        list(ListParams::default().labels("suite=differential")),
        200,
    )
    .await?;
    let set_based = ListParams::default().labels("suite in (differential,other),!absent");
    s.send("configmap: list by set-based selector", list(set_based), 200)
        .await?;
    let by_name = ListParams::default().fields("metadata.name=alpha");
    s.send("configmap: list by field selector", list(by_name), 200)
        .await?;
    let bad_field = ListParams::default().fields("data.a=1");
    s.send(
        "configmap: list by unsupported field selector",
        list(bad_field),
        400,
    )
    .await?;
    Ok(())
}

/// Deletes with UID preconditions, of a missing object, and by collection.
async fn configmap_deletes(s: &mut Session, uid: String) -> Result<(), SendError> {
    let wrong_uid = Preconditions {
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        resource_version: None,
    };
    let dp = DeleteParams::default().preconditions(wrong_uid);
    s.send(
        "configmap: delete with wrong uid precondition",
        cm().delete("alpha", &dp),
        409,
    )
    .await?;
    let right_uid = Preconditions {
        uid: Some(uid),
        resource_version: None,
    };
    let dp = DeleteParams::default().preconditions(right_uid);
    s.send("configmap: delete", cm().delete("alpha", &dp), 200)
        .await?;
    s.send(
        "configmap: delete missing",
        cm().delete("alpha", &DeleteParams::default()),
        404,
    )
    .await?;
    let collection = ListParams::default().labels("suite=differential");
    s.send(
        "configmap: delete collection by label",
        cm().delete_collection(&DeleteParams::default(), &collection),
        200,
    )
    .await?;
    Ok(())
}

async fn others(s: &mut Session) -> Result<(), SendError> {
    secrets(s).await?;
    lease_takeover(s).await?;
    event_writes(s).await
}

/// Secret: stringData, and invalid base64 in data.
async fn secrets(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"},
                        "stringData": {"token": "abc"}});
    s.send(
        "secret: create with stringData",
        core("secrets").create(&pp, bytes(&secret)),
        201,
    )
    .await?;
    s.send(
        "secret: get",
        core("secrets").get("token", &GetParams::default()),
        200,
    )
    .await?;
    let bad_secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"},
                            "data": {"token": "not base64!"}});
    s.send(
        "secret: create with invalid base64",
        core("secrets").create(&pp, bytes(&bad_secret)),
        400,
    )
    .await?;
    Ok(())
}

/// Lease: a create, then another holder takes over by update.
async fn lease_takeover(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let leases = || grouped("coordination.k8s.io/v1", "leases");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
                       "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
    let made = s
        .send("lease: create", leases().create(&pp, bytes(&lease)), 201)
        .await?;
    let mut renewed = lease.clone();
    renewed["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"].clone();
    renewed["spec"]["holderIdentity"] = json!("b");
    renewed["spec"]["renewTime"] = json!("2026-11-22T05:00:00.000000Z");
    s.send(
        "lease: take over",
        leases().replace("leader", &pp, bytes(&renewed)),
        200,
    )
    .await?;
    Ok(())
}

/// events.k8s.io Events: a create, one missing required fields, and reading one back through
/// the core/v1 events API.
async fn event_writes(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let events = || grouped("events.k8s.io/v1", "events");
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "widget-ready.1"},
        "eventTime": "2026-11-22T05:00:00.000000Z", "type": "Normal", "reason": "Ready", "action": "Reconcile",
        "note": "widget is ready", "reportingController": "tpu-operator.dev/conformance",
        "reportingInstance": "conformance-0",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": NAMESPACE, "name": "alpha"}});
    s.send("event: create", events().create(&pp, bytes(&event)), 201)
        .await?;
    let incomplete = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "incomplete"},
                            "type": "Sideways", "reason": "Ready"});
    s.send(
        "event: create without required fields",
        events().create(&pp, bytes(&incomplete)),
        422,
    )
    .await?;
    let old_events = Request::new(format!("/api/v1/namespaces/{NAMESPACE}/events"));
    s.send(
        "event: read through core/v1",
        old_events.get("widget-ready.1", &GetParams::default()),
        200,
    )
    .await?;
    Ok(())
}
