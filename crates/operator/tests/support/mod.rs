//! Shared by the chart tests: the real helm and kubectl (crates/test-tools installs them on first
//! use; a failed install fails the tests, they never skip), chart rendering, and
//! multi-document YAML parsing.
#![allow(dead_code)]

pub mod generate;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde::Deserialize;
use serde_json::Value;

/// Release name and namespace used for every rendering (and for deploy/).
pub const RELEASE: &str = "tpu-operator";
pub const NAMESPACE: &str = "tpu-operator";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/tpu-operator")
}

fn tool(name: &str) -> PathBuf {
    match name {
        "helm" => test_tools::helm(),
        "kubectl" => test_tools::kubectl(),
        other => panic!("no such test tool: {other}"),
    }
}

pub fn kubectl() -> PathBuf {
    tool("kubectl")
}

/// The image values the chart requires (no image is published, so `image.repository` has no
/// default): what a user sets after building and pushing the images. Only for renderings that are
/// never pulled (kube-emulator and the control plane run no kubelet).
pub const TEST_IMAGES: &str = "image.repository=registry.example/tpu-operator,gcpEmulator.image.repository=registry.example/gcp-emulator";

/// helm with its cache/config/data homes in a temporary directory, so tests never touch ~/.
pub struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
    /// `--set TEST_IMAGES` right after `template` / `install` / `upgrade` / `lint`, so a test's
    /// own later `--set image...` still wins.
    images: bool,
}

impl Helm {
    /// helm that renders the chart with [`TEST_IMAGES`] set.
    pub fn new() -> Self {
        Self {
            bin: tool("helm"),
            home: tempfile::tempdir().unwrap(),
            images: true,
        }
    }

    /// helm exactly as a user runs it: no image values added.
    pub fn bare() -> Self {
        Self {
            images: false,
            ..Self::new()
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let mut args: Vec<&str> = args.to_vec();
        if self.images && matches!(args.first(), Some(&("template" | "install" | "upgrade" | "lint"))) {
            args.splice(1..1, ["--set", TEST_IMAGES]);
        }
        Command::new(&self.bin)
            .args(&args)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .output()
            .expect("run helm")
    }

    /// Runs helm; panics with its output unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `helm template tpu-operator charts/tpu-operator -n tpu-operator <extra>`.
    pub fn template(&self, extra: &[&str]) -> String {
        let chart = chart_dir();
        let mut args = vec![
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
        ];
        args.extend_from_slice(extra);
        self.ok(&args)
    }
}

/// Every non-empty document of a YAML stream, as JSON values.
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("valid YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The one document of `kind` (and `name`, when given).
pub fn find<'a>(docs: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && name.is_none_or(|n| d["metadata"]["name"] == n))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {kind} {name:?}, found {}",
        found.len()
    );
    found[0]
}

pub fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    k.sort();
    k
}

/// Every optional part of the chart switched on.
pub const ALL_OPTIONS: &[&str] = &[
    "--set",
    "gcpEmulator.enabled=true,networkPolicy.enabled=true,metrics.serviceMonitor.enabled=true,\
     metrics.prometheusRule.enabled=true,metrics.grafanaDashboard.enabled=true,\
     metrics.kubeStateMetrics.enabled=true,examplePolicy.enabled=true,serviceAccount.gcpServiceAccount=tpu-operator@my-proj.iam.gserviceaccount.com",
];

/// Copies the repository's deploy/ to `into`/deploy (what a user edits with `kustomize edit`).
pub fn copy_deploy(into: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let to = into.join("deploy");
    copy(&repo_root().join("deploy"), &to);
    to
}

/// `kustomize edit set image NAME=REF:TAG ...` on the kustomization in `dir`: each `images` entry
/// of that name gets `newName` / `newTag` (kubectl has no `kustomize edit`; this writes what it
/// writes).
pub fn set_images(dir: &Path, images: &[(&str, &str, &str)]) {
    let path = dir.join("kustomization.yaml");
    let mut k: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for entry in k["images"].as_array_mut().expect("an images: list") {
        let (_, name, tag) = images
            .iter()
            .find(|(n, _, _)| entry["name"] == *n)
            .unwrap_or_else(|| panic!("no image given for {entry}"));
        entry["newName"] = (*name).into();
        entry["newTag"] = (*tag).into();
    }
    std::fs::write(&path, serde_yaml::to_string(&k).unwrap()).unwrap();
}

/// `kubectl kustomize` of deploy/`sub` (`""`, `"staging"`, ...) after setting the images, as a
/// user must (deploy/ as written names no image and does not build).
pub fn kustomize_with_images(sub: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let copy = copy_deploy(dir.path()).join(sub);
    if copy.join("kustomization.yaml").is_file()
        && std::fs::read_to_string(copy.join("kustomization.yaml"))
            .unwrap()
            .contains("images:")
    {
        set_images(
            &copy,
            &[
                ("tpu-operator", "registry.example/tpu-operator", "0.1.0"),
                ("gcp-emulator", "registry.example/gcp-emulator", "0.1.0"),
            ],
        );
    }
    let out = Command::new(kubectl())
        .args(["kustomize", copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{sub}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
