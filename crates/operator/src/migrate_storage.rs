//! `tpu-operator migrate-storage`: every stored object of the project's kinds rewritten in its
//! CRD's storage version, then the CRD's `status.storedVersions` trimmed to that version.
//!
//! The API server keeps an object encoded in whatever version was the storage version when the
//! object was last written, and lists every such version in the CRD's `status.storedVersions`.
//! A version cannot be dropped from a CRD while it is listed there, so a release that stops
//! serving one needs every object rewritten first. Kubernetes' own migrator (StorageVersionMigration,
//! GA only in 1.37) does the same as this command: an update that changes nothing, which the
//! server stores re-encoded, because the encoded bytes differ from the stored ones.
//!
//! Safe to run at any time and more than once: an object written meanwhile is already in the
//! storage version, a conflict is retried on a fresh read, and an object deleted meanwhile is
//! skipped. `storedVersions` is trimmed only after every object of that kind was rewritten.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};

/// Flags of `tpu-operator migrate-storage`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// kubeconfig of a user who may update every object of the four kinds and patch
    /// `customresourcedefinitions/status` [default: in-cluster or ~/.kube/config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Objects listed per page: bounded memory whatever the number of objects.
const PAGE: u32 = 500;
/// Attempts per object when someone else writes it between our read and our write.
const CONFLICT_ATTEMPTS: usize = 5;

pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let client = crate::run::kube_client(args.kubeconfig.as_deref()).await?;
    for crd in tpu_operator_api::crds::all() {
        let name = crd.name_any();
        let line = migrate_kind(&client, &name).await?;
        println!("{line}");
    }
    Ok(())
}

/// Migrates the objects of the CRD `name` as it is installed; one line saying what was done.
async fn migrate_kind(client: &Client, name: &str) -> anyhow::Result<String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed = crds.get(name).await.with_context(|| {
        format!(
            "reading CRD {name}: apply the CRDs of the release you run first (docs/install.md, \"Upgrade\")"
        )
    })?;
    let Some(storage) = installed.spec.versions.iter().find(|v| v.storage) else {
        bail!("CRD {name} marks no version as storage");
    };
    let stored = installed
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored == [storage.name.clone()] {
        return Ok(format!("{name}: stored as {} only, nothing to do", storage.name));
    }
    let resource = ApiResource {
        group: installed.spec.group.clone(),
        version: storage.name.clone(),
        api_version: format!("{}/{}", installed.spec.group, storage.name),
        kind: installed.spec.names.kind.clone(),
        plural: installed.spec.names.plural.clone(),
    };
    let rewritten = rewrite_all(client, &resource).await?;
    let trimmed = serde_json::json!({"status": {"storedVersions": [storage.name]}});
    crds.patch_status(name, &PatchParams::default(), &Patch::Merge(&trimmed))
        .await
        .with_context(|| format!("trimming status.storedVersions of CRD {name}"))?;
    Ok(format!(
        "{name}: {rewritten} object(s) rewritten as {}; storedVersions {stored:?} -> [{:?}]",
        storage.name, storage.name
    ))
}

/// Rewrites every object of `resource` in every namespace; how many were rewritten.
async fn rewrite_all(client: &Client, resource: &ApiResource) -> anyhow::Result<usize> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let mut params = ListParams::default().limit(PAGE);
    let mut rewritten = 0;
    loop {
        let page = all
            .list(&params)
            .await
            .with_context(|| format!("listing {}", resource.plural))?;
        for object in &page.items {
            if rewrite(client, resource, object).await? {
                rewritten += 1;
            }
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(rewritten),
        }
    }
}

/// One update that changes nothing, so the server stores the object in its storage version.
/// False when the object was deleted before it could be written.
async fn rewrite(client: &Client, resource: &ApiResource, listed: &DynamicObject) -> anyhow::Result<bool> {
    let name = listed.name_any();
    let api: Api<DynamicObject> = match listed.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut object = listed.clone();
    for _ in 0..CONFLICT_ATTEMPTS {
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&name).await? {
                Some(fresh) => object = fresh,
                None => return Ok(false),
            },
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("rewriting {} {name} in its storage version", resource.kind));
            }
        }
    }
    bail!(
        "rewriting {} {name}: it changed under every one of {CONFLICT_ATTEMPTS} attempts; run the command again",
        resource.kind
    )
}
