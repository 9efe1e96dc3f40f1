//! A tenant who leaves Kueue's label off to skip the team's quota: with the operator's default
//! queue (`kueueDefaultQueue`), an unlabelled or empty-labelled TpuSlice, a slice that names a
//! pipeline as its owner, and an unlabelled Vertex pipeline are all gated by the namespace's
//! LocalQueue `default`, on the real Kueue (helpers shared with `kueue.rs`). The objects are
//! written by the namespace's tenant (`crate::tenant::as_tenant`: its `edit` ServiceAccount under
//! the chart's aggregated roles); the queues are the platform's.

use std::sync::Arc;

use test_kit::TestEnv;
use tpu_operator_api::{
    tpu_slice::TpuSlice,
    training_pipeline::{TrainingPipeline, TrainingPipelinePhase as Phase},
};
use tpu_operator_controller::{
    kinds::{tpu_slice, training_pipeline},
    never_shutdown,
};

use super::{
    kueue::{STEP, queue, queued, ready, resource, slice, start_idle},
    kueue_pipelines::vertex_pipeline,
};

/// The env with Kueue on, LocalQueue `default` as the operator's default queue, and the slice
/// and pipeline controllers running.
async fn start() -> Option<TestEnv> {
    let mut env = start_idle().await?;
    Arc::get_mut(&mut env.ctx)
        .expect("the context is not shared before the controllers start")
        .config
        .kueue_default_queue = Some("default".into());
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    env.spawn(training_pipeline::run(env.ctx.clone(), never_shutdown()));
    Some(env)
}

/// An 8-chip v6e slice with the queue label set to `label` (`None`: no label at all).
fn unlabelled(name: &str, label: Option<&str>) -> TpuSlice {
    let mut s = slice(name, "x", None);
    s.metadata.labels = label.map(|l| [("kueue.x-k8s.io/queue-name".to_string(), l.to_string())].into());
    s
}

fn local_queue(s: &TpuSlice) -> Option<String> {
    Some(s.status.as_ref()?.kueue.as_ref()?.local_queue.clone())
}

#[tokio::test]
async fn leaving_the_label_off_does_not_skip_the_teams_quota() {
    let Some(env) = start().await else { return };
    queue(&env, "default", 8, None).await;
    let tenant = crate::tenant::as_tenant(&env).await;
    tenant.create(&unlabelled("first", None)).await;
    let first: TpuSlice = env.wait_for("first", "first Ready", STEP, ready).await;
    assert_eq!(local_queue(&first).as_deref(), Some("default"));

    // The quota is full: an empty label, and a slice naming a pipeline as its controlling owner
    // (an owner reference any tenant can write), wait like any other.
    tenant.create(&unlabelled("empty-label", Some(""))).await;
    let owner: TrainingPipeline = {
        let mut tp = vertex_pipeline("owner", None);
        tp.spec.suspend = true;
        tenant.create(&tp).await
    };
    let mut owned = unlabelled("owner-train", None);
    owned.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "tpu-operator.dev/v1beta1".into(),
            kind: "TrainingPipeline".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().expect("uid"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    tenant.create(&owned).await;
    for name in ["empty-label", "owner-train"] {
        let s: TpuSlice = env
            .wait_for(name, "queued in the default queue", STEP, queued)
            .await;
        assert_eq!(local_queue(&s).as_deref(), Some("default"), "{name}");
    }
    // An unlabelled Vertex pipeline waits too.
    tenant.create(&vertex_pipeline("vertex", None)).await;
    let waiting: TrainingPipeline = env
        .wait_for(
            "vertex",
            "queued in the default queue",
            STEP,
            |tp: &TrainingPipeline| {
                tp.status
                    .as_ref()
                    .and_then(|s| s.kueue.as_ref())
                    .is_some_and(|k| k.local_queue == "default" && !k.admitted)
            },
        )
        .await;
    assert_eq!(waiting.status.unwrap().phase, Phase::Waiting);

    // Nor can the tenant make a queue of its own to label its objects with: `edit` grants nothing
    // in kueue.x-k8s.io (Kueue's own editor roles aggregate into its batch-admin role).
    let own_queue: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "mine"}, "spec": {"clusterQueue": "anything"},
    }))
    .unwrap();
    let local_queues = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        tenant.client.clone(),
        &env.ns,
        &resource("LocalQueue", "localqueues"),
    );
    tenant
        .refused_by_rbac(
            "creating a LocalQueue of its own",
            local_queues.create(&Default::default(), &own_queue),
        )
        .await;

    assert_eq!(
        env.gcp.call_count("tpu", "nodes.create"),
        1,
        "only the slice Kueue admitted has a node"
    );
    assert_eq!(env.gcp.call_count("vertex", "customJobs.create"), 0);
}
