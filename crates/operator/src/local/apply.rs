//! Loading manifests and applying them all-or-nothing.
//!
//! Every document is first sent as a server-side dry run (`dryRun=All`), so admission (schema and
//! CEL rules) judges all of them before anything is stored: a bad manifest is reported with the
//! API's own field-level message and nothing is applied. Every create asks for
//! `fieldValidation=Strict`, as kubectl does, so a field the schema does not declare is an error
//! rather than silently dropped. Namespaces named by the manifests are
//! created first (a dry run of an object in a missing namespace would fail), and removed again
//! if a later document is rejected.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Resource as _;
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, PostParams},
    core::GroupVersionKind,
    discovery::{ApiResource, Scope, pinned_kind},
};
use serde_json::Value;

const FIELD_MANAGER: &str = "tpu-operator-local";

/// One YAML document of a manifest file.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// `file` or `file#N` (N counts documents from 1), for messages.
    pub source: String,
    pub object: DynamicObject,
    pub gvk: GroupVersionKind,
}

/// An object stored by [`apply_all`].
#[derive(Debug, Clone)]
pub struct Applied {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub resource: ApiResource,
}

impl Applied {
    pub fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Reads every non-empty YAML document of `paths`, as `kubectl apply -f` does: `-` is stdin, a
/// directory contributes its `*.yaml`, `*.yml` and `*.json` files in name order (not recursively).
/// Stops at the first error, with kubectl's one-line message naming the file and line.
pub fn load(paths: &[PathBuf]) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for path in paths {
        for (name, text) in read_sources(path)? {
            out.extend(parse(&name, &text)?);
        }
    }
    if out.is_empty() {
        bail!("no objects passed to apply");
    }
    Ok(out)
}

/// The (name for messages, text) of every file `path` stands for.
fn read_sources(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("error reading STDIN")?;
        return Ok(vec![("STDIN".into(), text)]);
    }
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("the path \"{shown}\" does not exist"),
        Err(e) => bail!("error reading {shown}: {e}"),
    };
    let files = if meta.is_dir() {
        let mut files = Vec::new();
        let entries = std::fs::read_dir(path).with_context(|| format!("error reading {shown}"))?;
        for entry in entries {
            let file = entry.with_context(|| format!("error reading {shown}"))?.path();
            let known = file
                .extension()
                .is_some_and(|e| ["yaml", "yml", "json"].iter().any(|k| e == *k));
            if known && file.is_file() {
                files.push(file);
            }
        }
        if files.is_empty() {
            bail!("error reading [{shown}]: recognized file extensions are [.json .yaml .yml]");
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .map(|file| {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).with_context(|| format!("error reading {name}"))?;
            Ok((name, text))
        })
        .collect()
}

/// The documents of one file. serde_yaml's document iterator repeats a syntax error forever, so
/// each document is converted as it comes and the first error ends the file.
fn parse(name: &str, text: &str) -> anyhow::Result<Vec<Manifest>> {
    let mut values = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(doc).map_err(|e| yaml_error(name, &e))?;
        values.push(value);
    }
    let many = values.len() > 1;
    let mut out = Vec::new();
    for (index, value) in values.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let source = if many {
            format!("{name}#{}", index + 1)
        } else {
            name.to_string()
        };
        out.push(manifest(source, value)?);
    }
    Ok(out)
}

/// kubectl's message: `error parsing FILE: error converting YAML to JSON: yaml: line N: PROBLEM`.
fn yaml_error(name: &str, err: &serde_yaml::Error) -> anyhow::Error {
    let message = err.to_string();
    // serde_yaml appends " at line L column C[, while parsing ... at line ...]"; the line is given
    // once, up front, as kubectl does.
    let problem = message.split(" at line ").next().unwrap_or(&message);
    match err.location() {
        Some(at) => anyhow::anyhow!(
            "error parsing {name}: error converting YAML to JSON: yaml: line {}: {problem}",
            at.line()
        ),
        None => anyhow::anyhow!("error parsing {name}: error converting YAML to JSON: yaml: {problem}"),
    }
}

