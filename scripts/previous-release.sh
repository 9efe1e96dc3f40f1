#!/usr/bin/env bash
# Builds the previous release of this repository: its source, chart and examples from git, and its
# `tpu-operator` binary, for the upgrade suite (crates/operator/tests/upgrade.rs) and for anyone
# trying an upgrade by hand. Prints the directory that holds `src/` (the release's tree) and
# `bin/tpu-operator`. Cached under target/previous-release/<commit>: a second call builds nothing.
#
#   scripts/previous-release.sh [COMMIT]   (default: the commit docs/api-versions.md calls 0.1.0)
#
# The binary is built without default features, as the image is (no `local`, no embedded
# emulators: `run --gcp-emulator` needs neither), in a target directory of its own, because its
# `target/debug/tpu-operator` would otherwise replace this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."

# 0.1.0: main as it was before the v1beta1 API (docs/api-versions.md, "Versions").
commit="${1:-92c2fce219ed919fb25dc43e8097b9037f8f3a62}"
root="$PWD/target/previous-release/$commit"
if [ -x "$root/bin/tpu-operator" ] && [ -d "$root/src/charts/tpu-operator" ]; then
  echo "$root"
  exit 0
fi
git cat-file -e "$commit^{commit}" 2>/dev/null || {
  echo "previous-release: commit $commit is not in this clone (a shallow clone? fetch its history)" >&2
  exit 2
}
rm -rf "$root/src"
mkdir -p "$root/src" "$root/bin"
git archive "$commit" | tar -x -C "$root/src"
start=$(date +%s)
CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$PWD/target/previous-release/target" \
  cargo build --locked --quiet --manifest-path "$root/src/Cargo.toml" -p tpu-operator \
  --no-default-features --bin tpu-operator >&2
cp "$PWD/target/previous-release/target/debug/tpu-operator" "$root/bin/tpu-operator"
echo "previous-release: built $commit in $(($(date +%s) - start)) s" >&2
echo "$root"
