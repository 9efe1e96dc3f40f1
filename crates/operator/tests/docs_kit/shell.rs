//! Where a doc block runs: `bash -euo pipefail` in the repository root, as a reader pastes it,
//! with a PATH on which `tpu-operator` is the binary this `cargo test` built, `kubectl` and `helm`
//! are the pinned real tools (crates/test-tools), and `cargo` maps `cargo run -p tpu-operator --`
//! to that same binary (the crate and features `cargo run` would build) and refuses anything else.

use std::{
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

/// What the `cargo` shim prints for `cargo test --workspace`: this harness runs inside it.
pub const IN_SUITE: &str = "docs-test: `cargo test --workspace` is the run this harness is part of";

const CARGO_SHIM: &str = r#"#!/usr/bin/env bash
# docs harness: `cargo run -p tpu-operator -- ARGS` is the tpu-operator binary `cargo test` built.
if [ "$#" -ge 4 ] && [ "$1" = run ] && [ "$2" = -p ] && [ "$3" = tpu-operator ] && [ "$4" = -- ]; then
  shift 4
  exec tpu-operator "$@"
fi
if [ "$*" = "test --workspace" ]; then
  echo "$DOCS_TEST_IN_SUITE"
  exit 0
fi
echo "docs harness: \`cargo $*\` is not run by a doc block here; classify the block" >&2
exit 97
"#;

pub struct Shell {
    root: PathBuf,
    home: tempfile::TempDir,
}

impl Shell {
    /// A shell with `tpu-operator`, the `cargo` shim and the named tools (`kubectl`, `helm`).
    pub fn new(root: &Path, bin: &str, tools: &[&str]) -> Self {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        symlink(bin, dir.join("tpu-operator")).unwrap();
        for tool in tools {
            let path = match *tool {
                "kubectl" => test_tools::kubectl(),
                "helm" => test_tools::helm(),
                other => panic!("no such tool: {other}"),
            };
            symlink(path, dir.join(tool)).unwrap();
        }
        let cargo = dir.join("cargo");
        std::fs::write(&cargo, CARGO_SHIM).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self {
            root: root.to_path_buf(),
            home,
        }
    }

    /// A scratch directory that lives as long as the shell.
    pub fn scratch(&self) -> PathBuf {
        self.home.path().to_path_buf()
    }

    /// `bash -euo pipefail -c SCRIPT` in the repository root.
    pub fn command(&self, script: &str) -> Command {
        let path = format!(
            "{}:{}",
            self.home.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", script])
            .current_dir(&self.root)
            .env("PATH", path)
            .env("DOCS_TEST_IN_SUITE", IN_SUITE)
            .env("HELM_CACHE_HOME", self.home.path().join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("helm/config"))
            .env("HELM_DATA_HOME", self.home.path().join("helm/data"))
            .env_remove("KUBECONFIG");
        cmd
    }
}
