#!/usr/bin/env bash
# Builds gitops-judge (kstatus + Argo CD's Lua health runner, see main.go) from the Go modules
# pinned in this directory's go.mod/go.sum into a cache folder outside the checkout, and prints the
# binary's path. A second run with the same inputs is a no-op (the binary already exists).
#
#   TPU_OPERATOR_GITOPS_JUDGE_CACHE  cache root (default ~/.cache/tpu-operator/gitops-judge)
#   GO                               go command (default: go)
#
# Several test processes may call this at once (cargo runs test binaries in parallel and two
# crates use the judge): the build goes to a private temp folder that is renamed into place, and
# a lock (flock, when available) keeps the second caller from building the same key twice.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
go_cmd="${GO:-go}"
cache_root="${TPU_OPERATOR_GITOPS_JUDGE_CACHE:-$HOME/.cache/tpu-operator/gitops-judge}"

command -v "$go_cmd" >/dev/null || {
  echo "build.sh: '$go_cmd' not found; tests/gitops-judge is built from Go modules (Go >= 1.26)" >&2
  exit 2
}

# The key covers everything that decides the binary: module pins, our sources, the flags below
# (this script) and the Go toolchain version.
key="$( { cat "$here/go.mod" "$here/go.sum" "$here"/*.go "$here/build.sh"; "$go_cmd" version; } \
  | sha256sum | cut -c1-16)"
out="$cache_root/$key"
bin="$out/gitops-judge"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache_root"
if command -v flock >/dev/null; then
  exec 9>"$cache_root/.lock-$key"
  flock 9
  if [ -x "$bin" ]; then # built by the caller we waited for
    echo "$bin"
    exit 0
  fi
fi

tmp="$(mktemp -d "$cache_root/.build-$key-XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# Lean static binary: no DWARF/symbol tables, no local paths, no VCS stamp (the checkout may be a
# git tree the build user does not own). -mod=readonly: go.mod/go.sum are committed and complete.
(
  cd "$here"
  CGO_ENABLED=0 nice -n 19 "$go_cmd" build -mod=readonly -buildvcs=false -trimpath -ldflags="-s -w" \
    -o "$tmp/gitops-judge" .
) >&2
echo "build.sh: built gitops-judge in $(( $(date +%s) - start ))s into $out" >&2
# rename(2) of a folder onto an existing non-empty one fails: then another caller (without flock)
# finished first, and its binary is as good as ours.
if ! mv -T "$tmp" "$out" 2>/dev/null; then
  [ -x "$bin" ] || { echo "build.sh: could not move the build into $out" >&2; exit 1; }
fi
trap - EXIT
rm -rf "$tmp"
echo "$bin"