/// One document as an object, or kubectl's validation message when it is not one.
fn manifest(source: String, value: Value) -> anyhow::Result<Manifest> {
    let field = |name: &str| value.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
    let missing: Vec<&str> = [("apiVersion", "apiVersion not set"), ("kind", "kind not set")]
        .into_iter()
        .filter(|(name, _)| field(name).is_none())
        .map(|(_, message)| message)
        .collect();
    match missing[..] {
        [] => {}
        [one] => bail!("error validating \"{source}\": error validating data: {one}"),
        _ => bail!(
            "error validating \"{source}\": error validating data: [{}]",
            missing.join(", ")
        ),
    }
    let (api_version, kind) = (
        field("apiVersion").unwrap_or_default(),
        field("kind").unwrap_or_default(),
    );
    // `generateName` as `kubectl create` takes it: a sweep of variants is written once and
    // created as many times as it is listed (the server names each; see `create_checked`).
    let named = |key: &str| value.pointer(key).and_then(Value::as_str).is_some();
    if !named("/metadata/name") && !named("/metadata/generateName") {
        bail!(
            "error validating \"{source}\": {kind}: metadata.name: Required value: name or generateName is required"
        );
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let object: DynamicObject = serde_json::from_value(value)
        .map_err(|e| anyhow::anyhow!("error validating \"{source}\": not a Kubernetes object: {e}"))?;
    Ok(Manifest { source, object, gvk })
}

/// Validates everything by dry run, then creates everything. On any failure, deletes what this
/// call created and returns the API's message prefixed with the document's source.
pub async fn apply_all(client: &kube::Client, manifests: &[Manifest]) -> anyhow::Result<Vec<Applied>> {
    let mut resolved = Vec::new();
    for m in manifests {
        let (resource, caps) = match pinned_kind(client, &m.gvk).await {
            Ok(found) => found,
            Err(_) => return Err(no_such_kind(client, m).await),
        };
        let mut object = m.object.clone();
        let namespace = match caps.scope {
            Scope::Namespaced => Some(
                object
                    .metadata
                    .namespace
                    .get_or_insert_with(|| "default".into())
                    .clone(),
            ),
            Scope::Cluster => None,
        };
        let applied = Applied {
            kind: m.gvk.kind.clone(),
            name: object.metadata.name.clone().unwrap_or_default(),
            namespace,
            resource,
        };
        resolved.push((m.source.clone(), object, applied));
    }

    let mut created = Vec::new();
    let result = create_checked(client, &resolved, &mut created).await;
    if let Err(err) = result {
        for applied in created.iter().rev() {
            let _ = applied
                .api(client)
                .delete(&applied.name, &DeleteParams::default())
                .await;
        }
        return Err(err);
    }
    Ok(created)
}

/// Creates every resolved object: the namespaces they need first, then a dry run of all the
/// rest (one refused object creates none of them), then the rest; `created` collects what
/// exists, for the caller to delete when something fails.
async fn create_checked(
    client: &kube::Client,
    resolved: &[(String, DynamicObject, Applied)],
    created: &mut Vec<Applied>,
) -> anyhow::Result<()> {
    let early = create_namespaces(client, resolved, created).await?;
    let rest: Vec<_> = resolved
        .iter()
        .filter(|(_, _, a)| !early.iter().any(|ns| is_namespace_doc(a, ns)))
        .collect();
    for (source, object, applied) in &rest {
        create(client, applied, object, true)
            .await
            .map_err(|e| rejection(source, e))?;
    }
    for (source, object, applied) in rest {
        let made = create(client, applied, object, false)
            .await
            .map_err(|e| rejection(source, e))?;
        // A `generateName` object is known by the name the server gave it from now on.
        created.push(Applied {
            name: made.metadata.name.unwrap_or_else(|| applied.name.clone()),
            ..applied.clone()
        });
    }
    Ok(())
}

/// Namespaces the objects live in must exist before their dry runs: creates the missing ones
/// (from their document among the manifests, else bare) and returns their names.
async fn create_namespaces(
    client: &kube::Client,
    resolved: &[(String, DynamicObject, Applied)],
    created: &mut Vec<Applied>,
) -> anyhow::Result<Vec<String>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut needed: Vec<&str> = resolved
        .iter()
        .filter_map(|(_, _, a)| a.namespace.as_deref())
        .collect();
    needed.sort_unstable();
    needed.dedup();
    let mut early = Vec::new();
    for ns in needed {
        if namespaces.get_opt(ns).await?.is_some() {
            continue;
        }
        match resolved.iter().find(|(_, _, a)| is_namespace_doc(a, ns)) {
            Some((source, object, applied)) => {
                create(client, applied, object, false)
                    .await
                    .map_err(|e| rejection(source, e))?;
                created.push(applied.clone());
            }
            None => created.push(create_bare_namespace(&namespaces, ns).await?),
        }
        early.push(ns.to_string());
    }
    Ok(early)
}

