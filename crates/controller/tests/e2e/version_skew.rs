//! Status a newer release wrote survives this release's writes. Status is one server-side apply
//! of the whole status by the operator's field manager, which removes every field the writer
//! leaves out; an older operator (a rollback, or the leader handed over between releases) would
//! otherwise erase what it does not know. docs/api-versions.md, "Status written by a newer
//! release".

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use test_kit::TestEnv;
use tpu_operator_api::{
    conditions::{Progress, progress_of},
    tpu_slice::TpuSlice,
};
use tpu_operator_controller::{kinds::tpu_slice, never_shutdown};

const STEP: Duration = Duration::from_secs(20);

#[tokio::test]
async fn status_fields_of_a_newer_release_survive_this_releases_status_writes() {
    let mut env = TestEnv::start().await;
    let Some(kube) = env.kube() else {
        // Swapping the shared CRD on a real server would break the tests running beside this one.
        eprintln!(
            "SKIPPED on the real control plane: this test swaps the TpuSlice CRD of its own kube-emulator"
        );
        return;
    };
    // The newer release's CRD: one status field this release does not know.
    let crd_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds/tpuslices.tpu-operator.dev.yaml");
    let mut crd: Value = serde_yaml::from_str(&std::fs::read_to_string(&crd_path).unwrap()).unwrap();
    for version in crd["spec"]["versions"].as_array_mut().unwrap() {
        version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["fromANewerRelease"] =
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    kube.install_crds_from_yaml(&serde_yaml::to_string(&crd).unwrap())
        .unwrap();
    env.spawn(tpu_slice::run(env.ctx.clone(), never_shutdown()));
    let slice: TpuSlice = serde_json::from_value(json!({
        "apiVersion": "tpu-operator.dev/v1beta1",
        "kind": "TpuSlice",
        "metadata": {"name": "skew"},
        "spec": {"zone": "us-east5-b", "acceleratorType": "v6e-8", "runtimeVersion": "v2-alpha-tpuv6e",
                 "capacity": {"onDemand": {}}}
    }))
    .unwrap();
    env.create(&slice).await;
    let ready = env
        .wait_for::<TpuSlice, _>("skew", "Ready", STEP, |s| {
            s.status.as_ref().and_then(|st| progress_of(&st.conditions)) == Some(Progress::Ready)
        })
        .await;

    // The newer release's write: the status as read plus its own field, as the same manager.
    let api = env.api::<TpuSlice>();
    let mut status = serde_json::to_value(ready.status.unwrap()).unwrap();
    let newer = json!({"goodputPercent": 97});
    status["fromANewerRelease"] = newer.clone();
    let body = json!({"apiVersion": "tpu-operator.dev/v1beta1", "kind": "TpuSlice", "status": status});
    let manager = PatchParams::apply(tpu_slice::FIELD_MANAGER).force();
    api.patch_status("skew", &manager, &Patch::Apply(&body))
        .await
        .unwrap();

    // A spec change makes this release write status again (the new generation observed).
    let orphan = json!({"spec": {"deletionPolicy": "Orphan"}});
    api.patch("skew", &PatchParams::default(), &Patch::Merge(&orphan))
        .await
        .unwrap();
    let after = env
        .wait_for::<TpuSlice, _>("skew", "the new generation observed", STEP, |s| {
            s.metadata.generation == Some(2)
                && s.status.as_ref().and_then(|st| st.observed_generation) == Some(2)
        })
        .await;
    let status = after.status.unwrap();
    assert_eq!(
        status.newer_fields.get("fromANewerRelease"),
        Some(&newer),
        "this release's status write erased a newer release's field: {status:?}"
    );
}
