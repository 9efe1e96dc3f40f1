//! Starting the two emulators the way every harness wants them: kube-emulator with the project's
//! CRDs already installed, gcp-emulator on a manual clock at a fixed instant (a test moves cloud
//! time itself) or on a scaled wall clock (`tpu-operator local`, benches).

use std::path::Path;

use chrono::{DateTime, Utc};
use kube_emulator::KubeEmulator;

/// Where every manual cloud clock starts, so fixtures and expected timestamps are stable.
pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A fresh kube-emulator with the CRDs this binary generates (the same documents as the
/// committed `crds/`, which the chart test keeps in step).
pub fn kube_with_crds() -> Result<KubeEmulator, kube_emulator::Error> {
    let kube = KubeEmulator::new();
    install_crds(&kube)?;
    Ok(kube)
}

/// Installs the project's CRDs into an existing emulator (e.g. one [`crate::TestCluster`] started).
pub fn install_crds(kube: &KubeEmulator) -> Result<(), kube_emulator::Error> {
    kube.install_crds_from_yaml(&tpu_operator_api::crds::render_stream())
        .map(drop)
}

/// Writes a kubeconfig for kubectl / helm / an operator process that reaches `server`.
pub fn write_kubeconfig(server: &kube_emulator::Server, path: &Path) -> std::io::Result<()> {
    std::fs::write(path, kube_emulator::kubeconfig(&server.url))
}

/// gcp-emulator whose clock stands still at `start` until the caller advances it.
pub async fn gcp_manual(start: DateTime<Utc>) -> gcp_emulator::Emulator {
    gcp_emulator::Emulator::builder()
        .manual_clock(start)
        .start()
        .await
        .expect("gcp-emulator")
}