/// A Namespace document among the manifests is created as written (labels and all).
fn is_namespace_doc(a: &Applied, ns: &str) -> bool {
    a.kind == "Namespace" && a.namespace.is_none() && a.name == ns
}

/// Creates namespace `ns` with nothing but its name.
async fn create_bare_namespace(namespaces: &Api<Namespace>, ns: &str) -> anyhow::Result<Applied> {
    let object = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(ns.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&post_params(false), &object)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(Applied {
        kind: "Namespace".into(),
        namespace: None,
        name: ns.to_string(),
        resource: ApiResource::erase::<Namespace>(&()),
    })
}

fn post_params(dry_run: bool) -> PostParams {
    PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    }
}

/// POST with `fieldValidation=Strict`, as kubectl sends it: a field the schema does not declare
/// (a typo such as `maxRetrys`) is an error instead of being dropped. kube's `PostParams` has no
/// such parameter, so the request is built here.
async fn create(
    client: &kube::Client,
    applied: &Applied,
    object: &DynamicObject,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    let url = DynamicObject::url_path(&applied.resource, applied.namespace.as_deref());
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(url)
        .create(&post_params(dry_run), body)
        .map_err(kube::Error::BuildRequest)?;
    // `create` always ends the URI with a query (`?dryRun=...&fieldManager=...`).
    let strict = format!("{}&fieldValidation=Strict", request.uri());
    *request.uri_mut() = strict
        .parse()
        .map_err(|e| kube::Error::Service(format!("{strict}: {e}").into()))?;
    client.request(request).await
}

/// The API server's message, as kubectl shows it (without its "Error from server" prefix, as
/// `main` prints `error:` before it): it names the object and every rejected field.
fn rejection(source: &str, err: kube::Error) -> anyhow::Error {
    match err {
        kube::Error::Api(status) => {
            anyhow::anyhow!("error when creating \"{source}\": {}", status.message)
        }
        other => anyhow::anyhow!("error when creating \"{source}\": {other}"),
    }
}

/// kubectl's message for a kind the API does not serve, with the kinds the group does serve
/// (a typo is the usual cause: the CRDs are always installed here).
async fn no_such_kind(client: &kube::Client, m: &Manifest) -> anyhow::Error {
    let api_version = m.gvk.api_version();
    let namespace = m.object.metadata.namespace.as_deref().unwrap_or_default();
    let name = m.object.metadata.name.as_deref().unwrap_or_default();
    let mut message = format!(
        "resource mapping not found for name: \"{name}\" namespace: \"{namespace}\" from \"{}\": \
         no matches for kind \"{}\" in version \"{api_version}\"",
        m.source, m.gvk.kind
    );
    if let Ok(group) = kube::discovery::group(client, &m.gvk.group).await {
        let mut served: Vec<String> = group
            .recommended_resources()
            .into_iter()
            .map(|(r, _)| format!("{} ({})", r.kind, r.api_version))
            .collect();
        served.sort();
        served.dedup();
        // A typo's neighbours, not the core group's every kind.
        if !served.is_empty() && served.len() <= 10 {
            message.push_str(&format!("; the API serves: {}", served.join(", ")));
        }
    }
    anyhow::anyhow!(message)
}
