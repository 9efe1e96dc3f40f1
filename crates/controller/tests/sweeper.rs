//! The orphan sweeper with nothing configured (a default Helm install sets no orphanProjects /
//! orphanZones / orphanRegions): it sweeps every place the custom resources use, remembers those
//! places in its summary ConfigMap, and so still finds an orphan after its owner is gone and after
//! a restart. Through the real controllers against kube-emulator (or the real control plane) and
//! gcp-emulator.
mod support;

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use serde_json::json;
use support::TestEnv;
use tpu_operator_api::{
    conditions::{find_condition, types},
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{
    Context, never_shutdown,
    sweeper::{Mode, SUMMARY_CONFIGMAP, Sweeper, SweeperConfig},
    tpu_slice,
};
use tpu_operator_gcp::tpu_v2::model::Node;

const STEP: Duration = Duration::from_secs(20);
const ZONE: &str = "asia-northeast1-b";

fn is_ready(s: &TpuSlice) -> bool {
    s.status
        .as_ref()
        .and_then(|st| find_condition(&st.conditions, types::READY))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn with_nothing_configured_the_sweeper_sweeps_where_objects_are_and_remembers_it() {
    let mut env = TestEnv::start().await;
    let ctx: Arc<Context> = Arc::new(env.context().await);
    env.spawn(tpu_slice::run(ctx.clone(), never_shutdown()));
    let slice: TpuSlice = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1alpha1",
        "kind": "TpuSlice",
        "metadata": {"name": "somewhere"},
        "spec": {
            "zone": ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "capacity": {"spot": {}},
        },
    }))
    .unwrap();
    env.create(&slice).await;
    env.wait_for::<TpuSlice, _>("somewhere", "Ready", STEP, is_ready)
        .await;

    // A node of this cluster in the same zone whose owner is gone.
    let labels = [
        ("managed-by", "tpu-operator"),
        ("tpu-operator-cluster", "test-cluster"),
        ("tpu-operator-namespace", env.ns.as_str()),
        ("tpu-operator-name", "forgotten"),
        ("tpu-operator-uid", "0badc0de-0000-4000-8000-000000000000"),
    ];
    let parent = format!("projects/demo-project/locations/{ZONE}");
    ctx.gcp
        .tpu
        .create_node(
            &parent,
            "orphan",
            Node::new()
                .set_accelerator_type("v6e-8")
                .set_runtime_version("v2-alpha-tpuv6e")
                .set_labels(labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        )
        .await
        .expect("create a node directly");
    let orphan = format!("{parent}/nodes/orphan");
    env.idle(Duration::from_millis(50), STEP).await;

    // No projects, zones or regions configured: the first sweep learns the slice's place, the
    // second lists it.
    let config = SweeperConfig {
        mode: Mode::Report,
        report_namespace: env.ns.clone(),
        ..SweeperConfig::default()
    };
    assert!(config.projects.is_empty() && config.zones.is_empty() && config.regions.is_empty());
    let sweeper = Sweeper::new(config.clone());
    let first = sweeper.sweep(&ctx).await.expect("sweep");
    assert!(first.orphans.is_empty(), "nothing known yet: {first:#?}");
    let second = sweeper.sweep(&ctx).await.expect("sweep");
    let names: Vec<_> = second.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, [orphan.as_str()], "{second:#?}");

    // The owner of the only known place goes away, and the operator restarts: the place is read
    // back from the summary ConfigMap, so the orphan is still found.
    let slices = env.api::<TpuSlice>();
    slices
        .delete("somewhere", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone::<TpuSlice>("somewhere", STEP).await;
    let cm = env.api::<ConfigMap>().get(SUMMARY_CONFIGMAP).await.unwrap();
    let places = cm.data.unwrap()["places"].clone();
    assert!(places.contains(&format!("zone {parent}")), "{places}");
    let restarted = Sweeper::new(config);
    let after = restarted.sweep(&ctx).await.expect("sweep");
    let names: Vec<_> = after.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, [orphan.as_str()], "{after:#?}");
}
