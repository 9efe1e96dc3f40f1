//! Which Kubernetes API a test suite runs against: the in-process `kube-emulator` (the default, so
//! `cargo test --workspace` needs nothing but Rust) or a real control plane started by
//! `tests/control-plane/up.sh` (CI sets `TPU_OPERATOR_KUBE=real` and `KUBECONFIG`).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Selects the API server: unset, empty or `emulator` = kube-emulator; `real` = the kubeconfig in
/// [`KUBECONFIG_ENV`].
pub const TARGET_ENV: &str = "TPU_OPERATOR_KUBE";
/// Path of the kubeconfig for the real control plane (one file; `up.sh` writes it).
pub const KUBECONFIG_ENV: &str = "KUBECONFIG";

/// The API server a suite should talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Start a `kube-emulator` in-process (each suite does this its own way).
    Emulator,
    /// A real kube-apiserver reachable with this kubeconfig.
    Real { kubeconfig: PathBuf },
}

/// Why the environment does not name a usable target. A misconfigured switch is an error, never
/// a silent fall-back to the emulator: CI would otherwise "pass" against the wrong server.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{TARGET_ENV}={value:?} is not a target; use `emulator` (or leave it unset) or `real`")]
    UnknownTarget { value: String },
    #[error(
        "{TARGET_ENV}=real needs {KUBECONFIG_ENV} naming the control plane's kubeconfig (tests/control-plane/up.sh prints it)"
    )]
    MissingKubeconfig,
    #[error("{KUBECONFIG_ENV}={path:?} must name exactly one kubeconfig file for {TARGET_ENV}=real")]
    KubeconfigList { path: String },
    #[error("kubeconfig {path:?} from {KUBECONFIG_ENV} does not exist")]
    KubeconfigNotFound { path: PathBuf },
}

/// Reads [`TARGET_ENV`] and [`KUBECONFIG_ENV`] from the process environment.
pub fn target() -> Result<Target, TargetError> {
    target_from(
        std::env::var(TARGET_ENV).ok().as_deref(),
        std::env::var(KUBECONFIG_ENV).ok().as_deref(),
    )
}

/// [`target`] on explicit values (what the environment would hold), for tests and for callers that
/// take the switch from elsewhere (a CLI flag).
pub fn target_from(kube: Option<&str>, kubeconfig: Option<&str>) -> Result<Target, TargetError> {
    match kube.map(str::trim).unwrap_or("") {
        "" | "emulator" => Ok(Target::Emulator),
        "real" => {
            let path = kubeconfig.map(str::trim).filter(|p| !p.is_empty());
            let path = path.ok_or(TargetError::MissingKubeconfig)?;
            if path.contains(':') {
                return Err(TargetError::KubeconfigList {
                    path: path.to_owned(),
                });
            }
            let kubeconfig = PathBuf::from(path);
            if !kubeconfig.is_file() {
                return Err(TargetError::KubeconfigNotFound { path: kubeconfig });
            }
            Ok(Target::Real { kubeconfig })
        }
        other => Err(TargetError::UnknownTarget {
            value: other.to_owned(),
        }),
    }
}

impl Target {
    /// True for [`Target::Real`].
    pub fn is_real(&self) -> bool {
        matches!(self, Target::Real { .. })
    }
}

/// Failure to build a client for the real control plane.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path:?}: {source}")]
    ReadKubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path:?} is not a usable client configuration: {source}")]
    Config {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("building a client from kubeconfig {path:?}: {source}")]
    Client { path: PathBuf, source: kube::Error },
}

/// A `kube::Client` for the kubeconfig file at `path` (its current context), independent of the
/// process's own `KUBECONFIG` merging rules.
pub async fn real_client(path: &Path) -> Result<kube::Client, ClientError> {
    // kube's rustls-tls panics without a process-wide provider; another caller may have installed
    // one already, which is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
        path: path.to_owned(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Config {
            path: path.to_owned(),
            source,
        })?;
    kube::Client::try_from(config).map_err(|source| ClientError::Client {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_emulator_selects_the_emulator() {
        assert_eq!(target_from(None, None).unwrap(), Target::Emulator);
        assert_eq!(target_from(Some(""), Some("/nope")).unwrap(), Target::Emulator);
        assert_eq!(target_from(Some("emulator"), None).unwrap(), Target::Emulator);
    }

    #[test]
    fn real_requires_an_existing_single_kubeconfig() {
        assert!(matches!(
            target_from(Some("real"), None),
            Err(TargetError::MissingKubeconfig)
        ));
        assert!(matches!(
            target_from(Some("real"), Some("/a:/b")),
            Err(TargetError::KubeconfigList { .. })
        ));
        assert!(matches!(
            target_from(Some("real"), Some("/definitely/not/here")),
            Err(TargetError::KubeconfigNotFound { .. })
        ));
        let file = std::env::current_exe().unwrap();
        let found = target_from(Some("real"), file.to_str()).unwrap();
        assert_eq!(found, Target::Real { kubeconfig: file });
        assert!(found.is_real());
    }

    #[test]
    fn unknown_values_are_errors_not_the_emulator() {
        let err = target_from(Some("kind"), None).unwrap_err();
        assert!(err.to_string().contains("TPU_OPERATOR_KUBE=\"kind\""), "{err}");
    }
}
