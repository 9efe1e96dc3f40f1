//! The emulated Kubernetes side of `local`: kube-emulator with the CRDs and the chart's admission
//! policy, as a cluster installed with the chart has them.

use anyhow::Context as _;

use super::LocalArgs;

/// Kubernetes: CRDs from the binary itself, served on loopback (`--kube-listen`), with the
/// admission policy installed; our own client skips the socket.
pub(super) async fn start_kube(
    args: &LocalArgs,
) -> anyhow::Result<(kube_emulator::KubeEmulator, kube_emulator::Server, kube::Client)> {
    // Stable uids: the names and links made from them are the same on every run.
    let kube = kube_emulator::KubeEmulator::with_config(kube_emulator::Config {
        stable_uids: true,
        ..Default::default()
    });
    test_kit::emulators::install_crds(&kube).context("installing the CRDs into kube-emulator")?;
    let kube_server = kube
        .start(&args.kube_listen)
        .await
        .with_context(|| format!("kube-listen: cannot listen on {}", args.kube_listen))?;
    let client = kube::Client::new(kube.router(), "default");
    install_admission_policy(&client).await?;
    Ok((kube, kube_server, client))
}

/// The chart's ValidatingAdmissionPolicy and its binding (every namespace), so TpuPolicy objects
/// applied here are enforced at apply as in a cluster installed with the chart.
async fn install_admission_policy(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::{Api, PostParams};
    const NAME: &str = "tpu-operator-tpupolicy";
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": tpu_operator_api::admission::policy_spec(),
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": tpu_operator_api::admission::binding_spec(NAME),
    }))?;
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .context("installing the ValidatingAdmissionPolicy into kube-emulator")?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .context("installing the ValidatingAdmissionPolicyBinding into kube-emulator")?;
    Ok(())
}
