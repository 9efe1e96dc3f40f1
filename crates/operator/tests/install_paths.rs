//! Every documented install path on a real kube-apiserver (issue 46): Helm (docs/install.md §3),
//! `kubectl apply --server-side -k deploy/` (the README's "Without Helm"), `deploy/staging`, the
//! Flux HelmRelease (deploy/flux/helmrelease.yaml) and the Argo CD Application (docs/gitops.md),
//! the last two rendered as helm-controller and Argo CD render a chart (`helm template
//! --include-crds` with the manifest's values and release, applied server-side).
//!
//! For each, one after another on one control plane with one gcp-emulator: the project's CRDs are
//! removed first, so the path must install every one of them; then all CRDs Established, the
//! installed configuration's `tpu-operator run` (as the installed ServiceAccount, its
//! ConfigMap's config) ready on /readyz, the README's TpuPolicy and examples/quickstart.yaml
//! applied as the README says and the pipeline Succeeded, and the documented uninstall: the
//! objects first, then the operator (nothing of it left, the CRDs still there, as the docs say),
//! then the CRDs; no cloud resource left in gcp-emulator. A copy-paste install that names no
//! image fails at once with the message saying how to build and set it.
//!
//! kube-emulator serves CRDs but no RBAC or Deployments: against it (the default `cargo test`)
//! every path's CRDs are applied as the path applies them and must all be Established; the rest
//! is a NOTICE. scripts/ci-control-plane.sh runs the whole suite with TPU_OPERATOR_KUBE=real.

mod support;

// Shared with tests/upgrade.rs, which uses the parts a rolling update needs and this suite does not.
#[allow(dead_code)]
#[path = "install_paths/cluster.rs"]
mod cluster;

use std::time::Instant;

use cluster::{Cli, Operator, crd_names, crds_in, fails, without_crds};
use serde_json::Value;
use support::{chart_dir, copy_deploy, documents, repo_root, set_images};

const NAMESPACE: &str = "tpu-operator";
const RELEASE: &str = "tpu-operator";
const IMAGE: &str = "registry.example/tpu-operator";
const EMULATOR_IMAGE: &str = "registry.example/gcp-emulator";
const TAG: &str = "0.1.0";

/// The install paths the docs give.
#[derive(Clone, Copy, Debug)]
enum Path {
    Helm,
    Deploy,
    Staging,
    FluxHelmRelease,
    ArgoApplication,
}

const PATHS: [Path; 5] = [
    Path::Deploy,
    Path::Staging,
    Path::Helm,
    Path::FluxHelmRelease,
    Path::ArgoApplication,
];

/// What an install left to check and to uninstall.
struct Installed {
    /// Every object the path applied (for Helm: the release manifest, CRDs excluded).
    manifest: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_install_path_installs_runs_and_uninstalls() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let target = test_kit::target().expect("TPU_OPERATOR_KUBE / KUBECONFIG");
    let test_kit::Target::Real { kubeconfig } = target else {
        return crds_of_every_path_on_kube_emulator().await;
    };
    let cli = Cli::new(&kubeconfig);
    let gcp = gcp_emulator::Emulator::builder()
        .time_scale(600.0)
        .start()
        .await
        .expect("gcp-emulator");
    for path in PATHS {
        let started = Instant::now();
        cli.remove_crds().await;
        let installed = install(&cli, path);
        cli.wait_crds_established().await;
        let mut operator = Operator::start(&cli, NAMESPACE, RELEASE, &gcp.url());
        operator.wait_ready().await;
        println!("install[{path:?}]: 4 CRDs Established, /readyz 200");
        cluster::readme_policy_and_quickstart_succeed(&cli, &gcp, &format!("{path:?}")).await;
        // docs/install.md §5, step 1: the objects while the operator runs; then the operator.
        cli.kubectl(&[
            "delete",
            "trainingpipelines,preprocessbatches,tpuslices",
            "--all",
            "--all-namespaces",
            "--wait",
        ]);
        operator.stop();
        uninstall(&cli, path, &installed).await;
        println!("install[{path:?}]: done in {:.0?}", started.elapsed());
    }
}

