//! The previous release, built from this repository's history by scripts/previous-release.sh:
//! its binary, chart and the manifests its users keep in Git.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::support::repo_root;

/// One earlier release's tree (`src/`) and binary (`bin/tpu-operator`).
pub struct Release {
    root: PathBuf,
}

impl Release {
    /// The release docs/api-versions.md calls the previous one, built on first use (a few minutes
    /// cold; cached under target/previous-release after that).
    pub fn build() -> Self {
        let out = Command::new(repo_root().join("scripts/previous-release.sh"))
            .current_dir(repo_root())
            .output()
            .expect("run scripts/previous-release.sh");
        assert!(
            out.status.success(),
            "scripts/previous-release.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let root = PathBuf::from(stdout.lines().last().expect("the release's directory").trim());
        Self { root }
    }

    pub fn binary(&self) -> PathBuf {
        self.root.join("bin/tpu-operator")
    }

    pub fn chart(&self) -> PathBuf {
        self.root.join("src/charts/tpu-operator")
    }

    /// A file of the release's tree (`examples/quickstart.yaml`).
    pub fn file(&self, path: impl AsRef<Path>) -> String {
        std::fs::read_to_string(self.root.join("src").join(path)).unwrap()
    }
}
