//! What `run` waits for or checks before the controllers start: the project's CRDs Established
//! (the controllers' watches would fail on a missing kind) and, with Kueue on, Kueue's Workload CRD.

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{await_condition, conditions::is_crd_established};
use tracing::info;

/// Waits until every CRD of the project is Established and serves the version this binary
/// reads and writes, so the controllers' watches succeed.
pub async fn wait_for_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for crd in tpu_operator_api::crds::all() {
        let name = crd.metadata.name.unwrap_or_default();
        info!(crd = %name, "waiting for the CRD to be established");
        let installed = await_condition(api.clone(), &name, is_crd_established())
            .await
            .with_context(|| format!("waiting for CRD {name}"))?;
        check_serves_version(&name, installed.as_ref())?;
    }
    info!("CRDs established");
    Ok(())
}

/// An upgrade that skipped the CRDs leaves ones that do not serve this binary's version: every
/// watch would fail with 404 and the operator would retry forever, so it stops with the fix.
fn check_serves_version(name: &str, installed: Option<&CustomResourceDefinition>) -> anyhow::Result<()> {
    let version = tpu_operator_api::crds::VERSION;
    let serves = installed.is_some_and(|crd| crd.spec.versions.iter().any(|v| v.name == version && v.served));
    anyhow::ensure!(
        serves,
        "the installed CRD {name} does not serve {version}, the version this operator uses: apply \
         this release's CRDs first (`helm show crds charts/tpu-operator | kubectl apply \
         --server-side --force-conflicts -f -`, docs/install.md \"Upgrade\")"
    );
    Ok(())
}

/// With `--kueue`, Kueue's Workload CRD must exist: the TpuSlice controller watches Workloads, and
/// a slice it gates waits for one to be admitted. Checked once at start, with the fix named.
pub async fn check_kueue(client: &kube::Client) -> anyhow::Result<()> {
    const WORKLOADS: &str = "workloads.kueue.x-k8s.io";
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    match api.get_opt(WORKLOADS).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => anyhow::bail!(
            "kueue is on (--kueue / config `kueue` / chart `kueue.enabled`) but the CRD {WORKLOADS} \
             does not exist: install Kueue first (docs/kueue.md) or turn the integration off"
        ),
        Err(err) => Err(err).with_context(|| {
            format!("reading the CRD {WORKLOADS} (the chart grants `get` on it when kueue.enabled)")
        }),
    }
}