/// The path as the docs give it, with the image set as the failure message says.
fn install(cli: &Cli, path: Path) -> Installed {
    let manifest = match path {
        Path::Helm => {
            // docs/install.md §3 with the README's image flags.
            cli.helm(&[
                "install",
                RELEASE,
                chart_dir().to_str().unwrap(),
                "-n",
                NAMESPACE,
                "--create-namespace",
                "--set",
                &format!("image.repository={IMAGE}"),
                "--set",
                &format!("image.tag={TAG}"),
                "--set",
                "config.clusterId=prod-us-central2",
            ]);
            cli.helm(&["get", "manifest", RELEASE, "-n", NAMESPACE])
        }
        Path::Deploy | Path::Staging => kustomize_install(cli, path),
        Path::FluxHelmRelease | Path::ArgoApplication => {
            let rendered = gitops_render(cli, path);
            cli.kubectl(&["create", "namespace", NAMESPACE]);
            let file = cli.file("rendered.yaml", &rendered);
            cli.kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]);
            rendered
        }
    };
    assert_eq!(
        crds_in(&manifest_with_crds(path, &manifest)),
        sorted(crd_names()),
        "{path:?} does not install every CRD of `tpu-operator crds`"
    );
    Installed { manifest }
}

/// deploy/ or deploy/staging as the README writes it: refused at once without an image (no
/// Deployment created), then with the images set by `kustomize edit set image`.
fn kustomize_install(cli: &Cli, path: Path) -> String {
    let sub = if matches!(path, Path::Staging) {
        "deploy/staging"
    } else {
        "deploy"
    };
    let as_written = repo_root().join(sub);
    let out = fails(cli.kubectl_cmd(&["apply", "--server-side", "-k", as_written.to_str().unwrap()]));
    assert_refused_without_image(&out, sub);
    // kustomize refused to build: nothing at all was applied.
    assert!(
        cli.crds_present().is_empty(),
        "{sub} applied CRDs without an image"
    );
    let ns = cli.kubectl(&["get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name"]);
    assert!(ns.trim().is_empty(), "{sub} created {ns} without an image");
    println!("install[{path:?}]: as written, refused at once: the image must be built and set");
    let copy = copy_deploy(cli.dir.path());
    let dir = if matches!(path, Path::Staging) {
        copy.join("staging")
    } else {
        copy
    };
    set_images(
        &dir,
        &[
            ("tpu-operator", IMAGE, TAG),
            ("gcp-emulator", EMULATOR_IMAGE, TAG),
        ],
    );
    let dir = dir.to_str().unwrap();
    cli.kubectl(&["apply", "--server-side", "-k", dir]);
    let manifest = cli.kubectl(&["kustomize", dir]);
    let images: Vec<Value> = documents(&manifest)
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].clone())
        .collect();
    for image in &images {
        let image = image.as_str().unwrap();
        assert!(
            image.starts_with("registry.example/") && image.ends_with(":0.1.0"),
            "{image}"
        );
    }
    manifest
}

/// kustomize's refusal of deploy/ as written: it names the missing image and how to build and set it.
fn assert_refused_without_image(out: &str, sub: &str) {
    assert!(
        out.contains("no tpu-operator image is published")
            && out.contains("docker build -t IMAGE .")
            && out.contains("kustomize edit set image tpu-operator=IMAGE"),
        "kubectl apply -k {sub} without an image: {out}"
    );
}

/// The Flux HelmRelease's or the Argo CD Application's chart rendering: with the manifest's values
/// as shipped it fails naming image.repository and the fix; with the image added, the rendering.
fn gitops_render(cli: &Cli, path: Path) -> String {
    let (release, namespace, mut values) = match path {
        Path::FluxHelmRelease => {
            let text = std::fs::read_to_string(repo_root().join("deploy/flux/helmrelease.yaml")).unwrap();
            let hr: Value = serde_yaml::from_str(&text).unwrap();
            let spec = &hr["spec"];
            assert_eq!(spec["install"]["crds"], "CreateReplace");
            let release = spec["releaseName"].as_str().unwrap().to_string();
            (release, spec["targetNamespace"].clone(), spec["values"].clone())
        }
        _ => {
            let app = argo_application();
            let spec = &app["spec"];
            assert_eq!(spec["source"]["path"], "charts/tpu-operator");
            let release = app["metadata"]["name"].as_str().unwrap().to_string();
            let values = spec["source"]["helm"]["valuesObject"].clone();
            (release, spec["destination"]["namespace"].clone(), values)
        }
    };
    assert_eq!((release.as_str(), namespace.as_str()), (RELEASE, Some(NAMESPACE)));
    let template = |values: &Value| {
        let file = cli.file("values.json", &values.to_string());
        cli.helm_cmd(&[
            "template",
            RELEASE,
            chart_dir().to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--include-crds",
            "--values",
            file.to_str().unwrap(),
        ])
    };
    let out = fails(template(&values));
    assert!(
        out.contains("image.repository is required")
            && out.contains("docker build -t REGISTRY/tpu-operator:TAG ."),
        "{path:?} as shipped: {out}"
    );
    println!("install[{path:?}]: as shipped, refused at once: image.repository is required");
    values["image"] = serde_json::json!({"repository": IMAGE, "tag": TAG});
    cluster::ok(template(&values))
}

