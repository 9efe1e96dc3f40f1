//! What a suite does on the shared real control plane before its first object: the CRDs
//! applied and Established, and a namespace of the test's own.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};

fn crds_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds")
}

/// Applies the committed CRDs (server-side apply, idempotent across parallel tests) and waits
/// until each is Established.
pub(crate) async fn install_crds_on_real_server(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("tpu-operator-e2e").force();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(crds_dir()).expect("read crds/") {
        let path = entry.expect("crds/ entry").path();
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read CRD")).expect("CRD YAML");
        let name = crd.metadata.name.clone().expect("CRD name");
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let crd = api.get(&name).await.expect("get CRD");
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "CRD {name} not Established"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A namespace of this test's own on the shared real server (left for the throwaway cluster to
/// take away: deleting it would wait on finalizers of controllers the test already stopped).
pub(crate) async fn create_test_namespace(client: &kube::Client) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.generate_name = Some("e2e-".into());
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace")
        .metadata
        .name
        .expect("generated namespace name")
}
