//! The scenario's custom resource: schema validation, defaulting and pruning, CEL rules (including a
//! transition rule), the status subresource, generation, and server-side apply by several managers.

use kube::core::params::{GetParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{bytes, widgets};
use crate::transcript::{SendError, Session};

pub(super) async fn run(s: &mut Session) -> Result<(), SendError> {
    validation(s).await?;
    status_subresource(s).await?;
    server_side_apply(s).await
}

pub(crate) fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "conformance.tpu-operator.dev/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": spec})
}

async fn validation(s: &mut Session) -> Result<(), SendError> {
    accepted_creates(s).await?;
    rejected_creates(s).await?;
    transition_rule(s).await
}

/// A create of widget `w`.
fn create(w: Value) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    widgets().create(&PostParams::default(), bytes(&w))
}

/// Creates the schema accepts: defaulting, pruning of unknown fields and status, int-or-string.
async fn accepted_creates(s: &mut Session) -> Result<(), SendError> {
    s.send(
        "widget: create (defaults maxSize)",
        create(widget("w1", json!({"size": 3, "zone": "a"}))),
        201,
    )
    .await?;
    let mut extra = widget(
        "pruned",
        json!({"size": 1, "unknown": true, "extra": {"kept": {"deep": 1}},
                                            "quota": "50%", "owner": null}),
    );
    extra["status"] = json!({"phase": "Ignored on create"});
    extra["topLevelUnknown"] = json!("pruned");
    s.send(
        "widget: create prunes unknown fields and drops status",
        create(extra),
        201,
    )
    .await?;
    s.send(
        "widget: create with int-or-string as int",
        create(widget("quota-int", json!({"size": 1, "quota": 5}))),
        201,
    )
    .await?;
    Ok(())
}

/// Creates the schema or a CEL rule refuses (a CEL rule seeing a defaulted field).
async fn rejected_creates(s: &mut Session) -> Result<(), SendError> {
    let wrong_type = widget("bad-type", json!({"size": "three"}));
    s.send("widget: create with wrong type", create(wrong_type), 422)
        .await?;
    s.send(
        "widget: create without required field",
        create(widget("no-size", json!({"zone": "a"}))),
        422,
    )
    .await?;
    s.send(
        "widget: create below minimum",
        create(widget("negative", json!({"size": -1}))),
        422,
    )
    .await?;
    s.send(
        "widget: create outside enum",
        create(widget("bad-enum", json!({"size": 1, "mode": "Medium"}))),
        422,
    )
    .await?;
    let cel = widget("too-big", json!({"size": 20}));
    s.send(
        "widget: create violating CEL rule (with defaulted field)",
        create(cel),
        422,
    )
    .await?;
    let both = widget("two-errors", json!({"size": 30, "maxSize": 5, "mode": "Medium"}));
    s.send("widget: create with schema and CEL errors", create(both), 422)
        .await?;
    Ok(())
}

/// The transition rule (zone is immutable) on update and merge patch, and a strategic merge
/// patch, which custom resources do not support.
async fn transition_rule(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let current = s
        .send("widget: get", widgets().get("w1", &GetParams::default()), 200)
        .await?;

    let mut moved = current.clone();
    moved["spec"]["zone"] = json!("b");
    s.send(
        "widget: update violating transition rule",
        widgets().replace("w1", &pp, bytes(&moved)),
        422,
    )
    .await?;
    let merge = PatchParams::default();
    let patch_zone = Patch::Merge(json!({"spec": {"zone": "b"}}));
    s.send(
        "widget: merge patch violating transition rule",
        widgets().patch("w1", &merge, &patch_zone),
        422,
    )
    .await?;
    let strategic = Patch::Strategic(json!({"spec": {"size": 4}}));
    s.send(
        "widget: strategic merge patch on a custom resource",
        widgets().patch("w1", &merge, &strategic),
        415,
    )
    .await?;
    Ok(())
}

async fn status_subresource(s: &mut Session) -> Result<(), SendError> {
    let pp = PostParams::default();
    let merge = PatchParams::default();
    let current = s
        .send(
            "status: get before",
            widgets().get("w1", &GetParams::default()),
            200,
        )
        .await?;
    let mut update = current.clone();
    update["spec"]["size"] = json!(4);
    update["status"] = json!({"phase": "Ignored by the main resource"});
    let updated = s
        .send(
            "status: update main resource bumps generation, ignores status",
            widgets().replace("w1", &pp, bytes(&update)),
            200,
        )
        .await?;
    let mut status = updated.clone();
    status["spec"]["size"] = json!(9);
    status["status"] = json!({"phase": "Ready", "observedGeneration": 2});
    s.send(
        "status: update status subresource ignores spec",
        widgets().replace_subresource("status", "w1", &pp, bytes(&status)),
        200,
    )
    .await?;
    let phase = Patch::Merge(json!({"status": {"phase": "Degraded"}}));
    s.send(
        "status: merge patch status",
        widgets().patch_subresource("status", "w1", &merge, &phase),
        200,
    )
    .await?;
    let spec_via_main = Patch::Merge(json!({"spec": {"size": 5}, "status": {"phase": "Ignored"}}));
    s.send(
        "status: merge patch main resource ignores status",
        widgets().patch("w1", &merge, &spec_via_main),
        200,
    )
    .await?;
    let label_only = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    s.send(
        "status: metadata change keeps generation",
        widgets().patch("w1", &merge, &label_only),
        200,
    )
    .await?;
    s.send(
        "status: get status subresource",
        widgets().get_subresource("status", "w1"),
        200,
    )
    .await?;
    Ok(())
}