/// The Application of docs/gitops.md ("CRDs and installation", Argo CD).
fn argo_application() -> Value {
    let doc = std::fs::read_to_string(repo_root().join("docs/gitops.md")).unwrap();
    let block = doc
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("kind: Application"))
        .expect("docs/gitops.md has the Argo CD Application");
    serde_yaml::from_str(block).unwrap()
}

/// The manifest plus the CRDs Helm installs from crds/ (not part of a release's manifest).
fn manifest_with_crds(path: Path, manifest: &str) -> String {
    match path {
        Path::Helm => format!("{manifest}\n---\n{}", tpu_operator_api::crds::render_stream()),
        _ => manifest.to_string(),
    }
}

/// The documented uninstall (docs/install.md §5, docs/gitops.md): the operator and its namespace
/// go, the CRDs stay (nothing of a user's is deleted by accident); then the CRDs, deliberately.
async fn uninstall(cli: &Cli, path: Path, installed: &Installed) {
    match path {
        Path::Helm => {
            cli.helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"]);
        }
        Path::Deploy | Path::Staging => {
            let sub = if matches!(path, Path::Staging) {
                "deploy/staging"
            } else {
                "deploy"
            };
            let operator = repo_root().join(sub).join("tpu-operator.yaml");
            cli.kubectl(&["delete", "-f", operator.to_str().unwrap(), "--ignore-not-found"]);
        }
        // What helm-controller's uninstall and Argo CD's cascading delete remove: the release's
        // objects, never the CRDs (helm keeps crds/; the CRDs carry Delete=false for Argo CD).
        Path::FluxHelmRelease | Path::ArgoApplication => {
            let file = cli.file("operator.yaml", &without_crds(&installed.manifest));
            cli.kubectl(&["delete", "-f", file.to_str().unwrap(), "--ignore-not-found"]);
        }
    }
    cli.kubectl(&["delete", "namespace", NAMESPACE, "--ignore-not-found"]);
    let objects = without_crds(&installed.manifest);
    cli.wait_all_gone(&format!("{path:?} uninstall"), &objects).await;
    assert_eq!(
        cli.crds_present(),
        crd_names(),
        "{path:?}: the operator's uninstall deleted a CRD (and every object of its kind)"
    );
    // The CRDs last (install.md: `kubectl delete crd ...` / `kubectl delete -k deploy/crds/`).
    let crds = repo_root().join("deploy/crds");
    cli.kubectl(&["delete", "-k", crds.to_str().unwrap(), "--wait"]);
    assert!(cli.crds_present().is_empty());
    println!("install[{path:?}]: uninstalled; nothing left, CRDs deleted last");
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// kube-emulator: each path's CRDs, applied server-side as the path applies them, are all
/// Established (kube-emulator serves CRDs, not RBAC or Deployments).
async fn crds_of_every_path_on_kube_emulator() {
    for path in PATHS {
        let kube = kube_emulator::KubeEmulator::new();
        let server = kube
            .start("127.0.0.1:0")
            .await
            .expect("kube-emulator on a socket");
        let cli = Cli::new(std::path::Path::new("/dev/null"));
        let kubeconfig = cli.file("kubeconfig", &kube_emulator::kubeconfig(&server.url));
        let cli = Cli { kubeconfig, ..cli };
        let rendered = match path {
            Path::Helm => support::Helm::new().template(&["--include-crds"]),
            Path::Deploy | Path::Staging => {
                let sub = if matches!(path, Path::Staging) {
                    "staging"
                } else {
                    ""
                };
                let as_written = repo_root().join("deploy").join(sub);
                let out = fails(cli.kubectl_cmd(&["kustomize", as_written.to_str().unwrap()]));
                assert_refused_without_image(&out, sub);
                support::kustomize_with_images(sub)
            }
            Path::FluxHelmRelease | Path::ArgoApplication => gitops_render(&cli, path),
        };
        assert_eq!(
            crds_in(&rendered),
            sorted(crd_names()),
            "{path:?} does not install every CRD of `tpu-operator crds`"
        );
        let crds: String = documents(&rendered)
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| format!("---\n{}", serde_yaml::to_string(&d).unwrap()))
            .collect();
        let file = cli.file("crds.yaml", &crds);
        cli.kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]);
        cli.wait_crds_established().await;
        println!("install[{path:?}]: every CRD Established on kube-emulator");
    }
    eprintln!(
        "NOTICE: the install paths' operator, quickstart and uninstall need a real kube-apiserver \
         (RBAC, Deployments, namespace deletion; kube-emulator has none); \
         scripts/ci-control-plane.sh runs them with TPU_OPERATOR_KUBE=real"
    );
}
