//! Both served versions of every kind, and `tpu-operator migrate-storage`, the way a user meets
//! them (docs/api-versions.md):
//! - kubectl applies a manifest kept in Git at `v1alpha1` (with the deprecation warning) and one
//!   at `v1beta1`, and reads both objects through either version;
//! - the next release's CRDs move storage to `v1beta1`, and the command rewrites every object and
//!   leaves `status.storedVersions: ["v1beta1"]`; run again, it has nothing to do;
//! - a rollback to this release's CRDs is still accepted afterwards.
//!
//! Against kube-emulator by default, the real kube-apiserver in CI (scripts/ci-control-plane.sh).

use std::{
    collections::BTreeMap,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::Value;
use test_kit::TestCluster;
use tpu_operator_api::crds::{self, PREVIOUS_VERSION, VERSION};

const BIN: &str = env!("CARGO_BIN_EXE_tpu-operator");
const MANAGER: &str = "api-versions-test";

// Multi-threaded: kubectl and the binary are run blocking, and kube-emulator serves them from
// this runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn objects_read_through_both_versions_and_migrate_storage_leaves_only_v1beta1() {
    let cluster = TestCluster::connect().await.unwrap();
    let kubeconfig = cluster.kubeconfig();
    let crd_api: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    apply_crds(&crd_api, crds::all()).await;

    let suffix = format!("{:x}", std::process::id());
    let ns = format!("api-versions-{suffix}");
    kubectl(kubeconfig, &["create", "namespace", &ns]);
    let policy = format!("api-versions-{suffix}");
    let old = apply(kubeconfig, &manifest(PREVIOUS_VERSION, &ns, "from-git", &policy));
    assert!(
        old.contains(&format!(
            "tpu-operator.dev/{PREVIOUS_VERSION} TpuSlice is deprecated"
        )),
        "kubectl did not print the deprecation warning: {old}"
    );
    let new = apply(kubeconfig, &manifest(VERSION, &ns, "current", "unused"));
    assert!(!new.contains("deprecated"), "{new}");
    for version in [PREVIOUS_VERSION, VERSION] {
        assert_eq!(
            slices_through(kubeconfig, &ns, version),
            [
                ("current".to_string(), version.to_string()),
                ("from-git".to_string(), version.to_string())
            ]
        );
    }
    let before = resource_versions(kubeconfig, &ns);

    // The next release: the same CRDs, stored as v1beta1.
    apply_crds(&crd_api, next_release()).await;
    let slices = "tpuslices.tpu-operator.dev";
    assert_eq!(
        stored_versions(&crd_api, slices).await,
        [PREVIOUS_VERSION, VERSION]
    );
    let first = migrate(kubeconfig);
    for crd in crds::all() {
        let name = crd.metadata.name.unwrap();
        assert_eq!(stored_versions(&crd_api, &name).await, [VERSION], "{first}");
        assert!(first.contains(&format!("{name}: ")), "{first}");
    }
    assert!(
        first.contains(&format!(
            "storedVersions [\"{PREVIOUS_VERSION}\", \"{VERSION}\"] -> [\"{VERSION}\"]"
        )),
        "{first}"
    );
    let after = resource_versions(kubeconfig, &ns);
    for (name, version) in &before {
        assert_ne!(
            after.get(name),
            Some(version),
            "{name} was not rewritten: {first}"
        );
    }
    let again = migrate(kubeconfig);
    assert_eq!(again.matches("nothing to do").count(), 4, "{again}");
    assert_eq!(slices_through(kubeconfig, &ns, PREVIOUS_VERSION).len(), 2);

    // Back to this release's CRDs (a rollback, and what the other suites expect).
    apply_crds(&crd_api, crds::all()).await;
    kubectl(kubeconfig, &["delete", "namespace", &ns, "--wait=false"]);
    kubectl(kubeconfig, &["delete", "tpupolicy", &policy]);
}

/// A TpuSlice and a TpuPolicy as they would sit in Git at `version`.
fn manifest(version: &str, ns: &str, slice: &str, policy: &str) -> String {
    format!(
        "apiVersion: tpu-operator.dev/{version}
kind: TpuSlice
metadata: {{name: {slice}, namespace: {ns}}}
spec: {{project: demo-project, zone: us-east5-b, acceleratorType: v6e-8, runtimeVersion: v2-alpha-tpuv6e}}
---
apiVersion: tpu-operator.dev/{version}
kind: TpuPolicy
metadata: {{name: {policy}}}
spec: {{namespaces: []}}
"
    )
}

/// This release's CRDs with storage moved to [`VERSION`], as the next release ships them.
fn next_release() -> Vec<CustomResourceDefinition> {
    let mut all = crds::all();
    for crd in &mut all {
        for version in &mut crd.spec.versions {
            version.storage = version.name == VERSION;
        }
    }
    all
}

async fn apply_crds(api: &Api<CustomResourceDefinition>, crds: Vec<CustomResourceDefinition>) {
    for mut crd in crds {
        crd.metadata.managed_fields = None;
        let name = crd.metadata.name.clone().unwrap();
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for crd in crds::all() {
        let name = crd.metadata.name.unwrap();
        while !established(&api.get(&name).await.unwrap()) {
            assert!(Instant::now() < deadline, "CRD {name} not Established");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

async fn stored_versions(api: &Api<CustomResourceDefinition>, name: &str) -> Vec<String> {
    let crd = api.get(name).await.unwrap();
    crd.status.and_then(|s| s.stored_versions).unwrap_or_default()
}

/// `(name, apiVersion's version)` of the namespace's slices, read through `version`.
fn slices_through(kubeconfig: &Path, ns: &str, version: &str) -> Vec<(String, String)> {
    let resource = format!("tpuslices.{version}.tpu-operator.dev");
    let list: Value =
        serde_json::from_str(&kubectl(kubeconfig, &["get", &resource, "-n", ns, "-o", "json"])).unwrap();
    let mut out: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let api_version = item["apiVersion"].as_str().unwrap();
            (
                item["metadata"]["name"].as_str().unwrap().to_string(),
                api_version.trim_start_matches("tpu-operator.dev/").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn resource_versions(kubeconfig: &Path, ns: &str) -> BTreeMap<String, String> {
    let list: Value = serde_json::from_str(&kubectl(
        kubeconfig,
        &["get", "tpuslices", "-n", ns, "-o", "json"],
    ))
    .unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let meta = &item["metadata"];
            (
                meta["name"].as_str().unwrap().to_string(),
                meta["resourceVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `tpu-operator migrate-storage` as the docs give it; its standard output.
fn migrate(kubeconfig: &Path) -> String {
    let out = Command::new(BIN)
        .args(["migrate-storage", "--kubeconfig"])
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "migrate-storage failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `kubectl apply --server-side -f -` of `yaml`; standard output and error together (warnings
/// go to the error stream).
fn apply(kubeconfig: &Path, yaml: &str) -> String {
    use std::io::Write;
    let mut child = kubectl_cmd(kubeconfig, &["apply", "--server-side", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl apply: {text}");
    text
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl_cmd(kubeconfig, args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl_cmd(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(test_tools::kubectl());
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("kube-cache"))
        .args(args);
    cmd
}
