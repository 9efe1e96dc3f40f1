//! [`TestCluster`]: what a suite needs from either target in one value: a `kube::Client`, a
//! kubeconfig file for kubectl / helm, and (emulator only) the emulator handle for test hooks.

use std::path::{Path, PathBuf};

use kube_emulator::KubeEmulator;

use crate::target::{ClientError, Target, TargetError, real_client, target};

/// Failure to connect to the selected target.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("starting kube-emulator on 127.0.0.1:0 for kubectl: {0}")]
    StartEmulator(std::io::Error),
    #[error("writing the kube-emulator kubeconfig {path:?}: {source}")]
    WriteKubeconfig { path: PathBuf, source: std::io::Error },
}

/// An emulator served both in-process (the client) and on a loopback socket (kubectl), sharing
/// one state; the socket closes when this is dropped.
struct Emulated {
    emulator: KubeEmulator,
    _server: kube_emulator::Server,
    _dir: tempfile::TempDir,
}

/// The cluster a test runs against, chosen by [`target()`].
pub struct TestCluster {
    pub client: kube::Client,
    kubeconfig: PathBuf,
    emulated: Option<Emulated>,
}

impl TestCluster {
    /// Connects to the target the environment selects (see [`crate::target`]): a fresh
    /// kube-emulator by default, the real control plane with `TPU_OPERATOR_KUBE=real`.
    pub async fn connect() -> Result<Self, ConnectError> {
        match target()? {
            Target::Emulator => Self::emulator().await,
            Target::Real { kubeconfig } => {
                let client = real_client(&kubeconfig).await?;
                Ok(TestCluster {
                    client,
                    kubeconfig,
                    emulated: None,
                })
            }
        }
    }

    /// A fresh kube-emulator regardless of the environment (for emulator-only tests).
    pub async fn emulator() -> Result<Self, ConnectError> {
        let emulator = KubeEmulator::new();
        let server = emulator
            .start("127.0.0.1:0")
            .await
            .map_err(ConnectError::StartEmulator)?;
        let dir = tempfile::tempdir().map_err(|source| ConnectError::WriteKubeconfig {
            path: std::env::temp_dir(),
            source,
        })?;
        let kubeconfig = dir.path().join("kubeconfig");
        crate::emulators::write_kubeconfig(&server, &kubeconfig).map_err(|source| {
            ConnectError::WriteKubeconfig {
                path: kubeconfig.clone(),
                source,
            }
        })?;
        let client = kube::Client::new(emulator.router(), "default");
        Ok(TestCluster {
            client,
            kubeconfig,
            emulated: Some(Emulated {
                emulator,
                _server: server,
                _dir: dir,
            }),
        })
    }

    /// A kubeconfig file for kubectl / helm that reaches the same cluster as [`Self::client`].
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The emulator behind this cluster, for its test hooks (watch compaction, restarts); `None`
    /// against the real control plane, where a test needing a hook must skip with a printed reason.
    pub fn emulator_handle(&self) -> Option<&KubeEmulator> {
        self.emulated.as_ref().map(|e| &e.emulator)
    }

    pub fn is_real(&self) -> bool {
        self.emulated.is_none()
    }
}

#[cfg(test)]
mod tests {
    use kube::core::{Request, params::PostParams};

    use super::*;

    #[tokio::test]
    async fn emulator_client_and_kubeconfig_reach_the_same_state() {
        let cluster = TestCluster::emulator().await.unwrap();
        assert!(!cluster.is_real());
        assert!(cluster.emulator_handle().is_some());
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}});
        let create = Request::new("/api/v1/namespaces/default/configmaps")
            .create(&PostParams::default(), serde_json::to_vec(&cm).unwrap())
            .unwrap();
        cluster.client.request_text(create).await.unwrap();

        // What kubectl would use: the kubeconfig file, over the socket.
        let over_socket = real_client(cluster.kubeconfig()).await.unwrap();
        let get = Request::new("/api/v1/namespaces/default/configmaps")
            .get("shared", &Default::default())
            .unwrap();
        let got: serde_json::Value = over_socket.request(get).await.unwrap();
        assert_eq!(got["metadata"]["name"], "shared");
    }
}
