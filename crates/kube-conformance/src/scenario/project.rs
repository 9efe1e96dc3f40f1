//! tpu-operator's own kinds: the committed CRDs (`crds/*.yaml`) are installed, then every schema
//! fixture of `crates/api/tests/fixtures/{valid,invalid}` is created (and, for two-document
//! fixtures, updated), so both servers judge the very objects the api crate's tests reason about.
//! A fixture's first document is the stored object; a second document is the update to it.

use std::path::{Path, PathBuf};

use kube::core::{
    Request,
    params::{DeleteParams, GetParams, PostParams},
};
use serde::Deserialize;
use serde_json::Value;

use super::{NAMESPACE, bytes, established};
use crate::transcript::{SendError, Session};

/// Reading the project files failed: the scenario cannot run without them.
#[derive(Debug, thiserror::Error)]
#[error("reading {path:?}: {message}")]
pub struct ProjectFileError {
    pub path: PathBuf,
    pub message: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crds() -> Request {
    Request::new("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
}

fn documents(path: &Path) -> Result<Vec<Value>, ProjectFileError> {
    let err = |message: String| ProjectFileError {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).map_err(|e| err(e.to_string()))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>, ProjectFileError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ProjectFileError {
        path: dir.to_owned(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The project's CRD names (`<plural>.<group>`), for installation and clean-up.
pub fn crd_names() -> Result<Vec<String>, ProjectFileError> {
    let mut names = Vec::new();
    for file in sorted_files(&repo_root().join("crds"))? {
        for doc in documents(&file)? {
            names.extend(doc["metadata"]["name"].as_str().map(str::to_owned));
        }
    }
    Ok(names)
}

/// Everything the module sends, loaded before the first request so a missing file fails early.
pub struct ProjectFiles {
    crds: Vec<Value>,
    /// kind -> (plural, namespaced), from the CRDs' `spec.names` and `spec.scope`.
    plurals: std::collections::HashMap<String, (String, bool)>,
    fixtures: Vec<(String, bool, Vec<Value>)>,
}

pub fn load() -> Result<ProjectFiles, ProjectFileError> {
    let mut crds = Vec::new();
    for file in sorted_files(&repo_root().join("crds"))? {
        crds.extend(documents(&file)?);
    }
    let plurals = crds
        .iter()
        .filter_map(|c| {
            let names = &c["spec"]["names"];
            let namespaced = c["spec"]["scope"].as_str() != Some("Cluster");
            Some((
                names["kind"].as_str()?.to_owned(),
                (names["plural"].as_str()?.to_owned(), namespaced),
            ))
        })
        .collect();
    let mut fixtures = Vec::new();
    let root = repo_root().join("crates/api/tests/fixtures");
    for (dir, valid) in [("valid", true), ("invalid", false)] {
        for file in sorted_files(&root.join(dir))? {
            // A fixture whose first document was stored before a rule tightened (ratcheting)
            // cannot be created on a server that has the rule; crates/api/tests/schema.rs checks
            // it against the emulator's validator alone.
            let text = std::fs::read_to_string(&file).map_err(|e| ProjectFileError {
                path: file.clone(),
                message: e.to_string(),
            })?;
            if text.lines().any(|l| l.trim() == "# stored: before-tightening") {
                continue;
            }
            let stem = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            fixtures.push((format!("{dir}/{stem}"), valid, documents(&file)?));
        }
    }
    Ok(ProjectFiles {
        crds,
        plurals,
        fixtures,
    })
}

/// Collection URL of a fixture's kind: in the scenario namespace, or cluster-wide for a
/// cluster-scoped kind (TpuPolicy).
fn collection(files: &ProjectFiles, object: &Value) -> Request {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match files.plurals.get(kind) {
        Some((plural, false)) => Request::new(format!("/apis/{api_version}/{plural}")),
        Some((plural, true)) => Request::new(format!("/apis/{api_version}/namespaces/{NAMESPACE}/{plural}")),
        None => Request::new(format!(
            "/apis/{api_version}/namespaces/{NAMESPACE}/{}",
            kind.to_lowercase()
        )),
    }
}

/// Fixtures reuse a handful of names (`x`); each gets its own: `<dir>-<file stem>`. A name longer
/// than a label value (63) is what its fixture is about (a TrainingPipeline's name labels its
/// children), so it is kept.
fn placed(object: &Value, name: &str) -> Value {
    let mut object = object.clone();
    let own = object["metadata"]["name"].as_str().unwrap_or_default();
    if own.len() <= 63 {
        object["metadata"]["name"] = Value::String(name.to_owned());
    }
    if object["kind"].as_str() != Some("TpuPolicy") {
        object["metadata"]["namespace"] = Value::String(NAMESPACE.to_owned());
    }
    object
}

pub(super) async fn run(s: &mut Session, files: &ProjectFiles) -> Result<(), SendError> {
    for crd in &files.crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        s.send(
            &format!("project crd: create {name}"),
            crds().create(&PostParams::default(), bytes(crd)),
            201,
        )
        .await?;
        let get = || crds().get(&name, &GetParams::default());
        s.poll_until(&format!("project crd: {name} established"), get, 200, established)
            .await?;
    }
    for (label, valid, docs) in &files.fixtures {
        let name = label.replace('/', "-");
        let step = |what: &str| format!("fixture {label}: {what}");
        match docs.as_slice() {
            [object] => {
                let expected = if *valid { 201 } else { 422 };
                let object = placed(object, &name);
                let create = collection(files, &object).create(&PostParams::default(), bytes(&object));
                s.send(&step("create"), create, expected).await?;
            }
            [stored, update] => {
                let stored = placed(stored, &name);
                let create = collection(files, &stored).create(&PostParams::default(), bytes(&stored));
                let created = s.send(&step("create the stored object"), create, 201).await?;
                let mut update = placed(update, &name);
                update["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
                let expected = if *valid { 200 } else { 422 };
                let replace =
                    collection(files, &update).replace(&name, &PostParams::default(), bytes(&update));
                s.send(&step("update"), replace, expected).await?;
            }
            other => {
                let message = format!("fixture {label} has {} documents; expected 1 or 2", other.len());
                return Err(SendError::Scenario { message });
            }
        }
    }
    Ok(())
}

/// Deletes the project CRDs (their objects go with them) and waits until they are gone.
pub(super) async fn teardown(s: &mut Session, names: &[String]) -> Result<(), SendError> {
    let gone = |status: u16, _: &Value| status == 404;
    for name in names {
        s.send(
            &format!("project crd: delete {name}"),
            crds().delete(name, &DeleteParams::default()),
            200,
        )
        .await?;
        let get = || crds().get(name, &GetParams::default());
        s.poll_until(&format!("project crd: {name} gone"), get, 404, gone)
            .await?;
    }
    Ok(())
}
