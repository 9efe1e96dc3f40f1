//! Loading manifests and applying them all-or-nothing.
//!
//! Every document is first sent as a server-side dry run (`dryRun=All`), so admission (schema and
//! CEL rules) judges all of them before anything is stored: a bad manifest is reported with the
//! API's own field-level message and nothing is applied. Namespaces named by the manifests are
//! created first (a dry run of an object in a missing namespace would fail), and removed again
//! if a later document is rejected.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
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

/// Reads every non-empty YAML document of `paths`.
pub fn load(paths: &[PathBuf]) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for path in paths {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading manifest {}", path.display()))?;
        out.extend(parse(path, &text)?);
    }
    if out.is_empty() {
        bail!("the manifests contain no objects");
    }
    Ok(out)
}

fn parse(path: &Path, text: &str) -> anyhow::Result<Vec<Manifest>> {
    let docs: Vec<_> = serde_yaml::Deserializer::from_str(text).collect();
    let many = docs.len() > 1;
    let mut out = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        let source = if many {
            format!("{}#{}", path.display(), index + 1)
        } else {
            path.display().to_string()
        };
        let value: Value =
            serde::Deserialize::deserialize(doc).with_context(|| format!("{source}: not YAML"))?;
        if value.is_null() {
            continue;
        }
        let field = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .with_context(|| format!("{source}: missing {name}"))
        };
        let (api_version, kind) = (field("apiVersion")?, field("kind")?);
        if value.pointer("/metadata/name").and_then(Value::as_str).is_none() {
            bail!("{source}: missing metadata.name");
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let object: DynamicObject =
            serde_json::from_value(value).with_context(|| format!("{source}: not a Kubernetes object"))?;
        out.push(Manifest { source, object, gvk });
    }
    Ok(out)
}

/// Validates everything by dry run, then creates everything. On any failure, deletes what this
/// call created and returns the API's message prefixed with the document's source.
pub async fn apply_all(client: &kube::Client, manifests: &[Manifest]) -> anyhow::Result<Vec<Applied>> {
    let mut resolved = Vec::new();
    for m in manifests {
        let (resource, caps) = pinned_kind(client, &m.gvk)
            .await
            .with_context(|| format!("{}: the API does not serve {:?}", m.source, m.gvk))?;
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

async fn create_checked(
    client: &kube::Client,
    resolved: &[(String, DynamicObject, Applied)],
    created: &mut Vec<Applied>,
) -> anyhow::Result<()> {
    // Namespaces the objects live in must exist before their dry runs.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut needed: Vec<&str> = resolved
        .iter()
        .filter_map(|(_, _, a)| a.namespace.as_deref())
        .collect();
    needed.sort_unstable();
    needed.dedup();
    // A Namespace document among the manifests is created as written (labels and all).
    let is_namespace_doc =
        |a: &Applied, ns: &str| a.kind == "Namespace" && a.namespace.is_none() && a.name == ns;
    let mut early = Vec::new();
    for ns in needed {
        if namespaces.get_opt(ns).await?.is_some() {
            continue;
        }
        match resolved.iter().find(|(_, _, a)| is_namespace_doc(a, ns)) {
            Some((source, object, applied)) => {
                applied
                    .api(client)
                    .create(&post_params(false), object)
                    .await
                    .map_err(|e| rejection(source, e))?;
                created.push(applied.clone());
            }
            None => {
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
                created.push(Applied {
                    kind: "Namespace".into(),
                    namespace: None,
                    name: ns.to_string(),
                    resource: ApiResource::erase::<Namespace>(&()),
                });
            }
        }
        early.push(ns.to_string());
    }
    let rest: Vec<_> = resolved
        .iter()
        .filter(|(_, _, a)| !early.iter().any(|ns| is_namespace_doc(a, ns)))
        .collect();
    for (source, object, applied) in &rest {
        applied
            .api(client)
            .create(&post_params(true), object)
            .await
            .map_err(|e| rejection(source, e))?;
    }
    for (source, object, applied) in rest {
        applied
            .api(client)
            .create(&post_params(false), object)
            .await
            .map_err(|e| rejection(source, e))?;
        created.push(applied.clone());
    }
    Ok(())
}

fn post_params(dry_run: bool) -> PostParams {
    PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    }
}

/// The API server's message as is: it names the object and every rejected field.
fn rejection(source: &str, err: kube::Error) -> anyhow::Error {
    match err {
        kube::Error::Api(status) => anyhow::anyhow!("{source}: {}", status.message),
        other => anyhow::anyhow!("{source}: {other}"),
    }
}