async fn server_side_apply(s: &mut Session) -> Result<(), SendError> {
    two_appliers(s).await?;
    update_then_invalid_apply(s).await?;
    server_side_apply_status(s).await
}

/// An apply of widget "shared" with `spec` and `labels`.
fn apply(spec: Value, labels: Value) -> Patch<Value> {
    let mut w = widget("shared", spec);
    w["metadata"]["labels"] = labels;
    Patch::Apply(w)
}

/// Alice and bob apply to one widget: a no-op re-apply, a conflict, shared ownership of an
/// equal value, a forced takeover, and removal of what alice stops applying.
async fn two_appliers(s: &mut Session) -> Result<(), SendError> {
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");
    let first = apply(
        json!({"size": 1, "zone": "a", "tags": ["x", "y"]}),
        json!({"owner": "alice"}),
    );
    s.send(
        "apply: alice creates",
        widgets().patch("shared", &alice, &first),
        201,
    )
    .await?;
    s.send(
        "apply: alice re-applies the same (no-op)",
        widgets().patch("shared", &alice, &first),
        200,
    )
    .await?;
    let bobs = apply(json!({"size": 2}), json!({}));
    s.send(
        "apply: bob conflicts on size",
        widgets().patch("shared", &bob, &bobs),
        409,
    )
    .await?;
    let same_value = apply(json!({"zone": "a"}), json!({}));
    s.send(
        "apply: bob applies alice's value (shared ownership)",
        widgets().patch("shared", &bob, &same_value),
        200,
    )
    .await?;
    let forced = PatchParams::apply("bob").force();
    s.send(
        "apply: bob forces size",
        widgets().patch("shared", &forced, &bobs),
        200,
    )
    .await?;
    let fewer = apply(json!({"zone": "a"}), json!({}));
    s.send(
        "apply: alice omits tags and label (removed)",
        widgets().patch("shared", &alice, &fewer),
        200,
    )
    .await?;
    Ok(())
}

/// A merge patch by another manager (an update operation among the applies), then an invalid
/// apply.
async fn update_then_invalid_apply(s: &mut Session) -> Result<(), SendError> {
    let merge_by_other = Patch::Merge(json!({"spec": {"mode": "Fast"}}));
    s.send(
        "apply: a merge patch by another manager (update operation)",
        widgets().patch(
            "shared",
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &merge_by_other,
        ),
        200,
    )
    .await?;
    // Forced, so the answer is about validation and not about the conflicts with bob (labels)
    // and kubectl-edit (mode) that the real server reports before validating.
    let invalid = Patch::Apply(widget("shared", json!({"zone": "a", "mode": "Medium"})));
    let forced_alice = PatchParams::apply("alice").force();
    s.send(
        "apply: invalid value rejected",
        widgets().patch("shared", &forced_alice, &invalid),
        422,
    )
    .await?;
    Ok(())
}

/// Server-side apply on the status subresource: two controllers own different conditions of one
/// list-map, conflict on a shared one, and drop what they stop applying.
async fn server_side_apply_status(s: &mut Session) -> Result<(), SendError> {
    let cond = |t: &str, st: &str| json!({"type": t, "status": st});
    let status_apply = |conditions: Value| {
        Patch::Apply(
            json!({"apiVersion": "conformance.tpu-operator.dev/v1", "kind": "Widget",
                            "metadata": {"name": "shared"}, "status": {"conditions": conditions}}),
        )
    };
    let c1 = PatchParams::apply("controller-one");
    let c2 = PatchParams::apply("controller-two");
    let ready = status_apply(json!([cond("Ready", "True")]));
    s.send(
        "apply status: controller-one sets Ready",
        widgets().patch_subresource("status", "shared", &c1, &ready),
        200,
    )
    .await?;
    let synced = status_apply(json!([cond("Synced", "True")]));
    s.send(
        "apply status: controller-two adds Synced (list-map merge)",
        widgets().patch_subresource("status", "shared", &c2, &synced),
        200,
    )
    .await?;
    let steal = status_apply(json!([cond("Ready", "False")]));
    s.send(
        "apply status: controller-two conflicts on Ready",
        widgets().patch_subresource("status", "shared", &c2, &steal),
        409,
    )
    .await?;
    let drop_ready = status_apply(json!([]));
    s.send(
        "apply status: controller-one drops Ready (removed)",
        widgets().patch_subresource("status", "shared", &c1, &drop_ready),
        200,
    )
    .await?;
    s.send(
        "apply: final object with managedFields",
        widgets().get("shared", &GetParams::default()),
        200,
    )
    .await?;
    Ok(())
}
